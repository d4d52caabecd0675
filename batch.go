package runstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Batches let one call create, update or claim many runs, so that a busy
// store spends one write on many changes. Each is an optional interface of
// its own, as database/sql's optional driver interfaces are; the package
// functions CreateRuns, UpdateRuns and ClaimRuns use it when a store has it
// and fall back to single calls when it does not. In every batch a caller
// hears success for a run's change only once that change and its audit
// events are committed.

// BatchCreator is optional: a store that creates many runs in one atomic write.
type BatchCreator interface {
	// CreateRuns creates every run of p as CreateRun would, all or none
	// (BATCH-001): result.Runs holds them in item order. An item CreateRun
	// would refuse (invalid input, an existing RunID, a RetryOf that is not
	// an existing terminal run), or a RunID given twice in p, refuses the
	// whole batch with a *BatchItemError naming the item, and nothing is
	// written. An empty batch or one of more than MaxBatchItems is an
	// ErrInvalidArgument.
	CreateRuns(ctx context.Context, p CreateRunsParams) (CreateRunsResult, error)
}

// BatchUpdater is optional: a store that applies many updates in one call.
type BatchUpdater interface {
	// UpdateRuns applies each update of p on its own terms, as UpdateRun
	// would: its expected version, fencing and transition check, with the
	// documented effects of its outcome (a forbidden transition still
	// fails the run). One item's refusal neither undoes nor blocks another
	// (BATCH-004). result.Items has one item per update, in order: Run is
	// the run after an applied update, Err what UpdateRun would have
	// returned. A store that fails part-way through stores what it had
	// applied, and each item it did not apply carries the failure.
	//
	// The call's own error is for the whole call, and then no item was
	// applied: an empty batch, one of more than MaxBatchItems, or a RunID
	// in two items (ErrInvalidArgument naming both), ctx done before the
	// call, the store unavailable before it wrote anything.
	UpdateRuns(ctx context.Context, p UpdateRunsParams) (UpdateRunsResult, error)
}

// BatchClaimer is optional: a store that claims many runs in one call.
type BatchClaimer interface {
	// ClaimRuns claims up to p.Max runnable runs matching p.Filter for
	// p.Owner, as p.Max ClaimNextRun calls in a row would: result.Claims in
	// claim order, each run with its own lease and token; no run goes to
	// two owners (BATCH-006), and the result is empty, without an error,
	// only when no matching run was claimable (BATCH-007). With p.Start,
	// each claimed run also moves to running, with its transition event,
	// in the same atomic write as its lease (BATCH-008): Claim.Run is the
	// running snapshot and Lease the lease to fence later writes with. On
	// an error, Claims holds the claims made before it; they are held.
	ClaimRuns(ctx context.Context, p ClaimRunsParams) (ClaimRunsResult, error)
}

// CreateRunsParams are the runs of one CreateRuns call.
type CreateRunsParams struct {
	Runs []CreateRunParams
}

// CreateRunsResult holds the created runs, in item order.
type CreateRunsResult struct {
	Runs []RunSnapshot
}

// UpdateRunsParams are the updates of one UpdateRuns call, one per run.
type UpdateRunsParams struct {
	Updates []UpdateRunParams
}

// UpdateRunsResult has one item per update, in order.
type UpdateRunsResult struct {
	Items []UpdateRunsItem
}

// UpdateRunsItem is one update's outcome: the run after it when Err is
// nil, else what UpdateRun would have returned.
type UpdateRunsItem struct {
	Run RunSnapshot
	Err error
}

// ClaimRunsParams claim up to Max runnable runs, best first.
type ClaimRunsParams struct {
	Owner  Owner
	TTL    time.Duration
	Filter RunnableFilter
	// Max is how many runs to claim at most, 1 to MaxBatchItems.
	Max int
	// Start moves each claimed run to running in the claim's write; the
	// filter's statuses must then be queued and/or waiting (the default).
	Start bool
	// Actor and Reason are recorded on the start's audit events.
	Actor  Actor
	Reason string
}

// ClaimRunsResult holds the claims, in claim order.
type ClaimRunsResult struct {
	Claims []Claim
}

// BatchItemError refuses a batch because of one item: Err is what the
// single call would have returned for it, and errors.Is sees through to it.
type BatchItemError struct {
	// Index is the item's position in the batch, from 0.
	Index int
	Err   error
}

func (e *BatchItemError) Error() string {
	return fmt.Sprintf("%sitem %d: %s", errPrefix, e.Index, strings.TrimPrefix(e.Err.Error(), errPrefix))
}

// Unwrap returns the item's error.
func (e *BatchItemError) Unwrap() error { return e.Err }

// Validate checks the batch as a whole: its size and that no RunID is
// given twice. Each item is the store's to check, as for CreateRun.
func (p CreateRunsParams) Validate() error {
	if err := validateBatchSize("runs", len(p.Runs)); err != nil {
		return err
	}
	first := make(map[string]int, len(p.Runs))
	for i, r := range p.Runs {
		if at, twice := first[r.RunID]; twice && r.RunID != "" {
			return &BatchItemError{Index: i, Err: InvalidArgument("run_id", "run %s is item %d of the batch too", r.RunID, at)}
		}
		first[r.RunID] = i
	}
	return nil
}

