package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/worker"
)

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

// workerParams configure worker.
type workerParams struct {
	// Statuses the worker claims.
	Statuses []string
	// Poll is how often an idle worker looks for runs.
	Poll time.Duration
	// Grace is how long the runs in hand may go on after ctx ends.
	Grace time.Duration
	// Once stops the worker when nothing is runnable and its slots are free.
	Once bool
	// Slots is how many runs the worker executes at once.
	Slots int
}

// worker claims runnable runs and executes them, up to p.Slots at once,
// until ctx ends: the worker package (worker.Worker) claims, wakes on the
// store's notices, keeps the leases, and drains; each run is executed by
// its tracker, which makes the run's writes, its last one included.
func (a *app) worker(ctx context.Context, p workerParams) error {
	if a.leases == nil {
		return exitError{Code: exitFailure, Msg: "the store has no leases: a worker needs them to share runs safely"}
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var inHand atomic.Int64
	// The runs in hand keep the demo runner's own stop: at the signal a
	// run held in a wait lets go at once and the rest get p.Grace (execute).
	// The package's grace, a little longer, only backs that up.
	cfg := worker.Config{Store: a.leases, Owner: a.owner, Slots: p.Slots, Poll: p.Poll, Grace: p.Grace + 5*time.Second, LeaseTTL: a.g.lease,
		RenewEvery: a.g.renew, Filter: runstate.RunnableFilter{Statuses: p.Statuses}, Watcher: a.watcher, Logger: a.log,
		// Queued runs are started in the claim's write; a waiting run is
		// resumed by its tracker, whose write says who signalled it.
		Start: []string{string(runstate.StatusQueued)},
		OnClaim: func(r worker.ClaimReport) {
			a.metrics.observeClaim(claimResult(r), r.Took)
			if p.Once && r.Claimed == 0 && r.Err == nil && inHand.Load() == 0 {
				stop() // nothing runnable, nothing in hand
			}
		},
		Handler: func(jctx context.Context, job *worker.Job) error {
			inHand.Add(1)
			defer inHand.Add(-1)
			job.Settled(a.executeClaimed(ctx, jctx, job, p.Grace))
			return nil
		}}
	if p.Once {
		cfg.Watcher, cfg.Poll = nil, min(p.Poll, 100*time.Millisecond)
	}
	w, err := worker.New(cfg)
	if err != nil {
		return exitError{Code: exitUsage, Msg: err.Error()}
	}
	a.wakeAt = w.WakeAt
	wakeups := "poll"
	if cfg.Watcher != nil {
		wakeups = "notify and poll"
	}
	a.log.Info("worker started", "owner", a.owner.String(), "lease", a.g.lease, "renew", a.g.renew, "statuses", p.Statuses,
		"poll", p.Poll, "wakeups", wakeups, "slots", p.Slots)
	if err := w.Run(ctx); err != nil {
		return storeError(err)
	}
	return nil
}

// claimResult labels a claim's outcome in the metrics: a start refused
// after its claim counts as claimed, as the claim was.
func claimResult(r worker.ClaimReport) string {
	var refused *runstate.Error
	switch {
	case r.Claimed > 0, r.Err != nil && errors.As(r.Err, &refused) && refused.RunID != "":
		return claimClaimed
	case r.Err == nil:
		return claimEmpty
	}
	return claimError
}

// executeClaimed executes a claimed run, logs how it ended and returns the
// run as it left it, its lease released or lost. The tracker keeps the
// lease and sees it lost or lapsed itself. The run stops as the worker
// does: when signal ends (the process's signal), a run held in a wait lets
// go at once and the rest may go on for grace; the handler's context jctx
// ending for the package's drain (later still) stops it too.
func (a *app) executeClaimed(signal, jctx context.Context, job *worker.Job, grace time.Duration) runstate.RunSnapshot {
	ctx, cancel := context.WithCancel(context.WithoutCancel(jctx))
	defer cancel()
	stopOnSignal := context.AfterFunc(signal, cancel)
	defer stopOnSignal()
	stopOnDrain := context.AfterFunc(jctx, func() {
		if errors.Is(context.Cause(jctx), worker.ErrDraining) {
			cancel()
		}
	})
	defer stopOnDrain()
	run, lease := job.Run(), job.Lease()
	claimedAs := run.Status
	if job.Started() {
		claimedAs = runstate.StatusQueued
	}
	a.log.Info("claimed run", "run_id", run.RunID, "token", lease.Token, "status", claimedAs, "priority", run.Priority,
		"started", job.Started())
	final, err := a.execute(ctx, executeParams{Run: run, Token: lease.Token, Expires: lease.ExpiresAt, Started: job.Started(), Grace: grace})
	switch {
	case err != nil:
		a.log.Error("run stopped", "run_id", run.RunID, "error", err)
	case final.Status.Terminal():
		a.log.Info("run done", "run_id", final.RunID, "status", final.Status)
	default:
		a.log.Info("run left for another worker", "run_id", final.RunID, "status", final.Status)
	}
	return final
}
