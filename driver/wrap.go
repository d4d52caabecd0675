package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/runstate/runstate"
)

// Store is what Wrap returns: a runstate.Store that also tells who holds a
// run's lease and takes batches of updates and claims (a BatchCreator too
// when the driver is a BatchInserter), and closes its driver. Its Features
// say all of that, so a struct that embeds it keeps every feature.
type Store interface {
	runstate.Store
	runstate.LeaseReader
	runstate.BatchUpdater
	runstate.BatchClaimer
	// Close closes the driver when it has a Close method (io.Closer, or
	// a Close without a result), and does nothing otherwise: a program, or
	// plugin.Serve, closes any store built on the kit the same way.
	Close() error
}

// Wrap returns the runstate.Store that d's storage serves. Every call checks
// its context (CTX-001) and validates and normalises its input (BAD-*)
// before d sees it; the kit decides the outcome of every write (FSM-*,
// CAS-*, LEASE-*, DIAG-*), builds the audit events (AUD-*), cuts pages and
// issues cursors (LIST-*), and answers claim-next (LEASE-013, LEASE-017).
// d stores, fetches and searches.
//
// The store applies batches (runstate.BatchUpdater, runstate.BatchClaimer)
// natively when d is a BatchModifier or BatchNextClaimer, else item by
// item; it is a runstate.BatchCreator only when d is a BatchInserter.
// Concurrent single writes coalesce into shared writes where d has the
// batch interface for them (GroupCommit, with its defaults); WrapWith
// configures that.
func Wrap(d Driver) Store { return WrapWith(d, WrapOptions{}) }

// WrapWith is Wrap with options.
func WrapWith(d Driver, opts WrapOptions) Store {
	w := &wrapped{d: d, log: opts.Logger, keeps: keepsOf(d)}
	if !opts.GroupCommit.Off {
		if bm, ok := d.(BatchModifier); ok {
			w.modifies = modifyCommitter(d, bm, opts.GroupCommit)
		}
		if bi, ok := d.(BatchInserter); ok {
			w.inserts = insertCommitter(d, bi, opts.GroupCommit)
		}
		if bc, ok := d.(BatchNextClaimer); ok {
			w.claims = claimCommitter(w, bc, opts.GroupCommit)
		}
	}
	if _, ok := d.(BatchInserter); ok {
		return &wrappedCreator{w}
	}
	return w
}

// wrapped is the Store that Wrap returns: the kit in front of d.
type wrapped struct {
	d Driver
	// modifies, inserts and claims coalesce concurrent Modify, Insert and
	// claim-next calls (GroupCommit); nil: each call goes alone.
	modifies *committer[func(Current) Change]
	inserts  *committer[InsertParams]
	claims   *claimCommitters
	// log hears of every lease decision committed (WrapOptions.Logger).
	log *slog.Logger
	// keeps is the layout d keeps (Keeper): a write that needs more is
	// refused.
	keeps Keeps
}

// logLease records a lease decision that committed (WrapOptions.Logger):
// what the store decided, in its own clock. A renewal keeps AcquiredAt,
// so it was decided at ExpiresAt less the TTL asked for.
func (w *wrapped) logLease(ctx context.Context, decided string, l runstate.Lease, released bool, more ...slog.Attr) {
	if w.log == nil || !w.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("run_id", l.RunID), slog.Int64("token", l.Token)}
	if !released {
		attrs = append(attrs, slog.String("owner", l.Owner.String()),
			slog.String("acquired_at", l.AcquiredAt.Format(time.RFC3339Nano)), slog.String("expires_at", l.ExpiresAt.Format(time.RFC3339Nano)))
	}
	w.log.LogAttrs(ctx, slog.LevelDebug, "lease "+decided, append(attrs, more...)...)
}

