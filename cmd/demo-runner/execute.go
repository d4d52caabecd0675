package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/tracker"
)

// executeParams is a run to execute under its lease.
type executeParams struct {
	Run   runstate.RunSnapshot
	Token int64 // 0: no lease (a store without leases)
	// Expires is when the claim's lease expires, in the store's clock.
	Expires time.Time
	// Started: the claim moved the run to running (runstate.ClaimRuns with Start).
	Started bool
	// Grace is how long the run may go on after ctx ends.
	Grace time.Duration
	// Hold keeps a run that waits in hand until it goes on, instead of
	// parking it in the store (workflow.Options.Hold): a foreground run
	// executes to its end.
	Hold bool
}

// execute runs a claimed run under its lease, which the tracker keeps
// renewed. A run that waits for a signal or a time is parked in the store
// with its lease released (unless p.Hold), and execute returns. When ctx
// ends (a signal), a held run waiting in a wait step is left waiting at
// once; anything else may go on for grace and is then interrupted. A lost lease stops the work at once: another worker owns
// the run now. A run someone else ended stops it too.
func (a *app) execute(ctx context.Context, p executeParams) (runstate.RunSnapshot, error) {
	run, token, grace := p.Run, p.Token, p.Grace
	attach := a.tracker.Attach
	if p.Started {
		attach = a.tracker.AttachStarted
	}
	tr, err := attach(run, tracker.Lease{Token: token, TTL: a.g.lease, ExpiresAt: p.Expires})
	if err != nil {
		return run, exitError{Code: exitFailure, Msg: err.Error()}
	}
	defer tr.End() // the run's spans, when it did not end here
	wf, err := workflow.Load(run.Labels[labelWorkflowFile])
	if err != nil {
		return a.unreadable(ctx, tr, token, err)
	}
	work, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	park := make(chan struct{})
	go a.stopOnSignal(ctx, work, stopWork, park, run.RunID, grace)
	keeping := make(chan struct{})
	go func() { defer close(keeping); tr.KeepLease(work, a.g.renew, stopWork) }()
	err = workflow.Execute(work, tr, wf, workflow.Options{Hold: p.Hold, Park: park, Supervisor: a.supervisor,
		Progress: func(f string, args ...any) { a.log.Info(fmt.Sprintf(f, args...)) }})
	// Why the work ended, read before this function ends it itself.
	cause := context.Cause(work)
	stopWork(nil)
	<-keeping
	status := tr.Snapshot().Status
	switch {
	case err == nil:
		// The workflow reached its end (whatever stopped the work after that).
	case storeSaysLost(cause) || storeSaysLost(err):
		// Lost is the store's word, and it wins over a lapse this process
		// saw by its own clock: a stalled worker sees both when it wakes,
		// in either order.
		return tr.Snapshot(), a.leaseLost(tr, token)
	case errors.Is(err, workflow.ErrLeaseLapsed):
		// The worker could not renew in time, so a step's command was ended.
		// If the run is still this worker's, it is settled as crash recovery
		// would settle it under the fleet's policy.
		a.log.Warn("the lease was not renewed in time: the step's command was ended", "run_id", run.RunID, "token", token)
		if errors.Is(a.settleLapsed(tr), runstate.ErrLeaseLost) {
			return tr.Snapshot(), a.leaseLost(tr, token)
		}
	case errors.Is(cause, tracker.ErrRunEnded) || errors.Is(err, tracker.ErrRunEnded):
		a.log.Info("the run was ended elsewhere", "run_id", run.RunID, "detail", cmp.Or(err, cause))
	case status == runstate.StatusWaiting && errors.Is(err, workflow.ErrParked) && tr.LeaseReleased():
		// Parked in the store with its lease released: no worker holds it
		// until a signal wakes it or its wake time comes, and then any
		// worker goes on with it. This one sets an alarm for the time.
		wake := tr.Snapshot().WakeAt
		a.log.Info("run parked: no worker holds it until a signal or its wake time", "run_id", run.RunID, "wake_at", wake)
		if a.wakeAt != nil {
			a.wakeAt(wake)
		}
	case status == runstate.StatusWaiting && (errors.Is(err, workflow.ErrParked) || errors.Is(cause, errShutdown)):
		// Waiting is not executing: the run is left as it is, for the
		// next worker to claim (after a signal it goes on at once).
		a.log.Info("leaving the run waiting for a signal: a worker continues it", "run_id", run.RunID)
	case errors.Is(cause, errShutdown) && status == runstate.StatusRunning:
		a.log.Warn("stopping before the run finished: interrupting it", "run_id", run.RunID)
		if ierr := tr.Interrupt(context.Background(), "WORKER_SHUTDOWN: the worker stopped before the run finished"); ierr != nil {
			a.log.Error("could not interrupt the run", "run_id", run.RunID, "error", ierr)
		}
	case errors.Is(cause, errShutdown) && status == runstate.StatusQueued:
		a.log.Info("stopping before the run began: leaving it for another worker", "run_id", run.RunID)
	default:
		// The store failed under the run: write nothing more, and let the
		// run go so that another worker or recovery can settle it.
		a.log.Error("the run stopped on a store error; releasing it", "run_id", run.RunID, "error", err)
		if errors.Is(a.release(run.RunID, token), runstate.ErrLeaseLost) {
			// The store answered again, and the run is another worker's:
			// this worker stalled or was cut off past its lease.
			return tr.Snapshot(), a.leaseLost(tr, token)
		}
		return tr.Snapshot(), storeError(err)
	}
	if !tr.LeaseReleased() { // else the write that ended the run released it
		a.release(run.RunID, token)
	}
	final, _ := tr.Refresh(context.Background())
	a.metrics.observeFinished(final)
	return final, nil
}

