package protocol

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// A store's features cross the wire by name, in OpenResponse.features: the
// server names what its store can do, and the client's store has exactly
// those (docs/protocol.md, "Features"). The names are part of the
// protocol and never change.
const (
	FeatureLeases        = "leases"
	FeatureLeaseReader   = "lease_reader"
	FeatureBatchCreate   = "batch_create"
	FeatureBatchUpdate   = "batch_update"
	FeatureBatchClaim    = "batch_claim"
	FeatureWatchRunnable = "watch_runnable"
	FeatureWatchRun      = "watch_run"
)

// Fields whose meaning a peer must not drop: a server names each it keeps,
// and a client sends none that its server does not name (protobuf drops a
// field it does not know without a word). Each falls back or is refused,
// as docs/protocol.md says.
const (
	// FeatureUpdateReleaseLease: UpdateRun's and UpdateRuns' release_lease
	// releases the lease in the update's own write (LEASE-022). Without it
	// the client falls back to the update and then a ReleaseLease call:
	// two writes.
	FeatureUpdateReleaseLease = "update_release_lease"
	// FeaturePrincipal: a write's actor.principal is recorded in its audit
	// events (AUD-010). Without it the client refuses a write that carries
	// a principal (runstate.ErrUnsupported), unless told to accept a trail
	// without principals (RemoteOptions.AcceptNoPrincipal).
	FeaturePrincipal = "principal"
	// FeatureBatchClaimStart: ClaimRuns' start moves each claimed run to
	// running in the claim's write (BATCH-008). Without it the client
	// claims one run at a time and starts each with an UpdateRun, as
	// runstate.ClaimRuns does for a store without batch claims: two
	// writes per run.
	FeatureBatchClaimStart = "batch_claim_start"
	// FeatureWakeAt: UpdateRun's and UpdateRuns' wake_at parks or wakes
	// the run (WAKE-001, WAKE-002), and Run.wake_at carries it (1.8).
	// Without it the client refuses an update that sets WakeAt
	// (runstate.ErrUnsupported): a server that dropped it would leave the
	// run claimable, and its worker would take it at once.
	FeatureWakeAt = "wake_at"
)

// keptFields are the fields with meaning this version's server keeps: all
// of them, whatever its store, as a store honours the whole contract (and
// a store across another boundary falls back or refuses on its own).
var keptFields = []string{FeatureUpdateReleaseLease, FeaturePrincipal, FeatureBatchClaimStart, FeatureWakeAt}

// Features names every feature this version of the protocol knows: the
// store features, then the fields with meaning, as a server of this
// version may announce them.
func Features() []string {
	names := make([]string, 0, len(storeFeatures)+len(keptFields))
	for _, sf := range storeFeatures {
		names = append(names, sf.name)
	}
	return append(names, keptFields...)
}

// storeFeatures pairs each store feature's name with whether a
// runstate.Features has it and how the client's store gives it, one row
// per field of runstate.Features (TestEveryCombinationOfFeaturesSurvivesEveryWrapper
// fails on a field without one).
var storeFeatures = []struct {
	name string
	has  func(runstate.Features) bool
	set  func(*runstate.Features, *RemoteStore)
}{
	{FeatureLeases, func(f runstate.Features) bool { return f.Leases != nil }, func(f *runstate.Features, r *RemoteStore) { f.Leases = r }},
	{FeatureLeaseReader, func(f runstate.Features) bool { return f.LeaseReader != nil }, func(f *runstate.Features, r *RemoteStore) { f.LeaseReader = r }},
	{FeatureBatchCreate, func(f runstate.Features) bool { return f.BatchCreator != nil }, func(f *runstate.Features, r *RemoteStore) { f.BatchCreator = remoteCreator{r} }},
	{FeatureBatchUpdate, func(f runstate.Features) bool { return f.BatchUpdater != nil }, func(f *runstate.Features, r *RemoteStore) { f.BatchUpdater = remoteUpdater{r} }},
	{FeatureBatchClaim, func(f runstate.Features) bool { return f.BatchClaimer != nil }, func(f *runstate.Features, r *RemoteStore) { f.BatchClaimer = remoteClaimer{r} }},
	{FeatureWatchRunnable, func(f runstate.Features) bool { return f.RunnableWatcher != nil }, func(f *runstate.Features, r *RemoteStore) { f.RunnableWatcher = r }},
	{FeatureWatchRun, func(f runstate.Features) bool { return f.RunWatcher != nil }, func(f *runstate.Features, r *RemoteStore) { f.RunWatcher = r }},
}

// featureNames names the features f has.
func featureNames(f runstate.Features) []string {
	var names []string
	for _, sf := range storeFeatures {
		if sf.has(f) {
			names = append(names, sf.name)
		}
	}
	return names
}

// keptSince16 are the fields with meaning a server of 1.6 keeps, of those
// it has: release with an update (1.2), the principal (1.3), and a batch
// claim's start (1.1, with batch claims).
func keptSince16(features []string) []string {
	kept := []string{FeatureUpdateReleaseLease, FeaturePrincipal}
	if slices.Contains(features, FeatureBatchClaim) {
		kept = append(kept, FeatureBatchClaimStart)
	}
	return kept
}

// answersSetClock reports whether the server has SetClock, which 1.6
// added: any answer but UNIMPLEMENTED (a clock time of zero is refused by
// every server that has it, and moves nothing). A server that does not
// answer at all leaves the question open: that is an error, as Open's own
// failure would be, rather than a guess that would hold for the
// connection's life.
func answersSetClock(ctx context.Context, route Route) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	callCtx, end := route.bind(ctx)
	defer end()
	_, err := route.Client.SetClock(callCtx, &pb.SetClockRequest{})
	switch status.Code(err) {
	case codes.Unimplemented:
		return false, nil
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false, err
	}
	return true, nil
}

// featuresOfResponse reads the features an Open answer names: its list,
// or, from a server older than the list, its fields (with leases, a
// server of that age could always tell who holds one).
func featuresOfResponse(resp *pb.OpenResponse) []string {
	if len(resp.Features) > 0 {
		return resp.Features
	}
	var names []string
	add := func(on bool, name string) {
		if on {
			names = append(names, name)
		}
	}
	add(resp.Leases, FeatureLeases)
	add(resp.Leases, FeatureLeaseReader)
	add(resp.CreateRuns, FeatureBatchCreate)
	add(resp.UpdateRuns, FeatureBatchUpdate)
	add(resp.ClaimRuns && resp.Leases, FeatureBatchClaim)
	add(resp.WatchRunnable && resp.Leases, FeatureWatchRunnable)
	add(resp.WatchRun, FeatureWatchRun)
	return names
}

// Has reports whether the server named the feature.
func (i StoreInfo) Has(feature string) bool { return slices.Contains(i.Features, feature) }