// Validate checks the batch as a whole: its size and that no run is
// updated twice (BATCH-005). Each update is the store's to check.
func (p UpdateRunsParams) Validate() error {
	if err := validateBatchSize("updates", len(p.Updates)); err != nil {
		return err
	}
	first := make(map[string]int, len(p.Updates))
	for i, u := range p.Updates {
		if at, twice := first[u.RunID]; twice {
			return InvalidArgument("updates", "items %d and %d both update run %s; one update per run in a batch", at, i, u.RunID)
		}
		first[u.RunID] = i
	}
	return nil
}

// Validate checks Max and, with Start, the filter's statuses. Owner, TTL
// and filter are the store's to check, as for ClaimNextRun.
func (p ClaimRunsParams) Validate() error {
	if p.Max < 1 || p.Max > MaxBatchItems {
		return InvalidArgument("max", "is %d; claim 1 to %d runs in one call", p.Max, MaxBatchItems)
	}
	if !p.Start {
		return nil
	}
	for _, name := range p.Filter.Statuses {
		st, err := ParseRunStatus(name)
		if err != nil {
			return err
		}
		if st != StatusQueued && st != StatusWaiting {
			return InvalidArgument("filter.statuses", "has %s; a claim that starts its runs claims queued or waiting ones", st)
		}
	}
	return nil
}

func validateBatchSize(field string, n int) error {
	if n == 0 {
		return InvalidArgument(field, "is empty; a batch has 1 to %d items", MaxBatchItems)
	}
	if n > MaxBatchItems {
		return InvalidArgument(field, "has %d items, the limit is %d", n, MaxBatchItems)
	}
	return nil
}

// CreateRuns creates p's runs with s's BatchCreator, all or none. A store
// without one gets one CreateRun per item, in order, stopping at the first
// refusal: that is NOT atomic. The result then holds the runs created
// before it, which stay, and the error the refused item's *BatchItemError.
func CreateRuns(ctx context.Context, s RunStateStore, p CreateRunsParams) (CreateRunsResult, error) {
	if b, ok := As[BatchCreator](s); ok {
		return b.CreateRuns(ctx, p)
	}
	if err := p.Validate(); err != nil {
		return CreateRunsResult{}, err
	}
	var out CreateRunsResult
	for i, item := range p.Runs {
		run, err := s.CreateRun(ctx, item)
		if err != nil {
			return out, &BatchItemError{Index: i, Err: err}
		}
		out.Runs = append(out.Runs, run)
	}
	return out, nil
}

// UpdateRuns applies p's updates with s's BatchUpdater. A store without
// one gets one UpdateRun per item, in order, each item's outcome its own,
// once the batch passed Validate; an item met after a failure of the
// store (or ctx) carries that failure.
func UpdateRuns(ctx context.Context, s RunStateStore, p UpdateRunsParams) (UpdateRunsResult, error) {
	if b, ok := As[BatchUpdater](s); ok {
		return b.UpdateRuns(ctx, p)
	}
	if err := p.Validate(); err != nil {
		return UpdateRunsResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return UpdateRunsResult{}, err
	}
	out := UpdateRunsResult{Items: make([]UpdateRunsItem, len(p.Updates))}
	for i, u := range p.Updates {
		out.Items[i].Run, out.Items[i].Err = s.UpdateRun(ctx, u)
	}
	return out, nil
}

// ClaimRuns claims runs with s's BatchClaimer. A store without one gets
// ClaimNextRun until p.Max claims or nothing is runnable; with p.Start each
// claim is then followed by a fenced UpdateRun to running, which is a
// second write: a run whose start fails has its lease released, and the
// error says so, with the claims made before it in the result.
func ClaimRuns(ctx context.Context, s Store, p ClaimRunsParams) (ClaimRunsResult, error) {
	if b, ok := As[BatchClaimer](s); ok {
		return b.ClaimRuns(ctx, p)
	}
	if err := p.Validate(); err != nil {
		return ClaimRunsResult{}, err
	}
	var out ClaimRunsResult
	for len(out.Claims) < p.Max {
		claim, err := s.ClaimNextRun(ctx, ClaimNextParams{Owner: p.Owner, TTL: p.TTL, Filter: p.Filter})
		if errors.Is(err, ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if p.Start {
			if claim, err = startClaimed(ctx, s, claim, p); err != nil {
				return out, err
			}
		}
		out.Claims = append(out.Claims, claim)
	}
	return out, nil
}

// startClaimed moves a run just claimed to running under its lease, or
// releases the lease when it cannot.
func startClaimed(ctx context.Context, s Store, claim Claim, p ClaimRunsParams) (Claim, error) {
	var err error
	claim.Run, err = s.UpdateRun(ctx, UpdateRunParams{RunID: claim.Run.RunID, ExpectedVersion: claim.Run.Version,
		LeaseToken: claim.Lease.Token, Status: string(StatusRunning), Actor: p.Actor, Reason: p.Reason})
	if err == nil {
		return claim, nil
	}
	what := "so its lease was released"
	if release := s.ReleaseLease(context.WithoutCancel(ctx), ReleaseLeaseParams{RunID: claim.Lease.RunID, Token: claim.Lease.Token}); release != nil {
		what = fmt.Sprintf("nor release its lease (%s)", strings.TrimPrefix(release.Error(), errPrefix))
	}
	// The start's error decides what the caller matches; the message says the rest.
	return Claim{}, &Error{Code: CodeOf(err), RunID: claim.Lease.RunID, Cause: err,
		Message: fmt.Sprintf("claimed run %s but could not start it, %s", claim.Lease.RunID, what)}
}
