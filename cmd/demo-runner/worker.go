package main

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/runstate/runstate"
)

// claimResult labels a claim's outcome in the metrics.
func claimResult(err error) string {
	switch {
	case err == nil, errors.As(err, new(startRefused)):
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
	if a.watcher != nil && !once {
		ch, err := a.watcher.WatchRunnable(ctx, runstate.WatchRunnableParams{})
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
	var refused startRefused
	for ctx.Err() == nil {
		began := time.Now()
		cl, err := a.claimNext(ctx, statuses)
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
		case errors.As(err, &refused):
			// Claimed, but the start was refused and the lease released:
			// the run stopped before it began, as when its begin failed.
			a.log.Error("run stopped", "run_id", refused.runID, "error", err)
			continue
		case err != nil:
			return storeError(err)
		}
		claimedAs := cl.Run.Status
		if cl.Started {
			claimedAs = runstate.StatusQueued
		}
		a.log.Info("claimed run", "run_id", cl.Run.RunID, "token", cl.Lease.Token, "status", claimedAs, "priority", cl.Run.Priority,
			"started", cl.Started)
		final, err := a.execute(ctx, executeParams{Run: cl.Run, Token: cl.Lease.Token, Started: cl.Started, Grace: grace})
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

// freeSlots is how many runs a worker claims at once: it executes one run
// at a time (the run in hand, with its grace period on SIGTERM), so it has
// one slot, free whenever it claims.
const freeSlots = 1

// claimedRun is a run this worker claimed.
type claimedRun struct {
	runstate.Claim
	// Started: the claim moved the queued run to running in its own write.
	Started bool
}

// startRefused is a claim whose start was refused; the claim's lease was released.
type startRefused struct {
	runID string
	err   error
}

func (e startRefused) Error() string { return e.err.Error() }
func (e startRefused) Unwrap() error { return e.err }

// claimNext claims the next run for this worker, in the store's claim order
// over statuses, or answers runstate.ErrNotFound. A queued run is claimed
// and moved to running in one write (runstate.ClaimRuns with Start). Only
// queued runs are started so: a waiting run waits for its signal, and a
// running one is taken over as it is. When the worker also claims those,
// the next runnable run decides, so that claim order holds across statuses.
func (a *app) claimNext(ctx context.Context, statuses []string) (claimedRun, error) {
	plain := runstate.ClaimRunsParams{Owner: a.owner, TTL: a.g.lease, Filter: runstate.RunnableFilter{Statuses: statuses}, Max: freeSlots}
	if !slices.Contains(statuses, string(runstate.StatusQueued)) {
		return a.claim(ctx, plain)
	}
	// The start's audit event names this worker, as its tracker's would.
	starting := plain
	starting.Filter.Statuses, starting.Start, starting.Actor = []string{string(runstate.StatusQueued)}, true, a.workerActor()
	if len(statuses) == 1 {
		return a.claim(ctx, starting)
	}
	next, err := a.leases.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: plain.Filter, Limit: 1})
	switch {
	case err != nil:
		return claimedRun{}, err
	case len(next.Runs) == 0:
		return claimedRun{}, runstate.ErrNotFound
	case next.Runs[0].Status != runstate.StatusQueued:
		return a.claim(ctx, plain)
	}
	cl, err := a.claim(ctx, starting)
	if errors.Is(err, runstate.ErrNotFound) {
		// Another worker took the queued run first; whatever is next may be
		// waiting or running. A queued run claimed so is begun by its tracker.
		return a.claim(ctx, plain)
	}
	return cl, err
}

// claim makes one batch claim of freeSlots runs.
func (a *app) claim(ctx context.Context, p runstate.ClaimRunsParams) (claimedRun, error) {
	res, err := runstate.ClaimRuns(ctx, a.leases, p)
	switch {
	case len(res.Claims) > 0:
		// One slot, one claim: an error after it concerns no run of ours.
		return claimedRun{Claim: res.Claims[0], Started: p.Start}, nil
	case err != nil:
		var failed *runstate.Error
		if p.Start && errors.As(err, &failed) && failed.RunID != "" {
			return claimedRun{}, startRefused{runID: failed.RunID, err: err}
		}
		return claimedRun{}, err
	}
	return claimedRun{}, runstate.ErrNotFound
}
