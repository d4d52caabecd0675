package main

import (
	"context"
	"errors"
	"slices"
	"sync"
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
// until ctx ends: whenever slots are free it claims that many in one call.
func (a *app) worker(ctx context.Context, p workerParams) error {
	if a.leases == nil {
		return exitError{Code: exitFailure, Msg: "the store has no leases: a worker needs them to share runs safely"}
	}
	// A store that announces runnable runs wakes the worker at once; it
	// still polls, for leases that expire and notices that get lost.
	var watch func(context.Context) (<-chan struct{}, error)
	if !p.Once {
		watch = runstate.WatchRunnableOf(a.watcher)
	}
	following := runstate.Follow(ctx, runstate.FollowParams{Watch: watch, Poll: p.Poll})
	wakeups := "poll"
	switch {
	case following.Watching:
		wakeups = "notify and poll"
	case following.WatchErr != nil:
		a.log.Warn("cannot watch the store for runnable runs; polling only", "error", following.WatchErr)
	}
	a.log.Info("worker started", "owner", a.owner.String(), "lease", a.g.lease, "renew", a.g.renew, "statuses", p.Statuses,
		"poll", p.Poll, "wakeups", wakeups, "slots", p.Slots)
	s := newSlots(p.Slots)
	defer func() {
		// The runs in hand finish, or are interrupted, before the worker returns.
		if s.free() < p.Slots {
			a.log.Info("worker stopping: waiting for the runs in hand", "runs", p.Slots-s.free())
		}
		s.wait()
		a.log.Info("worker stopped")
	}()
	idle := func() {
		select {
		case <-ctx.Done():
		case <-s.freed:
		case <-following.Wake:
		case <-a.alarms.rung():
		}
	}
	for ctx.Err() == nil {
		free := s.free()
		if free == 0 {
			s.waitForOne(ctx)
			continue
		}
		began := time.Now()
		claimed, err := a.claimNext(ctx, p.Statuses, free)
		a.metrics.observeClaim(claimResult(err), time.Since(began))
		for _, cl := range claimed {
			s.take()
			go func() {
				defer s.release()
				a.executeClaimed(ctx, cl, p.Grace)
			}()
		}
		var refused startRefused
		switch {
		case err == nil && len(claimed) > 0:
		case errors.Is(err, runstate.ErrNotFound) || err == nil:
			if p.Once && s.free() == p.Slots {
				return nil
			}
			idle()
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, runstate.ErrUnavailable):
			// The store, or the process serving it, is away for a moment.
			a.log.Warn("the store is unavailable; trying again", "error", err)
			idle()
		case errors.As(err, &refused):
			// Claimed, but the start was refused and the lease released:
			// the run stopped before it began, as when its begin failed.
			a.log.Error("run stopped", "run_id", refused.runID, "error", err)
		default:
			return storeError(err)
		}
	}
	return nil
}

// executeClaimed executes a claimed run and logs how it ended.
func (a *app) executeClaimed(ctx context.Context, cl claimedRun, grace time.Duration) {
	claimedAs := cl.Run.Status
	if cl.Started {
		claimedAs = runstate.StatusQueued
	}
	a.log.Info("claimed run", "run_id", cl.Run.RunID, "token", cl.Lease.Token, "status", claimedAs, "priority", cl.Run.Priority,
		"started", cl.Started)
	final, err := a.execute(ctx, executeParams{Run: cl.Run, Token: cl.Lease.Token, Expires: cl.Lease.ExpiresAt, Started: cl.Started, Grace: grace})
	switch {
	case err != nil:
		a.log.Error("run stopped", "run_id", cl.Run.RunID, "error", err)
	case final.Status.Terminal():
		a.log.Info("run done", "run_id", final.RunID, "status", final.Status)
	default:
		a.log.Info("run left for another worker", "run_id", final.RunID, "status", final.Status)
	}
}

// alarms wake an idle worker when a run it parked comes due, so that a
// timer fires on time rather than at the next poll. They live in this
// process only: a run parked by a worker that died since is found by the
// poll (or by a store's notice, when a signal wakes it). The zero value
// is ready.
type alarms struct {
	once sync.Once
	ring chan struct{}
}

func (a *alarms) init() { a.once.Do(func() { a.ring = make(chan struct{}, 1) }) }

