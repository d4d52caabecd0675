package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/runstate/runstate/spec"
)

// Wrap returns the spec.Store that d's storage serves. Every call checks
// its context (CTX-001) and validates and normalises its input (BAD-*)
// before d sees it; the kit decides the outcome of every write (FSM-*,
// CAS-*, LEASE-*, DIAG-*), builds the audit events (AUD-*), cuts pages and
// issues cursors (LIST-*), and answers claim-next (LEASE-013, LEASE-017).
// d stores, fetches and searches.
func Wrap(d Driver) spec.Store { return &store{d: d} }

type store struct{ d Driver }

var _ spec.Store = (*store)(nil)

// maxClaimRounds bounds how often the kit's claim-next looks again after
// other claimers took every candidate it found. Each such round is other
// claimers' success, so the bound is reached only under a storm of claims.
const maxClaimRounds = 64

// claimBatch is how many candidates the kit's claim-next reads at once, so
// that claimers racing for the head of the queue fall through to the next
// candidates without reading again.
const claimBatch = 8

// result maps a driver's error to the contract's: the contract's own and a
// context's pass, a not-found gets the kit's words for runID, anything else
// is ErrUnavailable, with the driver's error as its cause.
func result(err error, runID string) error {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, spec.ErrNotFound) && runID != "":
		return notFound(runID)
	case spec.CodeOf(err) != "":
		return err
	}
	return spec.Unavailable("the store failed", err)
}

// modify is Driver.Modify with the store's time normalised (FSM-009).
func (s *store) modify(ctx context.Context, runID string, change func(Current) Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return result(s.d.Modify(ctx, runID, func(cur Current) Change {
		cur.Now = Timestamp(cur.Now)
		return change(cur)
	}), runID)
}

// number gives events their Seq, after the run's last (AUD-002, AUD-005).
func number(events []spec.AuditEvent, lastSeq int64) []spec.AuditEvent {
	for i := range events {
		events[i].Seq = lastSeq + int64(i) + 1
	}
	return events
}

// CreateRun implements spec.RunStateStore.
func (s *store) CreateRun(ctx context.Context, p spec.CreateRunParams) (spec.RunSnapshot, error) {
	if err := prepareCreate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.RunSnapshot{}, err
	}
	// A retried run is terminal, and a terminal run never changes, so
	// reading it before the insert decides as well as reading it within.
	var retried *spec.RunSnapshot
	if p.RetryOf != "" {
		r, err := s.d.Get(ctx, p.RetryOf)
		switch {
		case err == nil:
			retried = &r
		case !errors.Is(err, spec.ErrNotFound):
			return spec.RunSnapshot{}, result(err, "")
		}
	}
	now, err := s.d.Now(ctx)
	if err != nil {
		return spec.RunSnapshot{}, result(err, "")
	}
	run, created, err := newRun(p, retried, now)
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	if err := s.d.Insert(ctx, NewRun{Run: run, Created: created}); err != nil {
		if errors.Is(err, spec.ErrAlreadyExists) { // RUN-003
			return spec.RunSnapshot{}, alreadyExists(p.RunID)
		}
		return spec.RunSnapshot{}, result(err, "")
	}
	return run, nil
}

// UpdateRun implements spec.RunStateStore with the outcome applyUpdate
// decides on the run as Modify read it.
func (s *store) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (spec.RunSnapshot, error) {
	if err := prepareUpdate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	var out updateOutcome
	err := s.modify(ctx, p.RunID, func(cur Current) Change {
		out = applyUpdate(cur.Run, cur.Lease, p, cur.Now)
		change := Change{Events: number(out.Events, cur.LastSeq)}
		if out.Write {
			change.Run = &out.Snapshot
		}
		return change
	})
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return out.Result()
}

// GetRun implements spec.RunStateStore.
func (s *store) GetRun(ctx context.Context, runID string) (spec.RunSnapshot, error) {
	if err := prepareGet(runID); err != nil {
		return spec.RunSnapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.RunSnapshot{}, err
	}
	run, err := s.d.Get(ctx, runID)
	if err != nil {
		return spec.RunSnapshot{}, result(err, runID) // RUN-004
	}
	return run, nil
}

// ListRuns implements spec.RunStateStore: one run more than the page tells
// whether another page follows; the last page has no cursor (LIST-005).
func (s *store) ListRuns(ctx context.Context, p spec.ListRunsParams) (spec.RunPage, error) {
	q, err := prepareListRuns(p)
	if err != nil {
		return spec.RunPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.RunPage{}, err
	}
	limit := q.Limit
	q.Limit++
	runs, err := s.d.ListRuns(ctx, q)
	if err != nil {
		return spec.RunPage{}, result(err, "")
	}
	return pageOf(runs, limit, func(r spec.RunSnapshot) string { return PositionOf(r).cursor() }), nil
}

// ListAuditEvents implements spec.RunStateStore.
func (s *store) ListAuditEvents(ctx context.Context, p spec.ListAuditParams) (spec.AuditPage, error) {
	limit, err := prepareAuditQuery(p)
	if err != nil {
		return spec.AuditPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.AuditPage{}, err
	}
	events, err := s.d.ListAudit(ctx, AuditQuery{RunID: p.RunID, AfterSeq: p.AfterSeq, Limit: limit + 1})
	if err != nil {
		return spec.AuditPage{}, result(err, p.RunID)
	}
	page := spec.AuditPage{Events: events, More: len(events) > limit}
	if page.More {
		page.Events = events[:limit]
	}
	return page, nil
}

