package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/runstate/runstate/spec"
)

// Store is what Wrap returns: a spec.Store that also tells who holds a
// run's lease.
type Store interface {
	spec.Store
	spec.LeaseReader
}

// Wrap returns the spec.Store that d's storage serves. Every call checks
// its context (CTX-001) and validates and normalises its input (BAD-*)
// before d sees it; the kit decides the outcome of every write (FSM-*,
// CAS-*, LEASE-*, DIAG-*), builds the audit events (AUD-*), cuts pages and
// issues cursors (LIST-*), and answers claim-next (LEASE-013, LEASE-017).
// d stores, fetches and searches.
func Wrap(d Driver) Store { return &store{d: d} }

type store struct{ d Driver }

var _ Store = (*store)(nil)

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
	case spec.CodeOf(err) == spec.CodeNotFound && runID != "":
		return notFound(runID)
	case spec.CodeOf(err) != "":
		return err
	}
	return spec.Unavailable("the store failed", err)
}

// failed maps the error of a driver call that names no run, where a
// not-found is no answer of the contract.
func failed(err error) error {
	if spec.CodeOf(err) == spec.CodeNotFound {
		return spec.Unavailable("the store failed", err)
	}
	return result(err, "")
}

// modify is Driver.Modify after the context check. Every change
// normalises Current.Now itself (FSM-009).
func (s *store) modify(ctx context.Context, runID string, change func(Current) Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return result(s.d.Modify(ctx, runID, change), runID)
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
		case spec.CodeOf(err) != spec.CodeNotFound:
			return spec.RunSnapshot{}, result(err, "")
		}
	}
	now, err := s.d.Now(ctx)
	if err != nil {
		return spec.RunSnapshot{}, failed(err)
	}
	run, created, err := newRun(p, retried, now)
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	if err := s.d.Insert(ctx, InsertParams{Run: run, Created: created}); err != nil {
		if spec.CodeOf(err) == spec.CodeAlreadyExists { // RUN-003
			return spec.RunSnapshot{}, alreadyExists(p.RunID)
		}
		return spec.RunSnapshot{}, failed(err)
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
	return page(ctx, err, q.Limit, func(n int) ([]spec.RunSnapshot, error) {
		q.Limit = n
		return s.d.ListRuns(ctx, q)
	}, func(r spec.RunSnapshot) string { return PositionOf(r).cursor() })
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

// claiming is one claim in progress: take decides it on the run as a
// Modify or a NextClaimer read it, and records the outcome.
type claiming struct {
	req     claimRequest
	claim   spec.Claim
	refused error // what the claim rules refused, with nothing written
}

func (cl *claiming) take(cur Current) Change {
	cur.Now = Timestamp(cur.Now)
	cl.claim, cl.refused = spec.Claim{}, nil
	lease, err := cur.Lease.claim(cur.Run, cl.req, cur.Now)
	if err != nil {
		cl.refused = err
		return Change{}
	}
	cl.claim = spec.Claim{Lease: lease.lease(cur.Run.RunID), Run: cur.Run.Clone()}
	return Change{Lease: &lease}
}

// ClaimRun implements spec.LeaseStore.
func (s *store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	c, err := prepareClaimRun(p)
	if err != nil {
		return spec.Claim{}, err
	}
	cl := &claiming{req: c}
	if err := s.modify(ctx, p.RunID, cl.take); err != nil {
		return spec.Claim{}, err
	}
	if cl.refused != nil {
		return spec.Claim{}, cl.refused
	}
	return cl.claim, nil
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
	if nc, ok := s.d.(NextClaimer); ok {
		cl := &claiming{req: c}
		q.Claimant = &cl.req.Owner
		found, err := nc.ClaimNext(ctx, q, cl.take)
		switch {
		case err != nil:
			return spec.Claim{}, failed(err)
		case !found:
			return spec.Claim{}, nothingRunnable()
		case cl.refused != nil: // the driver offered a run q does not admit
			return spec.Claim{}, spec.Unavailable("claim-next: the store offered a run it may not claim", cl.refused)
		}
		return cl.claim, nil
	}
	return s.claimNext(ctx, q, c)
}

// claimNext is the kit's claim-next: the candidates in claim order, each
// claimed in its own Modify if it is still admitted when read there. An
// empty candidate list is the driver's answer at one instant, so "nothing
// runnable" is true when it is given (LEASE-017); a candidate another
// claimer took meanwhile is passed over.
func (s *store) claimNext(ctx context.Context, q RunnableQuery, c claimRequest) (spec.Claim, error) {
	q.Limit, q.Claimant = claimBatch, &c.Owner
	for range maxClaimRounds {
		candidates, err := s.d.Runnable(ctx, q)
		if err != nil {
			return spec.Claim{}, failed(err)
		}
		if len(candidates) == 0 {
			return spec.Claim{}, nothingRunnable() // LEASE-013
		}
		for _, run := range candidates {
			cl := &claiming{req: c}
			err := s.modify(ctx, run.RunID, func(cur Current) Change {
				if !q.Admits(cur.Run, cur.Lease, Timestamp(cur.Now)) {
					cl.claim, cl.refused = spec.Claim{}, errPassedOver
					return Change{}
				}
				return cl.take(cur)
			})
			switch {
			case spec.CodeOf(err) == spec.CodeNotFound: // removed meanwhile
				continue
			case err != nil:
				return spec.Claim{}, err
			case cl.refused == nil:
				return cl.claim, nil
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
		next, err := cur.Lease.renew(p.RunID, p.Token, p.TTL, Timestamp(cur.Now))
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
	return page(ctx, err, q.Limit, func(n int) ([]spec.RunSnapshot, error) {
		q.Limit = n
		return s.d.Runnable(ctx, q)
	}, func(r spec.RunSnapshot) string { return RunnablePositionOf(r).cursor() })
}

// page is a listing of limit runs once its input passed its check
// (prepared nil): read is asked for one run more, which says that another
// page follows, from the cursor after the page's last run; the last page
// has no cursor (LIST-005, LIST-006).
func page(ctx context.Context, prepared error, limit int, read func(n int) ([]spec.RunSnapshot, error), cursorAfter func(spec.RunSnapshot) string) (spec.RunPage, error) {
	if prepared != nil {
		return spec.RunPage{}, prepared
	}
	if err := ctx.Err(); err != nil {
		return spec.RunPage{}, err
	}
	runs, err := read(limit + 1)
	if err != nil {
		return spec.RunPage{}, failed(err)
	}
	if len(runs) <= limit {
		return spec.RunPage{Runs: runs}, nil
	}
	return spec.RunPage{Runs: runs[:limit], NextCursor: cursorAfter(runs[limit-1])}, nil
}

// GetLease implements spec.LeaseReader with the driver's LeaseReader, else
// with a Modify that reads the lease and writes nothing.
func (s *store) GetLease(ctx context.Context, runID string) (spec.Lease, error) {
	if err := prepareGet(runID); err != nil {
		return spec.Lease{}, err
	}
	if r, ok := s.d.(LeaseReader); ok {
		if err := ctx.Err(); err != nil {
			return spec.Lease{}, err
		}
		l, err := r.GetLease(ctx, runID)
		if err != nil {
			return spec.Lease{}, result(err, runID)
		}
		return l.lease(runID), nil
	}
	var lease spec.Lease
	err := s.modify(ctx, runID, func(cur Current) Change {
		lease = cur.Lease.lease(runID)
		return Change{}
	})
	if err != nil {
		return spec.Lease{}, err
	}
	return lease, nil
}
