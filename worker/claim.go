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
	sent      time.Time // when the claim was sent: its lease lasts at least TTL from then
	started   bool      // the claim moved the run to running
	takenOver bool      // the run was running when claimed
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
// runnable runs decide: the run at the head of the order says which kind
// this claim takes, and it takes the run of that kind that lead, so that
// claim order holds across statuses (a signalled waiting run is not
// starved by a flood of queued ones) and a startable run is never handed
// over unstarted. more says that runnable runs were left for the next
// claim (those of the other kind), which should come at once.
func (w *Worker) claim(ctx context.Context, max int) (claims []claimedRun, more bool, err error) {
	plain := runstate.ClaimRunsParams{Owner: w.cfg.Owner, TTL: w.cfg.LeaseTTL, Filter: w.cfg.Filter, Max: max}
	starting := plain
	starting.Filter.Statuses, starting.Start, starting.Actor = w.start, true, w.actor
	switch {
	case len(w.rest) == 0:
		claims, err = w.claimWith(ctx, starting)
		return claims, false, err
	case len(w.start) == 0:
		claims, err = w.claimWith(ctx, plain)
		return claims, false, err
	}
	next, err := w.store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: plain.Filter, Limit: max})
	if err != nil || len(next.Runs) == 0 {
		return nil, false, err
	}
	lead := w.startable(next.Runs[0].Status)
	n := 0 // the runs of the leading kind at the head of the order
	for n < len(next.Runs) && w.startable(next.Runs[n].Status) == lead {
		n++
	}
	p := starting
	if !lead {
		p = plain
		p.Filter.Statuses = w.rest
	}
	p.Max = n
	claims, err = w.claimWith(ctx, p)
	// Runs of the other kind were next, or others took these first: the
	// next claim goes at once.
	return claims, n < len(next.Runs) || len(claims) < n, err
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
		out[i] = claimedRun{Claim: c, sent: sent, started: p.Start, takenOver: !p.Start && c.Run.Status == runstate.StatusRunning}
	}
	var failed *runstate.Error
	if err != nil && p.Start && errors.As(err, &failed) && failed.RunID != "" && !errors.Is(err, runstate.ErrUnavailable) {
		return out, startRefused{RunID: failed.RunID, err: err}
	}
	return out, err
}
