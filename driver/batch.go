package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/runstate/runstate"
)

// BatchInserter is a Driver's insert of many runs in one atomic write, for
// stores where a write costs more than its rows (a transaction, an fsync).
// It is optional: without it the kit's store is no runstate.BatchCreator,
// since single inserts cannot be all or none. With it, concurrent
// CreateRun calls also share InsertMany calls (GroupCommit).
type BatchInserter interface {
	// InsertMany stores every run with its created event, all or none, in
	// one atomic write (BATCH-001). A run whose RunID exists: a
	// *runstate.BatchItemError with the item's index, wrapping
	// runstate.ErrAlreadyExists, and nothing written.
	InsertMany(ctx context.Context, runs []InsertParams) error
}

// BatchModifier is a Driver's Modify of many runs in one atomic write. It
// is optional: without it the kit applies a batch's updates one Modify
// each, with the same outcome per item. With it, concurrent single writes
// also share ModifyMany calls (GroupCommit).
type BatchModifier interface {
	// ModifyMany reads each item's run, calls its Change with it as Modify
	// does, and stores every Change, each atomically with its events
	// (BATCH-004): in one write, or in several when the store retries the
	// items that lost a race (an optimistic store). The RunIDs are
	// distinct. An unknown run sets that item's Err to an error matching
	// runstate.ErrNotFound, and the others go on. A failure of a write is
	// the call's error when nothing was stored; once some items were
	// stored, it is the Err of each item it left unwritten, and the call
	// returns nil.
	ModifyMany(ctx context.Context, items []ModifyItem) error
}

// ModifyItem is one run of a ModifyMany.
type ModifyItem struct {
	RunID  string
	Change func(Current) Change
	// Err is set by the driver when the run does not exist.
	Err error
}

// BatchNextClaimer is NextClaimer for many runs at once. It is optional:
// without it the kit claims a batch one claim-next at a time.
type BatchNextClaimer interface {
	// ClaimNextMany claims, in one atomic write, up to max runs that q
	// admits, in claim order: for each it calls take and stores the Change
	// take returns, and it answers how many it claimed. q is as for
	// NextClaimer.ClaimNext. A driver that retries calls take afresh for
	// each run of the retry; the claims are those of take's last n calls.
	// It answers 0 only when no run matching q was claimable (BATCH-007),
	// and never offers a run twice (BATCH-006).
	ClaimNextMany(ctx context.Context, q RunnableQuery, max int, take func(Current) Change) (int, error)
}

// UpdateRuns implements runstate.BatchUpdater: each update decided by the
// rules of UpdateRun (BATCH-004), in one write with a BatchModifier, else
// one UpdateRun per item.
func (w *wrapped) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	bm, ok := w.d.(BatchModifier)
	if !ok {
		return runstate.UpdateRuns(ctx, singleCalls{w}, p)
	}
	updates, out, err := prepareUpdateRuns(p)
	if err != nil {
		return runstate.UpdateRunsResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.UpdateRunsResult{}, err
	}
	outcomes := make([]updateOutcome, len(updates))
	items := make([]ModifyItem, 0, len(updates))
	at := make([]int, 0, len(updates)) // the update of each item
	for i, u := range updates {
		if out.Items[i].Err == nil {
			out.Items[i].Err = w.unkept(u)
		}
		if out.Items[i].Err == nil {
			items = append(items, ModifyItem{RunID: u.RunID, Change: updateChange(u, &outcomes[i])})
			at = append(at, i)
		}
	}
	if len(items) > 0 {
		if err := bm.ModifyMany(ctx, items); err != nil {
			return runstate.UpdateRunsResult{}, contractErrorNotFoundIsFailure(err)
		}
	}
	for k, item := range items {
		i := at[k]
		if item.Err != nil {
			out.Items[i].Err = contractError(item.Err, item.RunID)
			continue
		}
		out.Items[i].Run, out.Items[i].Err = outcomes[i].Result()
		if u := updates[i]; out.Items[i].Err == nil && u.ReleaseLease {
			w.logLease(ctx, "released", runstate.Lease{RunID: u.RunID, Token: u.LeaseToken}, true)
		}
	}
	return out, nil
}

