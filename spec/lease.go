package spec

import (
	"slices"
	"time"
)

// LeaseState is what a store keeps about a run's lease: the last lease
// issued (Token 0: never leased). Its methods are the lease rules; a store
// loads the state, calls one, and saves the result atomically with the check.
// They change only the lease, never the run's version or audit trail (LEASE-014).
type LeaseState struct {
	Owner      Owner
	Token      int64
	AcquiredAt time.Time
	ExpiresAt  time.Time
	Released   bool
}

// Live reports whether the lease still excludes other claimants at now. It
// has expired from ExpiresAt on (LEASE-018); a released lease is not live (LEASE-009).
func (l LeaseState) Live(now time.Time) bool {
	return l.Token > 0 && !l.Released && now.Before(l.ExpiresAt)
}

// BlocksClaim reports whether the lease stops by from claiming at now: it is
// live and held by someone other than a previous incarnation of by's worker
// (LEASE-001, LEASE-012).
func (l LeaseState) BlocksClaim(by Owner, now time.Time) bool {
	if !l.Live(now) {
		return false
	}
	return !(l.Owner.Worker == by.Worker && l.Owner.Incarnation != by.Incarnation)
}

// Lease returns the public view of the state for runID.
func (l LeaseState) Lease(runID string) Lease {
	return Lease{RunID: runID, Owner: l.Owner, Token: l.Token, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// PreparedClaim is a validated claim of a named run.
type PreparedClaim struct {
	RunID    string
	Owner    Owner
	TTL      time.Duration
	Statuses []RunStatus
}

// PrepareClaimRun validates p (BAD-001, BAD-002, BAD-004); statuses default
// to queued and waiting (LEASE-011).
func PrepareClaimRun(p ClaimRunParams) (PreparedClaim, error) {
	if err := ValidateRunID(p.RunID); err != nil {
		return PreparedClaim{}, err
	}
	if err := ValidateOwner(p.Owner); err != nil {
		return PreparedClaim{}, err
	}
	if err := ValidateTTL(p.TTL); err != nil {
		return PreparedClaim{}, err
	}
	st, err := parseStatuses("statuses", p.Statuses, DefaultRunnableStatuses(), true)
	if err != nil {
		return PreparedClaim{}, err
	}
	return PreparedClaim{RunID: p.RunID, Owner: p.Owner, TTL: p.TTL, Statuses: st}, nil
}

// PrepareClaimNext validates p (BAD-002, BAD-004).
func PrepareClaimNext(p ClaimNextParams) (RunnableQuery, error) {
	if err := ValidateOwner(p.Owner); err != nil {
		return RunnableQuery{}, err
	}
	if err := ValidateTTL(p.TTL); err != nil {
		return RunnableQuery{}, err
	}
	return PrepareRunnable(p.Filter, 1, "")
}

// Claim decides a claim of run by owner for ttl at now, allowed only when
// the run is in one of statuses. It returns the new state or the reason the
// claim fails (ErrNotClaimable, ErrLeaseHeld). A terminal run is never
// claimable (LEASE-008); a live lease of another owner blocks (LEASE-001).
func (l LeaseState) Claim(run RunSnapshot, owner Owner, ttl time.Duration, statuses []RunStatus, now time.Time) (LeaseState, error) {
	if run.Status.Terminal() {
		return l, &Error{Code: CodeNotClaimable, RunID: run.RunID, Message: "run " + run.RunID + " is " + string(run.Status) + ": terminal runs are never claimable"}
	}
	if !slices.Contains(statuses, run.Status) {
		return l, &Error{Code: CodeNotClaimable, RunID: run.RunID,
			Message: "run " + run.RunID + " is " + string(run.Status) + ", not one of the claimable statuses " + joinStatuses(statuses)}
	}
	if l.BlocksClaim(owner, now) {
		return l, LeaseHeld(run.RunID)
	}
	// The token is larger than every earlier one of the run, across expiries
	// and releases (LEASE-005, LEASE-009, LEASE-016).
	return LeaseState{Owner: owner, Token: l.Token + 1, AcquiredAt: now, ExpiresAt: now.Add(ttl)}, nil
}

// CheckFence checks the token of a fenced write (0: unfenced, always passes:
// LEASE-019). A token that is not the current one, or was released, is
// ErrLeaseLost (LEASE-006, LEASE-009); expiry alone loses nothing (LEASE-015).
func (l LeaseState) CheckFence(runID string, token int64) error {
	switch {
	case token == 0:
		return nil
	case l.Token == 0:
		return LeaseLost(runID, token, "the run has never been leased")
	case token != l.Token:
		return LeaseLost(runID, token, "the run was claimed again since (current token is newer)")
	case l.Released:
		return LeaseLost(runID, token, "the lease was released")
	}
	return nil
}

// Renew decides a renewal of the lease with token for ttl at now: expiry
// now + ttl, same owner and token (LEASE-004). A stale or released token is
// ErrLeaseLost (LEASE-007); an expired lease nobody claimed renews (LEASE-015).
func (l LeaseState) Renew(runID string, token int64, ttl time.Duration, now time.Time) (LeaseState, error) {
	if err := l.CheckFence(runID, token); err != nil {
		return l, err
	}
	l.ExpiresAt = now.Add(ttl)
	return l, nil
}

// Release decides the release of the lease with token (LEASE-007, LEASE-009).
func (l LeaseState) Release(runID string, token int64) (LeaseState, error) {
	if err := l.CheckFence(runID, token); err != nil {
		return l, err
	}
	l.Released = true
	return l, nil
}

// PrepareRenew validates p (BAD-001, BAD-004).
func PrepareRenew(p RenewLeaseParams) error {
	if err := ValidateRunID(p.RunID); err != nil {
		return err
	}
	if err := ValidateToken(p.Token); err != nil {
		return err
	}
	return ValidateTTL(p.TTL)
}

// PrepareRelease validates p (BAD-001, BAD-004).
func PrepareRelease(p ReleaseLeaseParams) error {
	if err := ValidateRunID(p.RunID); err != nil {
		return err
	}
	return ValidateToken(p.Token)
}