// take returns the function that claims a run for c in a Modify, setting
// *claim on success and *refused when the claim rules refuse it.
func take(c claimRequest, claim *spec.Claim, refused *error) func(Current) Change {
	return func(cur Current) Change {
		*claim, *refused = spec.Claim{}, nil
		lease, err := cur.Lease.claim(cur.Run, c, cur.Now)
		if err != nil {
			*refused = err
			return Change{}
		}
		*claim = spec.Claim{Lease: lease.lease(cur.Run.RunID), Run: cur.Run.Clone()}
		return Change{Lease: &lease}
	}
}

// ClaimRun implements spec.LeaseStore.
func (s *store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	c, err := prepareClaimRun(p)
	if err != nil {
		return spec.Claim{}, err
	}
	var claim spec.Claim
	var refused error
	if err := s.modify(ctx, p.RunID, take(c, &claim, &refused)); err != nil {
		return spec.Claim{}, err
	}
	if refused != nil {
		return spec.Claim{}, refused
	}
	return claim, nil
}

// ClaimNextRun implements spec.LeaseStore, with the driver's NextClaimer
// when it has one.
func (s *store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	q, c, err := prepareClaimNext(p)
	if err != nil {
		return spec.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.Claim{}, err
	}
	var claim spec.Claim
	var refused error
	if nc, ok := s.d.(NextClaimer); ok {
		found, err := nc.ClaimNext(ctx, q, func(cur Current) Change {
			cur.Now = Timestamp(cur.Now)
			return take(c, &claim, &refused)(cur)
		})
		switch {
		case err != nil:
			return spec.Claim{}, result(err, "")
		case refused != nil: // the driver offered a run q does not admit
			return spec.Claim{}, spec.Unavailable("claim-next: the store offered a run it may not claim", refused)
		case !found:
			return spec.Claim{}, nothingRunnable()
		}
		return claim, nil
	}
	return s.claimNext(ctx, q, c)
}

// claimNext is the kit's claim-next: the candidates in claim order, each
// claimed in its own Modify if it is still admitted when read there. An
// empty candidate list is the driver's answer at one instant, so "nothing
// runnable" is true when it is given (LEASE-017); a candidate another
// claimer took meanwhile is passed over.
func (s *store) claimNext(ctx context.Context, q RunnableQuery, c claimRequest) (spec.Claim, error) {
	q.Limit = claimBatch
	for range maxClaimRounds {
		candidates, err := s.d.Runnable(ctx, q)
		if err != nil {
			return spec.Claim{}, result(err, "")
		}
		if len(candidates) == 0 {
			return spec.Claim{}, nothingRunnable() // LEASE-013
		}
		for _, run := range candidates {
			var claim spec.Claim
			var refused error
			claimIfAdmitted := take(c, &claim, &refused)
			err := s.modify(ctx, run.RunID, func(cur Current) Change {
				if !q.Admits(cur.Run, cur.Lease, cur.Now) {
					claim, refused = spec.Claim{}, errPassedOver
					return Change{}
				}
				return claimIfAdmitted(cur)
			})
			switch {
			case errors.Is(err, spec.ErrNotFound):
				continue
			case err != nil:
				return spec.Claim{}, err
			case refused == nil:
				return claim, nil
			}
		}
	}
	return spec.Claim{}, spec.Unavailable(fmt.Sprintf("claim-next: other claimers took every run it found, %d times in a row; try again", maxClaimRounds), nil)
}

// errPassedOver marks a candidate that was no longer claimable when read.
var errPassedOver = errors.New("passed over")

// RenewLease implements spec.LeaseStore.
func (s *store) RenewLease(ctx context.Context, p spec.RenewLeaseParams) (spec.Lease, error) {
	if err := prepareRenew(p); err != nil {
		return spec.Lease{}, err
	}
	var lease spec.Lease
	var refused error
	err := s.modify(ctx, p.RunID, func(cur Current) Change {
		next, err := cur.Lease.renew(p.RunID, p.Token, p.TTL, cur.Now)
		if lease, refused = next.lease(p.RunID), err; err != nil {
			return Change{}
		}
		return Change{Lease: &next}
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return spec.Lease{}, err
	}
	return lease, nil
}

// ReleaseLease implements spec.LeaseStore.
func (s *store) ReleaseLease(ctx context.Context, p spec.ReleaseLeaseParams) error {
	if err := prepareRelease(p); err != nil {
		return err
	}
	var refused error
	err := s.modify(ctx, p.RunID, func(cur Current) Change {
		next, err := cur.Lease.release(p.RunID, p.Token)
		if refused = err; err != nil {
			return Change{}
		}
		return Change{Lease: &next}
	})
	if err == nil {
		err = refused
	}
	return err
}

// ListRunnableRuns implements spec.LeaseStore.
func (s *store) ListRunnableRuns(ctx context.Context, p spec.ListRunnableParams) (spec.RunPage, error) {
	q, err := prepareRunnable(p.Filter, p.Limit, p.Cursor)
	if err != nil {
		return spec.RunPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.RunPage{}, err
	}
	limit := q.Limit
	q.Limit++
	runs, err := s.d.Runnable(ctx, q)
	if err != nil {
		return spec.RunPage{}, result(err, "")
	}
	return pageOf(runs, limit, func(r spec.RunSnapshot) string { return RunnablePositionOf(r).cursor() }), nil
}

// pageOf cuts runs, read with one run more than limit, to a page: the
// extra run says that another page follows, from the cursor after the
// page's last run; the last page has no cursor (LIST-005, LIST-006).
func pageOf(runs []spec.RunSnapshot, limit int, cursorAfter func(spec.RunSnapshot) string) spec.RunPage {
	if len(runs) <= limit {
		return spec.RunPage{Runs: runs}
	}
	return spec.RunPage{Runs: runs[:limit], NextCursor: cursorAfter(runs[limit-1])}
}
