package driver

import (
	"slices"
	"time"

	"github.com/runstate/runstate"
)

// LeaseState is what a store keeps about a run's lease: the last lease
// issued (Token 0: never leased). A driver stores it as it is and returns
// it in Current; the kit decides every change to it. Lease changes never
// change a run's version or audit trail (LEASE-014), nor its updated_at:
// a Change without a Run leaves the stored snapshot as it is, so a store
// stamps no updated_at on every write of the run's row (CAS-005).
//
// Stores that keep it as JSON keep these names: they are part of stored data.
type LeaseState struct {
	Owner      runstate.Owner `json:"Owner"`
	Token      int64          `json:"Token"`
	AcquiredAt time.Time      `json:"AcquiredAt"`
	ExpiresAt  time.Time      `json:"ExpiresAt"`
	Released   bool           `json:"Released"`
}

// Live reports whether the lease still excludes other claimants at now. It
// has expired from ExpiresAt on (LEASE-018), and is live until then however
// near it is: a search that judges it with a margin offers claim-next a run
// it may not claim (LEASE-024); a released lease is not live (LEASE-009).
func (l LeaseState) Live(now time.Time) bool {
	return l.Token > 0 && !l.Released && now.Before(l.ExpiresAt)
}

// Held reports whether the lease keeps the run out of the unleased queue:
// issued and not released. A held lease that expired is claimable again,
// but still renewable by its owner (LEASE-015).
func (l LeaseState) Held() bool { return l.Token > 0 && !l.Released }

// BlocksClaim reports whether the lease stops by from claiming at now: it is
// live and held by someone other than a previous incarnation of by's worker
// (LEASE-001, LEASE-012).
func (l LeaseState) BlocksClaim(by runstate.Owner, now time.Time) bool {
	if !l.Live(now) {
		return false
	}
	return !(l.Owner.Worker == by.Worker && l.Owner.Incarnation != by.Incarnation)
}

// lease returns the public view of the state for runID.
func (l LeaseState) lease(runID string) runstate.Lease {
	return runstate.Lease{RunID: runID, Owner: l.Owner, Token: l.Token, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// claimRequest is a validated claim: of a named run, or of claim-next's pick.
type claimRequest struct {
	Owner    runstate.Owner
	TTL      time.Duration
	Statuses []runstate.RunStatus
}

// claim decides a claim of run at now by c. It returns the new state or the
// reason the claim fails (ErrNotClaimable, ErrLeaseHeld). A terminal run is
// never claimable (LEASE-008); a live lease of another owner blocks (LEASE-001).
func (l LeaseState) claim(run runstate.RunSnapshot, c claimRequest, now time.Time) (LeaseState, error) {
	if run.Status.Terminal() {
		return l, &runstate.Error{Code: runstate.CodeNotClaimable, RunID: run.RunID, Message: "run " + run.RunID + " is " + string(run.Status) + ": terminal runs are never claimable"}
	}
	if !slices.Contains(c.Statuses, run.Status) {
		return l, &runstate.Error{Code: runstate.CodeNotClaimable, RunID: run.RunID,
			Message: "run " + run.RunID + " is " + string(run.Status) + ", not one of the claimable statuses " + joinStatuses(c.Statuses)}
	}
	if l.BlocksClaim(c.Owner, now) {
		return l, leaseHeld(run.RunID)
	}
	if run.WakeAt.After(now) { // parked (WAKE-001)
		return l, &runstate.Error{Code: runstate.CodeNotClaimable, RunID: run.RunID,
			Message: "run " + run.RunID + " is parked until " + run.WakeAt.Format(time.RFC3339Nano) + ": it is claimable from then on, or once woken"}
	}
	// The token is larger than every earlier one of the run, across expiries
	// and releases (LEASE-005, LEASE-009, LEASE-016).
	return LeaseState{Owner: c.Owner, Token: l.Token + 1, AcquiredAt: now, ExpiresAt: Timestamp(now.Add(c.TTL))}, nil
}

// checkFence checks the token of a fenced write (0: unfenced, always passes:
// LEASE-019). A token that is not the current one, or was released, is
// ErrLeaseLost (LEASE-006, LEASE-009); expiry alone loses nothing (LEASE-015).
func (l LeaseState) checkFence(runID string, token int64) error {
	switch {
	case token == 0:
		return nil
	case l.Token == 0:
		return leaseLost(runID, token, "the run has never been leased")
	case token != l.Token:
		return leaseLost(runID, token, "the run was claimed again since (current token is newer)")
	case l.Released:
		return leaseLost(runID, token, "the lease was released")
	}
	return nil
}

// renew decides a renewal of the lease with token for ttl at now: expiry
// now + ttl, not AcquiredAt + ttl, same owner and token (LEASE-004). A stale or released token is
// ErrLeaseLost (LEASE-007); an expired lease nobody claimed renews (LEASE-015).
func (l LeaseState) renew(runID string, token int64, ttl time.Duration, now time.Time) (LeaseState, error) {
	if err := l.checkFence(runID, token); err != nil {
		return l, err
	}
	l.ExpiresAt = Timestamp(now.Add(ttl))
	return l, nil
}

// release decides the release of the lease with token (LEASE-007, LEASE-009).
func (l LeaseState) release(runID string, token int64) (LeaseState, error) {
	if err := l.checkFence(runID, token); err != nil {
		return l, err
	}
	l.Released = true
	return l, nil
}

// Queue is where claims look for a run. Stores that index runs for claims
// keep it with the run and move it with every write of the run or its
// lease, so that each claim candidate search reads one index range.
type Queue int

// The queues; their numbers are stored (in a SQL column, a key prefix), so
// they never change.
const (
	// QueueNone: a terminal run, never claimed again.
	QueueNone Queue = 0
	// QueueUnleased: never leased, or released; claimed in claim order.
	QueueUnleased Queue = 1
	// QueueLeased: leased; claimable again once the lease expires.
	QueueLeased Queue = 2
	// QueueParked: unleased and parked (runstate.RunSnapshot.WakeAt);
	// claimable from its wake time on, in claim order among the runs
	// claimable then (WAKE-001). Kept by wake time, so that a claim reads
	// only the parked runs that are due, however many wait.
	QueueParked Queue = 3
)

// QueueOf returns the queue of a run with snapshot run and lease l.
func QueueOf(run runstate.RunSnapshot, l LeaseState) Queue {
	switch {
	case run.Status.Terminal():
		return QueueNone
	case l.Held():
		return QueueLeased
	case !run.WakeAt.IsZero():
		return QueueParked
	}
	return QueueUnleased
}