// logClaim records a committed claim, with the lease it ended as the
// claim's own write read it (ended_*: token, owner, expiry, released). A
// claim's line alone then tells whether the lease before was released,
// expired or its owner's earlier incarnation's, even when the line of the
// holder's last decision never got written (a process killed between its
// commit and its log line).
func (w *wrapped) logClaim(ctx context.Context, cl *claiming) {
	if w.log == nil || !w.log.Enabled(ctx, slog.LevelDebug) {
		return // nothing built for a line nobody reads: claims are a hot path
	}
	var ended []slog.Attr
	if e := cl.ended; e.Token > 0 {
		ended = []slog.Attr{slog.Int64("ended_token", e.Token), slog.String("ended_owner", e.Owner.String()),
			slog.String("ended_expires_at", e.ExpiresAt.Format(time.RFC3339Nano)), slog.Bool("ended_released", e.Released)}
	}
	w.logLease(ctx, "claimed", cl.claim.Lease, false, ended...)
}

var _ Store = (*wrapped)(nil)

// Features implements runstate.RunStateStore: everything the kit does for
// every driver.
func (w *wrapped) Features() runstate.Features {
	return runstate.Features{Leases: w, LeaseReader: w, BatchUpdater: w, BatchClaimer: w}
}

// Close implements Store.
func (w *wrapped) Close() error {
	switch c := w.d.(type) {
	case io.Closer:
		return c.Close()
	case interface{ Close() }:
		c.Close()
	}
	return nil
}

// maxClaimRounds bounds how often the kit's claim-next looks again after
// other claimers took every candidate it found. Each such round is other
// claimers' success, so the bound is reached only under a storm of claims.
const maxClaimRounds = 64

// claimBatch is how many candidates the kit's claim-next reads at once, so
// that claimers racing for the head of the queue fall through to the next
// candidates without reading again.
const claimBatch = 8

// modify is Driver.Modify after the context check. Every change
// normalises Current.Now itself (FSM-009).
func (w *wrapped) modify(ctx context.Context, runID string, change func(Current) Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.modifies != nil {
		return contractError(w.modifies.do(ctx, runID, change), runID)
	}
	return contractError(w.d.Modify(ctx, runID, change), runID)
}

// insert is Driver.Insert, in a shared write when inserts coalesce.
func (w *wrapped) insert(ctx context.Context, run InsertParams) error {
	if w.inserts != nil {
		return w.inserts.do(ctx, run.Run.RunID, run)
	}
	return w.d.Insert(ctx, run)
}

// number gives events their Seq, after the run's last (AUD-002, AUD-005).
func number(events []runstate.AuditEvent, lastSeq int64) []runstate.AuditEvent {
	for i := range events {
		events[i].Seq = lastSeq + int64(i) + 1
	}
	return events
}

// CreateRun implements runstate.RunStateStore.
func (w *wrapped) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if err := prepareCreate(&p); err != nil {
		return runstate.RunSnapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.RunSnapshot{}, err
	}
	now, err := w.d.Now(ctx)
	if err != nil {
		return runstate.RunSnapshot{}, contractErrorNotFoundIsFailure(err)
	}
	ins, err := w.newInsert(ctx, p, now)
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	if err := w.insert(ctx, ins); err != nil {
		if runstate.CodeOf(err) == runstate.CodeAlreadyExists { // RUN-003
			return runstate.RunSnapshot{}, alreadyExists(p.RunID)
		}
		return runstate.RunSnapshot{}, contractErrorNotFoundIsFailure(err)
	}
	return ins.Run, nil
}

// newInsert builds the insert of p (which passed prepareCreate) at the
// store's time now. A retried run is terminal, and a terminal run never
// changes, so reading it before the insert decides as well as reading it
// within.
func (w *wrapped) newInsert(ctx context.Context, p runstate.CreateRunParams, now time.Time) (InsertParams, error) {
	var retried *runstate.RunSnapshot
	if p.RetryOf != "" {
		r, err := w.d.Get(ctx, p.RetryOf)
		switch {
		case err == nil:
			retried = &r
		case runstate.CodeOf(err) != runstate.CodeNotFound:
			return InsertParams{}, contractError(err, "")
		}
	}
	run, created, err := newRun(p, retried, now)
	if err != nil {
		return InsertParams{}, err
	}
	return InsertParams{Run: run, Created: created}, nil
}

