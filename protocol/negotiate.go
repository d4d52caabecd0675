package protocol

import (
	"context"
	"fmt"
	"time"

	"github.com/runstate/runstate"
)

// A client sends nothing its server did not announce (StoreInfo.Features):
// each field whose meaning a server of another version could drop falls
// back to what keeps the same promise, or is refused with
// runstate.ErrUnsupported naming the feature and both versions. This file
// holds both, for every call that carries such a field.

// unsupported refuses a call that needs feature, which the server lacks.
func (r *RemoteStore) unsupported(feature, consequence, remedy string) error {
	return &runstate.Error{Code: runstate.CodeUnsupported, Message: fmt.Sprintf("%s speaks protocol %s, which does not announce %s: %s; "+
		"this client speaks protocol %s. %s", r.peer, r.info.Speaks(), feature, consequence, Version, remedy)}
}

// principal checks the actor of a write: a principal the server would drop
// is refused, or dropped when the client was told to accept a trail
// without principals.
func (r *RemoteStore) principal(actor *runstate.Actor) error {
	if actor.Principal == "" || r.info.Has(FeaturePrincipal) {
		return nil
	}
	if !r.acceptNoPrincipal {
		return r.unsupported(FeaturePrincipal, fmt.Sprintf("it would write without recording the principal %q in the audit trail (AUD-010)", actor.Principal),
			"Upgrade the plugin or gateway, or accept a trail without principals (runstate-gateway --accept-trail-without-principals, protocol.RemoteOptions.AcceptNoPrincipal)")
	}
	actor.Principal = ""
	return nil
}

// wakeAt checks an update that parks or wakes its run: a server that does
// not keep wake_at would drop it and write the rest, so it is refused.
func (r *RemoteStore) wakeAt(p runstate.UpdateRunParams) error {
	if p.WakeAt == nil || r.info.Has(FeatureWakeAt) {
		return nil
	}
	consequence := "it would leave run " + p.RunID + " claimable at once instead of parked until " + p.WakeAt.UTC().Format(time.RFC3339Nano)
	if p.WakeAt.IsZero() {
		consequence = "it would drop the wake-up of run " + p.RunID + " and write the rest"
	}
	return r.unsupported(FeatureWakeAt, consequence,
		"Upgrade the plugin or gateway to protocol 1.8 or later; until then, a worker keeps a waiting run in hand instead of parking it")
}

// releaseAfter takes ReleaseLease out of an update for a server that
// cannot release in the update's write, and returns the second write that
// then does: called once the update was written, it releases the lease. A
// release that fails then is the call's error, with the update written: its
// lease is held until it expires, as after a worker that crashed.
func (r *RemoteStore) releaseAfter(p *runstate.UpdateRunParams) func(context.Context) error {
	if !p.ReleaseLease || r.info.Has(FeatureUpdateReleaseLease) {
		return func(context.Context) error { return nil }
	}
	p.ReleaseLease = false
	release := runstate.ReleaseLeaseParams{RunID: p.RunID, Token: p.LeaseToken}
	return func(ctx context.Context) error {
		// The update is written: its release is sent even if the caller
		// gives up now, as a worker's last write must not leave its lease
		// held (a bounded wait, as for any write).
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseAfterTimeout)
		defer cancel()
		err := r.ReleaseLease(ctx, release)
		if err == nil {
			return nil
		}
		return &runstate.Error{Code: runstate.CodeOf(err), RunID: p.RunID, Cause: err, Message: fmt.Sprintf(
			"the update of run %s was written, but releasing its lease then failed (%s speaks protocol %s, which releases in a call of its own): the lease is held until it expires",
			p.RunID, r.peer, r.info.Speaks())}
	}
}

// releaseAfterTimeout bounds the release that follows an update for a
// server that cannot release in the update's write.
const releaseAfterTimeout = 10 * time.Second

// oneClaimAtATime is the store without its batch claims, for
// runstate.ClaimRuns's fallback: a claim and then a start for each run.
type oneClaimAtATime struct{ *RemoteStore }

func (s oneClaimAtATime) Features() runstate.Features {
	f := s.RemoteStore.Features()
	f.BatchClaimer = nil
	return f
}