// singleCalls hides a store's batch features, so that the package
// functions fall back to its single calls.
type singleCalls struct{ runstate.Store }

// Features implements runstate.RunStateStore: the store's, without batches.
func (s singleCalls) Features() runstate.Features {
	f := runstate.Resolve(s.Store)
	f.BatchCreator, f.BatchUpdater, f.BatchClaimer = nil, nil, nil
	return f
}

// ClaimRuns implements runstate.BatchClaimer: each claim decided as
// claim-next's (BATCH-006, BATCH-007), and with p.Start the start decided
// as UpdateRun's, in the claim's write (BATCH-008). A BatchNextClaimer
// makes the batch one write; without one it is one claim-next per run.
func (w *wrapped) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	q, c, start, err := prepareClaimRuns(p)
	if err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	return w.claimRuns(ctx, q, p.Max, c, start)
}

// claimRuns claims up to max runs, in one write with a BatchNextClaimer.
func (w *wrapped) claimRuns(ctx context.Context, q RunnableQuery, max int, c claimRequest, start *runstate.UpdateRunParams) (runstate.ClaimRunsResult, error) {
	if bc, ok := w.d.(BatchNextClaimer); ok {
		return w.claimMany(ctx, bc, q, max, c, start)
	}
	var out runstate.ClaimRunsResult
	for len(out.Claims) < max {
		cl := &claiming{req: c, start: start}
		claim, err := w.claimOne(ctx, q, cl)
		if runstate.CodeOf(err) == runstate.CodeNotFound {
			return out, nil // nothing runnable (is left)
		}
		if err != nil {
			return out, err
		}
		w.logClaim(ctx, cl)
		out.Claims = append(out.Claims, claim)
	}
	return out, nil
}

// claimMany is ClaimRuns with the driver's BatchNextClaimer: one write. A
// driver that retries calls take afresh, so the claims are those of the
// last n calls.
func (w *wrapped) claimMany(ctx context.Context, bc BatchNextClaimer, q RunnableQuery, max int, c claimRequest, start *runstate.UpdateRunParams) (runstate.ClaimRunsResult, error) {
	var taken []*claiming
	q.Claimant = &c.Owner
	n, err := bc.ClaimNextMany(ctx, q, max, func(cur Current) Change {
		cl := &claiming{req: c, start: start}
		taken = append(taken, cl)
		return cl.take(cur)
	})
	switch {
	case err != nil:
		return runstate.ClaimRunsResult{}, contractErrorNotFoundIsFailure(err)
	case n < 0 || n > len(taken) || n > max:
		return runstate.ClaimRunsResult{}, runstate.Unavailable(fmt.Sprintf("claim-runs: the store reported %d claims, of %d offered", n, len(taken)), nil)
	}
	out := runstate.ClaimRunsResult{Claims: make([]runstate.Claim, 0, n)}
	var refused error
	for _, cl := range taken[len(taken)-n:] {
		if cl.refused != nil { // the driver offered a run q does not admit: nothing stored for it
			refused = runstate.Unavailable("claim-runs: the store offered a run it may not claim", cl.refused)
			continue
		}
		w.logClaim(ctx, cl)
		out.Claims = append(out.Claims, cl.claim)
	}
	// The other claims were committed: they are the caller's, with the error.
	return out, refused
}

// wrappedCreator is the kit's store over a BatchInserter: a
// runstate.BatchCreator, which the plain wrapped is not.
type wrappedCreator struct{ *wrapped }

var _ runstate.BatchCreator = (*wrappedCreator)(nil)

// Features implements runstate.RunStateStore: the kit's, with batch creates.
func (w *wrappedCreator) Features() runstate.Features {
	f := w.wrapped.Features()
	f.BatchCreator = w
	return f
}