// UpdateRun implements runstate.RunStateStore with the outcome applyUpdate
// decides on the run as Modify read it.
func (w *wrapped) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if err := prepareUpdate(&p); err != nil {
		return runstate.RunSnapshot{}, err
	}
	if err := w.unkept(p); err != nil {
		return runstate.RunSnapshot{}, err
	}
	var out updateOutcome
	if err := w.modify(ctx, p.RunID, updateChange(p, &out)); err != nil {
		return runstate.RunSnapshot{}, err
	}
	run, err := out.Result()
	if err == nil && p.ReleaseLease {
		w.logLease(ctx, "released", runstate.Lease{RunID: p.RunID, Token: p.LeaseToken}, true)
	}
	return run, err
}

// updateChange is the change of the update p: the outcome applyUpdate
// decides on the run as read, recorded in out, and with p.ReleaseLease the
// lease released once the update applies (LEASE-022).
func updateChange(p runstate.UpdateRunParams, out *updateOutcome) func(Current) Change {
	return func(cur Current) Change {
		*out = applyUpdate(cur.Run, cur.Lease, p, cur.Now)
		change := Change{Events: number(out.Events, cur.LastSeq)}
		if out.Write {
			change.Run = &out.Snapshot
		}
		if p.ReleaseLease && out.Err == nil {
			// The update passed its fence: the token is the current,
			// unreleased one, so the release cannot be refused.
			released, err := cur.Lease.release(p.RunID, p.LeaseToken)
			if err != nil {
				*out = updateOutcome{Err: err}
				return Change{}
			}
			change.Lease = &released
		}
		return change
	}
}

// GetRun implements runstate.RunStateStore.
func (w *wrapped) GetRun(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	if err := prepareGet(runID); err != nil {
		return runstate.RunSnapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.RunSnapshot{}, err
	}
	run, err := w.d.Get(ctx, runID)
	if err != nil {
		return runstate.RunSnapshot{}, contractError(err, runID) // RUN-004
	}
	return run, nil
}

// ListRuns implements runstate.RunStateStore: one run more than the page tells
// whether another page follows; the last page has no cursor (LIST-005).
func (w *wrapped) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	q, err := prepareListRuns(p)
	return cutPage(ctx, err, q.Limit, func(n int) ([]runstate.RunSnapshot, error) {
		q.Limit = n
		return w.d.ListRuns(ctx, q)
	}, func(r runstate.RunSnapshot) string { return PositionOf(r).cursor() })
}

// ListAuditEvents implements runstate.RunStateStore.
func (w *wrapped) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	limit, err := prepareAuditQuery(p)
	if err != nil {
		return runstate.AuditPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.AuditPage{}, err
	}
	events, err := w.d.ListAudit(ctx, AuditQuery{RunID: p.RunID, AfterSeq: p.AfterSeq, Limit: limit + 1})
	if err != nil {
		return runstate.AuditPage{}, contractError(err, p.RunID)
	}
	page := runstate.AuditPage{Events: events, More: len(events) > limit}
	if page.More {
		page.Events = events[:limit]
	}
	return page, nil
}

// claiming is one claim in progress: take decides it on the run as a
// Modify or a NextClaimer read it, and records the outcome.
type claiming struct {
	req claimRequest
	// start, when set, is the update that starts the claimed run in the
	// claim's write (runstate.ClaimRunsParams.Start); its RunID, version
	// and token are the claimed run's.
	start   *runstate.UpdateRunParams
	claim   runstate.Claim
	refused error // what the claim rules refused, with nothing written
	// ended is the lease the claim ended, as its write read it (logClaim).
	ended LeaseState
}

