package worker

import (
	"context"
	"errors"
	"time"

	"github.com/runstate/runstate"
)

// ClaimReport is one claim call, for Config.OnClaim (metrics).
type ClaimReport struct {
	// Asked is how many runs the claim asked for (the free slots);
	// Claimed how many it got.
	Asked, Claimed int
	Took           time.Duration
	// Err is the claim's error: nil when it claimed, or found nothing.
	Err error
}

// claimedRun is a claim and what the worker knows of it.
type claimedRun struct {
	runstate.Claim
	sent    time.Time // when the claim was sent: its lease lasts at least TTL from then
	started bool      // the claim moved the run to running
	status  runstate.RunStatus
}

// startRefused is a claim whose start was refused; its lease was released.
type startRefused struct {
	RunID string
	err   error
}

func (e startRefused) Error() string { return e.err.Error() }
func (e startRefused) Unwrap() error { return e.err }

// claim claims up to max runs in the store's claim order over the
// filter's statuses. The runs of a Config.Start status are moved to
// running in the claim's own write (runstate.ClaimRuns with Start); the
// others are claimed as they are. When the filter has both kinds, the
// runnable runs decide: the startable ones at the head of the order are
// claimed started, and otherwise the claim takes the next runs whatever
// their status, so that claim order holds across statuses (a signalled
// waiting run is not starved by a flood of queued ones).
func (w *Worker) claim(ctx context.Context, max int) ([]claimedRun, error) {
	plain := runstate.ClaimRunsParams{Owner: w.cfg.Owner, TTL: w.cfg.LeaseTTL, Filter: w.cfg.Filter, Max: max}
	starting := plain
	starting.Filter.Statuses, starting.Start, starting.Actor = w.start, true, w.actor
	switch {
	case !w.rest:
		return w.claimWith(ctx, starting)
	case len(w.start) == 0:
		return w.claimWith(ctx, plain)
	}
	next, err := w.store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: plain.Filter, Limit: max})
	if err != nil || len(next.Runs) == 0 {
		return nil, err
	}
	head := 0 // the startable runs at the head of the order
	for head < len(next.Runs) && w.startable(next.Runs[head].Status) {
		head++
	}
	if head == 0 {
		return w.claimWith(ctx, plain)
	}
	starting.Max = head
	cl, err := w.claimWith(ctx, starting)
	if err == nil && len(cl) == 0 {
		// Other workers took those first; whatever is next may be of
		// another status.
		return w.claimWith(ctx, plain)
	}
	return cl, err
}

func (w *Worker) startable(st runstate.RunStatus) bool {
	for _, s := range w.start {
		if s == string(st) {
			return true
		}
	}
	return false
}

// claimWith makes one batch claim; the claims made before an error are
// the worker's, returned with it. A start refused on a store without batch
// claims (its start is a second write) is a startRefused.
func (w *Worker) claimWith(ctx context.Context, p runstate.ClaimRunsParams) ([]claimedRun, error) {
	sent := time.Now()
	res, err := runstate.ClaimRuns(ctx, w.store, p)
	out := make([]claimedRun, len(res.Claims))
	for i, c := range res.Claims {
		status := c.Run.Status
		if p.Start {
			status = "" // as claimed: started from a status the claim does not say
		}
		out[i] = claimedRun{Claim: c, sent: sent, started: p.Start, status: status}
	}
	var failed *runstate.Error
	if err != nil && p.Start && errors.As(err, &failed) && failed.RunID != "" && !errors.Is(err, runstate.ErrUnavailable) {
		return out, startRefused{RunID: failed.RunID, err: err}
	}
	return out, err
}