// storeSaysLost tells a lease the store refused (another worker owns the
// run) from a lapse this process saw by its own clock, which
// workflow.ErrLeaseLapsed is, though it matches runstate.ErrLeaseLost too.
func storeSaysLost(err error) bool {
	return errors.Is(err, runstate.ErrLeaseLost) && !errors.Is(err, workflow.ErrLeaseLapsed)
}

// stopOnSignal waits for ctx (the signal) to end while the work goes on:
// then waits park at once (close(park)), and the rest of the work gets the
// grace period before it is stopped with errShutdown.
func (a *app) stopOnSignal(ctx, work context.Context, stopWork context.CancelCauseFunc, park chan<- struct{}, runID string, grace time.Duration) {
	select {
	case <-ctx.Done():
	case <-work.Done():
		return
	}
	a.log.Info("stopping: the run in hand may finish within the grace period, then it is interrupted (a waiting run is released at once)",
		"run_id", runID, "grace", grace)
	close(park)
	select {
	case <-time.After(grace):
		stopWork(errShutdown)
	case <-work.Done():
	}
}

// leaseLost reports that another worker owns the run now: the work has
// stopped, and how long it went on after the last renewal that succeeded
// tells how far past its lease it ran.
func (a *app) leaseLost(tr *tracker.Run, token int64) error {
	runID := tr.Snapshot().RunID
	a.metrics.leasesLost.Inc()
	a.log.Warn("the lease on the run was lost: another worker owns it now; stopping without writing", "run_id", runID, "token", token,
		"went_on_after_last_renewal", time.Since(tr.LastRenewed()).Round(time.Millisecond))
	return exitError{Code: exitFailure, Msg: "lease lost on run " + runID}
}

// settleLapsed ends a run whose step command was ended because the lease
// was not renewed in time, as recovery would under --recovery: under
// takeover it is left running for another worker; otherwise it is
// interrupted (fenced: only while the lease is still this worker's).
// It returns the store's answer: ErrLeaseLost when another worker owns
// the run, which a renewal tells under takeover.
func (a *app) settleLapsed(tr *tracker.Run) error {
	if runstate.RecoveryPolicy(a.g.policy) == runstate.RecoverTakeover {
		// Left running for another worker: released now, which also tells
		// whether the lease was still this worker's.
		return a.release(tr.Snapshot().RunID, tr.Lease().Token)
	}
	err := tr.Interrupt(context.Background(), "LEASE_LAPSED: the worker could not renew its lease in time, so the step's command was ended")
	if err != nil && !errors.Is(err, runstate.ErrLeaseLost) {
		a.log.Warn("could not interrupt the run (another worker may own it now)", "run_id", tr.Snapshot().RunID, "error", err)
	}
	return err
}

// unreadable ends a run whose workflow file cannot be read: failed, with a
// diagnostic, through the statuses the table allows.
func (a *app) unreadable(ctx context.Context, tr *tracker.Run, token int64, cause error) (runstate.RunSnapshot, error) {
	ctx = context.WithoutCancel(ctx)
	var err error
	switch tr.Snapshot().Status {
	case runstate.StatusQueued:
		err = tr.Begin(ctx)
	case runstate.StatusWaiting:
		err = tr.Resume(ctx, "")
	}
	if err == nil {
		err = tr.Finish(ctx, runstate.StatusFailed, &runstate.Diagnostic{ErrorCode: "WORKFLOW_UNREADABLE", Message: cause.Error()}, "")
	}
	if err != nil {
		return tr.Snapshot(), storeError(err)
	}
	if !tr.LeaseReleased() {
		a.release(tr.Snapshot().RunID, token)
	}
	return tr.Snapshot(), nil
}

var errShutdown = errors.New("the process is shutting down")

func (a *app) release(runID string, token int64) error {
	if token == 0 || a.leases == nil {
		return nil
	}
	err := a.leases.ReleaseLease(context.Background(), runstate.ReleaseLeaseParams{RunID: runID, Token: token})
	if err != nil && !errors.Is(err, runstate.ErrLeaseLost) {
		a.log.Warn("could not release the lease", "run_id", runID, "error", err)
	}
	return err
}