func (cl *claiming) take(cur Current) Change {
	cur.Now = Timestamp(cur.Now)
	cl.claim, cl.refused, cl.ended = runstate.Claim{}, nil, cur.Lease
	lease, err := cur.Lease.claim(cur.Run, cl.req, cur.Now)
	if err != nil {
		cl.refused = err
		return Change{}
	}
	cl.claim = runstate.Claim{Lease: lease.lease(cur.Run.RunID), Run: cur.Run.Clone()}
	if cl.start == nil {
		return Change{Lease: &lease}
	}
	// The start is the update a worker would make under the new lease,
	// decided by the same rules, in the same write (BATCH-008).
	p := *cl.start
	p.RunID, p.ExpectedVersion, p.LeaseToken = cur.Run.RunID, cur.Run.Version, lease.Token
	out := applyUpdate(cur.Run, lease, p, cur.Now)
	if out.Err != nil || !out.Write {
		cl.claim, cl.refused = runstate.Claim{}, out.Err
		return Change{}
	}
	cl.claim.Run = out.Snapshot
	return Change{Lease: &lease, Run: &out.Snapshot, Events: number(out.Events, cur.LastSeq)}
}

// ClaimRun implements runstate.LeaseStore.
func (w *wrapped) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	c, err := prepareClaimRun(p)
	if err != nil {
		return runstate.Claim{}, err
	}
	cl := &claiming{req: c}
	if err := w.modify(ctx, p.RunID, cl.take); err != nil {
		return runstate.Claim{}, err
	}
	if cl.refused != nil {
		return runstate.Claim{}, cl.refused
	}
	w.logClaim(ctx, cl)
	return cl.claim, nil
}

// ClaimNextRun implements runstate.LeaseStore, with the driver's NextClaimer
// when it has one.
func (w *wrapped) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	q, c, err := prepareClaimNext(p)
	if err != nil {
		return runstate.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.Claim{}, err
	}
	claim := w.claimOne
	if w.claims != nil {
		claim = w.claimShared
	}
	cl := &claiming{req: c}
	claimed, err := claim(ctx, q, cl)
	if err == nil {
		w.logClaim(ctx, cl)
	}
	return claimed, err
}

// claimOne is claim-next of cl, with the driver's NextClaimer when it has one.
func (w *wrapped) claimOne(ctx context.Context, q RunnableQuery, cl *claiming) (runstate.Claim, error) {
	if nc, ok := w.d.(NextClaimer); ok {
		q.Claimant = &cl.req.Owner
		found, err := nc.ClaimNext(ctx, q, cl.take)
		switch {
		case err != nil:
			return runstate.Claim{}, contractErrorNotFoundIsFailure(err)
		case !found:
			return runstate.Claim{}, nothingRunnable()
		case cl.refused != nil: // the driver offered a run q does not admit
			return runstate.Claim{}, runstate.Unavailable("claim-next: the store offered a run it may not claim", cl.refused)
		}
		return cl.claim, nil
	}
	return w.claimNext(ctx, q, cl)
}

// claimNext is the kit's claim-next: the candidates in claim order, each
// claimed in its own Modify if it is still admitted when read there. An
// empty candidate list is the driver's answer at one instant, so "nothing
// runnable" is true when it is given (LEASE-017); a candidate another
// claimer took meanwhile is passed over.
func (w *wrapped) claimNext(ctx context.Context, q RunnableQuery, cl *claiming) (runstate.Claim, error) {
	q.Limit, q.Claimant = claimBatch, &cl.req.Owner
	for range maxClaimRounds {
		candidates, err := w.d.Runnable(ctx, q)
		if err != nil {
			return runstate.Claim{}, contractErrorNotFoundIsFailure(err)
		}
		if len(candidates) == 0 {
			return runstate.Claim{}, nothingRunnable() // LEASE-013
		}
		for _, run := range candidates {
			err := w.modify(ctx, run.RunID, func(cur Current) Change {
				if !q.Admits(cur.Run, cur.Lease, Timestamp(cur.Now)) {
					cl.claim, cl.refused = runstate.Claim{}, errPassedOver
					return Change{}
				}
				return cl.take(cur)
			})
			switch {
			case runstate.CodeOf(err) == runstate.CodeNotFound: // removed meanwhile
				continue
			case err != nil:
				return runstate.Claim{}, err
			case cl.refused == nil:
				return cl.claim, nil
			}
		}
	}
	return runstate.Claim{}, runstate.Unavailable(fmt.Sprintf("claim-next: other claimers took every run it found, %d times in a row; try again", maxClaimRounds), nil)
}