// at rings the alarm at t (this process's clock stands for the store's:
// a little early is a claim that finds nothing yet, a little late is
// within the poll); a zero t sets nothing.
func (a *alarms) at(t time.Time) {
	if t.IsZero() {
		return
	}
	a.init()
	time.AfterFunc(time.Until(t)+alarmSlack, func() {
		select {
		case a.ring <- struct{}{}:
		default: // one is pending already
		}
	})
}

// alarmSlack rings an alarm a little after its time, so that the store's
// clock, which decides, has surely reached it.
const alarmSlack = 10 * time.Millisecond

// rung receives a value when an alarm rang.
func (a *alarms) rung() <-chan struct{} {
	a.init()
	return a.ring
}

// slots counts a worker's runs in hand.
type slots struct {
	mu    sync.Mutex
	busy  int
	size  int
	freed chan struct{} // a value each time a run ends
	runs  sync.WaitGroup
}

func newSlots(n int) *slots { return &slots{size: n, freed: make(chan struct{}, n)} }

func (s *slots) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size - s.busy
}

func (s *slots) take() {
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	s.runs.Add(1)
}

func (s *slots) release() {
	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default: // a wake-up is pending already
	}
	s.runs.Done()
}

// waitForOne waits until a run ends or ctx does.
func (s *slots) waitForOne(ctx context.Context) {
	select {
	case <-s.freed:
	case <-ctx.Done():
	}
}

// wait waits for every run in hand to end.
func (s *slots) wait() { s.runs.Wait() }

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

// claimNext claims up to max runs for this worker, in the store's claim
// order over statuses, or answers runstate.ErrNotFound. Queued runs are
// claimed and moved to running in one write (runstate.ClaimRuns with
// Start). Only queued runs are started so: a waiting run waits for its
// signal, and a running one is taken over as it is. When the worker also
// claims those, the runnable runs decide: the queued ones at the head of
// the order are claimed started, and otherwise the claim takes the next
// runs whatever their status (a queued one is begun by its tracker), so
// that claim order holds across statuses.
func (a *app) claimNext(ctx context.Context, statuses []string, max int) ([]claimedRun, error) {
	plain := runstate.ClaimRunsParams{Owner: a.owner, TTL: a.g.lease, Filter: runstate.RunnableFilter{Statuses: statuses}, Max: max}
	if !slices.Contains(statuses, string(runstate.StatusQueued)) {
		return a.claim(ctx, plain)
	}
	// The start's audit event names this worker, as its tracker's would.
	starting := plain
	starting.Filter.Statuses, starting.Start, starting.Actor = []string{string(runstate.StatusQueued)}, true, a.workerActor()
	if len(statuses) == 1 {
		return a.claim(ctx, starting)
	}
	next, err := a.leases.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: plain.Filter, Limit: max})
	switch {
	case err != nil:
		return nil, err
	case len(next.Runs) == 0:
		return nil, runstate.ErrNotFound
	}
	queued := 0 // the queued runs at the head of the order
	for queued < len(next.Runs) && next.Runs[queued].Status == runstate.StatusQueued {
		queued++
	}
	if queued == 0 {
		return a.claim(ctx, plain)
	}
	starting.Max = queued
	cl, err := a.claim(ctx, starting)
	if errors.Is(err, runstate.ErrNotFound) {
		// Other workers took the queued runs first; whatever is next may
		// be waiting or running. A queued run claimed so is begun by its
		// tracker.
		return a.claim(ctx, plain)
	}
	return cl, err
}

// claim makes one batch claim; the claims made before an error are the
// worker's, returned with it.
func (a *app) claim(ctx context.Context, p runstate.ClaimRunsParams) ([]claimedRun, error) {
	res, err := runstate.ClaimRuns(ctx, a.leases, p)
	out := make([]claimedRun, len(res.Claims))
	for i, c := range res.Claims {
		out[i] = claimedRun{Claim: c, Started: p.Start}
	}
	switch {
	case err != nil:
		var failed *runstate.Error
		if p.Start && errors.As(err, &failed) && failed.RunID != "" {
			return out, startRefused{runID: failed.RunID, err: err}
		}
		return out, err
	case len(out) == 0:
		return nil, runstate.ErrNotFound
	}
	return out, nil
}
