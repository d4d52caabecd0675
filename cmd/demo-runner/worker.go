package main

import (
	"context"
	"errors"
	"time"

	"github.com/runstate/runstate"
)

// claimResult labels a claim's outcome in the metrics.
func claimResult(err error) string {
	switch {
	case err == nil:
		return claimClaimed
	case errors.Is(err, runstate.ErrNotFound):
		return claimEmpty
	}
	return claimError
}

// recoverPeriodically runs crash recovery every interval until ctx ends. A
// worker that died and was not restarted leaves its running run behind
// with an expired lease; under the interrupt and fail policies no worker
// claims such a run, so without this it would wait for the next start or
// an operator's recover. Recovery never touches a run a live lease holds,
// this worker's own included, so it is safe beside the work in hand.
func (a *app) recoverPeriodically(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := a.recoverRuns(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("periodic crash recovery failed; it runs again at the next interval", "error", err)
		}
	}
}

// worker claims runnable runs and executes them until ctx ends.
func (a *app) worker(ctx context.Context, statuses []string, poll, grace time.Duration, once bool) error {
	if a.leases == nil {
		return exitError{Code: exitFailure, Msg: "the store has no leases: a worker needs them to share runs safely"}
	}
	// A store that announces runnable runs wakes the worker at once; it
	// still polls, for leases that expire and notices that get lost.
	var wake <-chan struct{}
	wakeups := "poll"
	if w, ok := a.leases.(runstate.RunnableWatcher); ok && !once {
		ch, err := w.WatchRunnable(ctx, runstate.WatchRunnableParams{})
		if err != nil {
			a.log.Warn("cannot watch the store for runnable runs; polling only", "error", err)
		} else {
			wake, wakeups = ch, "notify and poll"
		}
	}
	a.log.Info("worker started", "owner", a.owner.String(), "lease", a.g.lease, "renew", a.g.renew, "statuses", statuses,
		"poll", poll, "wakeups", wakeups)
	idle := func() {
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		case _, open := <-wake:
			if !open {
				wake = nil // the watch ended: poll only
			}
		}
	}
	for ctx.Err() == nil {
		began := time.Now()
		cl, err := a.leases.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: a.owner, TTL: a.g.lease, Filter: runstate.RunnableFilter{Statuses: statuses}})
		a.metrics.observeClaim(claimResult(err), time.Since(began))
		switch {
		case errors.Is(err, runstate.ErrNotFound):
			if once {
				return nil
			}
			idle()
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case errors.Is(err, runstate.ErrUnavailable):
			// The store, or the process serving it, is away for a moment.
			a.log.Warn("the store is unavailable; trying again", "error", err)
			idle()
			continue
		case err != nil:
			return storeError(err)
		}
		a.log.Info("claimed run", "run_id", cl.Run.RunID, "token", cl.Lease.Token, "status", cl.Run.Status, "priority", cl.Run.Priority)
		final, err := a.execute(ctx, cl.Run, cl.Lease.Token, grace)
		if err != nil {
			a.log.Error("run stopped", "run_id", cl.Run.RunID, "error", err)
			continue
		}
		if final.Status.Terminal() {
			a.log.Info("run done", "run_id", final.RunID, "status", final.Status)
		} else {
			a.log.Info("run left for another worker", "run_id", final.RunID, "status", final.Status)
		}
	}
	a.log.Info("worker stopped")
	return nil
}