// errPassedOver marks a candidate that was no longer claimable when read.
var errPassedOver = errors.New("passed over")

// RenewLease implements runstate.LeaseStore.
func (w *wrapped) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	if err := prepareRenew(p); err != nil {
		return runstate.Lease{}, err
	}
	var lease runstate.Lease
	var refused error
	err := w.modify(ctx, p.RunID, func(cur Current) Change {
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
		return runstate.Lease{}, err
	}
	w.logLease(ctx, "renewed", lease, false)
	return lease, nil
}

// ReleaseLease implements runstate.LeaseStore.
func (w *wrapped) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	if err := prepareRelease(p); err != nil {
		return err
	}
	var refused error
	err := w.modify(ctx, p.RunID, func(cur Current) Change {
		next, err := cur.Lease.release(p.RunID, p.Token)
		if refused = err; err != nil {
			return Change{}
		}
		return Change{Lease: &next}
	})
	if err == nil {
		err = refused
	}
	if err == nil {
		w.logLease(ctx, "released", runstate.Lease{RunID: p.RunID, Token: p.Token}, true)
	}
	return err
}

// ListRunnableRuns implements runstate.LeaseStore.
func (w *wrapped) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	q, err := prepareRunnable(p.Filter, p.Limit, p.Cursor)
	return cutPage(ctx, err, q.Limit, func(n int) ([]runstate.RunSnapshot, error) {
		q.Limit = n
		return w.d.Runnable(ctx, q)
	}, func(r runstate.RunSnapshot) string { return RunnablePositionOf(r).cursor() })
}

// cutPage reads a listing of limit runs once its input passed its check
// (inputErr nil): read is asked for one run more, which says that another
// page follows, from the cursor after the page's last run; the last page
// has no cursor (LIST-005, LIST-006).
func cutPage(ctx context.Context, inputErr error, limit int, read func(n int) ([]runstate.RunSnapshot, error), cursorAfter func(runstate.RunSnapshot) string) (runstate.RunPage, error) {
	if inputErr != nil {
		return runstate.RunPage{}, inputErr
	}
	if err := ctx.Err(); err != nil {
		return runstate.RunPage{}, err
	}
	runs, err := read(limit + 1)
	if err != nil {
		return runstate.RunPage{}, contractErrorNotFoundIsFailure(err)
	}
	if len(runs) <= limit {
		return runstate.RunPage{Runs: runs}, nil
	}
	return runstate.RunPage{Runs: runs[:limit], NextCursor: cursorAfter(runs[limit-1])}, nil
}

// GetLease implements runstate.LeaseReader with the driver's LeaseReader, else
// with a Modify that reads the lease and writes nothing.
func (w *wrapped) GetLease(ctx context.Context, runID string) (runstate.Lease, error) {
	if err := prepareGet(runID); err != nil {
		return runstate.Lease{}, err
	}
	if r, ok := w.d.(LeaseReader); ok {
		if err := ctx.Err(); err != nil {
			return runstate.Lease{}, err
		}
		l, err := r.GetLease(ctx, runID)
		if err != nil {
			return runstate.Lease{}, contractError(err, runID)
		}
		return l.lease(runID), nil
	}
	var lease runstate.Lease
	err := w.modify(ctx, runID, func(cur Current) Change {
		lease = cur.Lease.lease(runID)
		return Change{}
	})
	if err != nil {
		return runstate.Lease{}, err
	}
	return lease, nil
}