// CreateRuns implements runstate.BatchCreator: each item decided as
// CreateRun decides it (BATCH-002), then every run inserted in one write
// (BATCH-001).
func (w *wrappedCreator) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	items, err := prepareCreateRuns(p)
	if err != nil {
		return runstate.CreateRunsResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return runstate.CreateRunsResult{}, err
	}
	now, err := w.d.Now(ctx)
	if err != nil {
		return runstate.CreateRunsResult{}, contractErrorNotFoundIsFailure(err)
	}
	inserts := make([]InsertParams, len(items))
	for i, item := range items {
		if inserts[i], err = w.newInsert(ctx, item, now); err != nil {
			return runstate.CreateRunsResult{}, &runstate.BatchItemError{Index: i, Err: err}
		}
	}
	if err := w.d.(BatchInserter).InsertMany(ctx, inserts); err != nil {
		var itemErr *runstate.BatchItemError
		if errors.As(err, &itemErr) && runstate.CodeOf(itemErr.Err) == runstate.CodeAlreadyExists && itemErr.Index >= 0 && itemErr.Index < len(items) {
			return runstate.CreateRunsResult{}, &runstate.BatchItemError{Index: itemErr.Index, Err: alreadyExists(items[itemErr.Index].RunID)} // RUN-003
		}
		return runstate.CreateRunsResult{}, contractErrorNotFoundIsFailure(err)
	}
	out := runstate.CreateRunsResult{Runs: make([]runstate.RunSnapshot, len(inserts))}
	for i, ins := range inserts {
		out.Runs[i] = ins.Run
	}
	return out, nil
}

// prepareCreateRuns validates a batch of creations as a whole and each item
// as CreateRun does, normalising copies (BATCH-003, BATCH-009); a refused
// item is a *runstate.BatchItemError naming it.
func prepareCreateRuns(p runstate.CreateRunsParams) ([]runstate.CreateRunParams, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	items := make([]runstate.CreateRunParams, len(p.Runs))
	for i, item := range p.Runs {
		if err := prepareCreate(&item); err != nil {
			return nil, &runstate.BatchItemError{Index: i, Err: err}
		}
		items[i] = item
	}
	return items, nil
}

// prepareUpdateRuns validates a batch of updates as a whole (BATCH-005,
// BATCH-009), then each update as UpdateRun does: it returns normalised
// copies, and the result with the Err of each update refused.
func prepareUpdateRuns(p runstate.UpdateRunsParams) ([]runstate.UpdateRunParams, runstate.UpdateRunsResult, error) {
	if err := p.Validate(); err != nil {
		return nil, runstate.UpdateRunsResult{}, err
	}
	updates := make([]runstate.UpdateRunParams, len(p.Updates))
	out := runstate.UpdateRunsResult{Items: make([]runstate.UpdateRunsItem, len(p.Updates))}
	for i, u := range p.Updates {
		out.Items[i].Err = prepareUpdate(&u)
		updates[i] = u
	}
	return updates, out, nil
}

// prepareClaimRuns validates p as ClaimNextRun's input and, with Start, the
// start as UpdateRun's: the update returned lacks only the claimed run's
// RunID, version and token.
func prepareClaimRuns(p runstate.ClaimRunsParams) (RunnableQuery, claimRequest, *runstate.UpdateRunParams, error) {
	if err := p.Validate(); err != nil {
		return RunnableQuery{}, claimRequest{}, nil, err
	}
	q, c, err := prepareClaimNext(runstate.ClaimNextParams{Owner: p.Owner, TTL: p.TTL, Filter: p.Filter})
	if err != nil || !p.Start {
		return q, c, nil, err
	}
	start := &runstate.UpdateRunParams{RunID: "start", ExpectedVersion: 1, Status: string(runstate.StatusRunning), Actor: p.Actor, Reason: p.Reason}
	if err := prepareUpdate(start); err != nil {
		return RunnableQuery{}, claimRequest{}, nil, err
	}
	return q, c, start, nil
}
