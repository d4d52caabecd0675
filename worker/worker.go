package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
)

// Worker claims runs and executes them with its handler; Run runs it.
type Worker struct {
	cfg     Config
	store   runstate.Store
	log     *slog.Logger
	actor   runstate.Actor
	start   []string // the statuses of the filter a claim starts
	rest    []string // the statuses of the filter a claim does not start
	running atomic.Bool

	mu     sync.Mutex
	inHand map[string]*Job // from the claim until the outcome is written or the run lost

	busy  atomic.Int64  // handlers running
	freed chan struct{} // a value each time a slot frees
	alarm chan struct{} // a value when a run this worker parked comes due
	stats counters
}

// New returns a worker of cfg, or an ErrInvalidArgument naming the field
// that is wrong; a store without leases is an ErrUnsupported.
func New(cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	store, ok := runstate.As[runstate.Store](cfg.Store)
	if !ok {
		return nil, &runstate.Error{Code: runstate.CodeUnsupported,
			Message: "the store has no leases: workers need them to share runs without running one twice"}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{cfg: cfg, store: store, log: log.With("owner", cfg.Owner.String()),
		actor:  runstate.Actor{Kind: runstate.ActorWorker, ID: cfg.Owner.String()},
		inHand: map[string]*Job{}, freed: make(chan struct{}, 1), alarm: make(chan struct{}, 1)}
	w.start, w.rest = cfg.startable()
	return w, nil
}

// Run claims and executes runs until ctx ends, then drains (Config.Grace)
// and returns once every outcome is written or could not be. It returns
// nil after a drain, and an error when the store refused the worker's
// claims for a reason that retrying cannot mend (its permissions, say);
// it drains then too. A worker runs once at a time.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run is running already")
	}
	defer w.running.Store(false)
	// The handlers' contexts outlive ctx by the grace; the completions'
	// and renewals' until the last outcome is written.
	work, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)
	writes, stopWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWrites()
	comp := w.startCompleters(writes)
	var renewer sync.WaitGroup
	renewer.Go(func() { w.renewPeriodically(writes) })

	watch := w.cfg.Watcher
	if watch == nil {
		watch, _ = runstate.As[runstate.RunnableWatcher](w.store)
	}
	follow, stopFollowing := context.WithCancel(ctx) // ends with Run, however Run ends
	defer stopFollowing()
	following := runstate.Follow(follow, runstate.FollowParams{Watch: runstate.WatchRunnableOf(watch), Poll: w.cfg.Poll})
	if following.WatchErr != nil {
		w.log.Warn("cannot watch the store for runnable runs; polling only", "error", following.WatchErr)
	}
	w.log.Info("worker started", "slots", w.cfg.Slots, "lease", w.cfg.LeaseTTL, "renew", w.cfg.RenewEvery, "poll", w.cfg.Poll,
		"watching", following.Watching, "statuses", w.cfg.Filter.Statuses)
	var handlers sync.WaitGroup
	err := w.claimUntilDone(ctx, work, following.Wake, &handlers, comp)

	w.drain(&handlers, stopWork)
	comp.finish()
	stopWrites()
	renewer.Wait()
	w.log.Info("worker stopped")
	return err
}

// claimUntilDone claims runs for the free slots and begins them, until ctx
// ends or the store refuses claims for good.
func (w *Worker) claimUntilDone(ctx, work context.Context, wake <-chan struct{}, handlers *sync.WaitGroup, comp *completer) error {
	var backlog time.Duration // the last claim's time, when it took all it asked for: more runs are likely waiting
	for ctx.Err() == nil {
		free := w.cfg.Slots - int(w.busy.Load())
		if free <= 0 {
			select {
			case <-w.freed:
			case <-ctx.Done():
			}
			continue
		}
		if backlog > 0 && free < w.cfg.Slots {
			free = w.gatherSlots(ctx, backlog)
		}
		began := time.Now()
		claims, more, err := w.claim(ctx, free)
		backlog = 0
		if err == nil && len(claims) == free {
			backlog = max(time.Since(began), time.Microsecond)
		}
		if w.cfg.OnClaim != nil {
			w.cfg.OnClaim(ClaimReport{Asked: free, Claimed: len(claims), Took: time.Since(began), Err: err})
		}
		for _, c := range claims {
			w.begin(work, c, handlers, comp)
		}
		var refused startRefused
		switch {
		case err == nil && (len(claims) == free || more):
			// Perhaps more are runnable: claim again once slots free.
		case err == nil:
			w.idle(ctx, wake)
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &refused):
			// Claimed, but its start was refused and its lease released.
			w.log.Error("a claimed run could not be started; it was released", "run_id", refused.RunID, "error", err)
			w.idle(ctx, wake) // not at once: a start refused again and again would spin
		case isPermanent(err):
			return fmt.Errorf("worker: claiming runs: %w", err)
		default:
			// The store away, a deadline, a connection reset: it may mend.
			w.log.Warn("claiming runs failed; claiming again at the next wake-up", "error", err)
			w.idle(ctx, wake)
		}
	}
	return nil
}

// isPermanent tells a claim error that no retry mends: the worker's
// rights, its configuration, or what the store can do.
func isPermanent(err error) bool {
	for _, e := range []error{runstate.ErrPermissionDenied, runstate.ErrUnauthenticated, runstate.ErrInvalidArgument, runstate.ErrUnsupported} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// gatherSlots waits, while runs are waiting to be claimed, until every
// slot is free or for about one claim's time, and answers how many are
// free: one claim for all the slots that free meanwhile, rather than one
// for each few as they free, at the cost of at most one claim's time (each
// claim pays it while a long handler holds a slot). A claim costs the
// store a read and a write whatever it takes, so at 8 slots claims of 8
// cost half what claims of 4 do.
func (w *Worker) gatherSlots(ctx context.Context, claimTime time.Duration) int {
	deadline := time.NewTimer(claimTime)
	defer deadline.Stop()
	for {
		free := w.cfg.Slots - int(w.busy.Load())
		if free >= w.cfg.Slots {
			return free
		}
		select {
		case <-w.freed:
		case <-deadline.C:
			return w.cfg.Slots - int(w.busy.Load())
		case <-ctx.Done():
			return free
		}
	}
}

// idle waits for a reason to claim again: a notice or a poll, a run this
// worker parked coming due, or ctx's end.
func (w *Worker) idle(ctx context.Context, wake <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-wake:
	case <-w.alarm:
	}
}

// begin hands a claimed run to a slot.
func (w *Worker) begin(work context.Context, c claimedRun, handlers *sync.WaitGroup, comp *completer) {
	j := newJob(w, work, c)
	w.mu.Lock()
	j.prev = w.inHand[c.Run.RunID]
	w.inHand[c.Run.RunID] = j
	w.mu.Unlock()
	w.busy.Add(1)
	w.stats.claimed.Add(1)
	handlers.Go(func() {
		defer w.freeSlot()
		err := w.callHandler(j)
		if !j.stage(inHandler, completing) {
			return // settled by the handler
		}
		if run := j.Run(); run.Status != runstate.StatusRunning && !errors.Is(context.Cause(j.ctx), runstate.ErrLeaseLost) {
			w.unsettled(j, run)
			return
		}
		if o, ok := w.outcomeOf(j, err); ok {
			comp.submit(o)
			return
		}
		j.stage(completing, ended)
		w.forget(j, Done{Run: j.Run(), Outcome: Lost, Err: err})
	})
}

// unsettled ends a job whose handler returned without settling a run that
// is not running (claimed as it was, not started): no outcome applies to
// it, so its lease is released and the run left as it is.
func (w *Worker) unsettled(j *Job, run runstate.RunSnapshot) {
	j.stage(completing, ended)
	err := fmt.Errorf("worker: the handler returned without settling run %s, claimed %s and not started: it is left %s, its lease released",
		j.id, run.Status, run.Status)
	w.log.Error("a handler returned without settling a run it was given not started", "run_id", j.id, "status", run.Status)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.RenewEvery)
	defer cancel()
	if rel := w.store.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: j.id, Token: j.Lease().Token}); rel != nil {
		err = errors.Join(err, rel)
	}
	w.forget(j, Done{Run: run, Outcome: Unwritten, Err: err})
}

// callHandler runs the handler, a panic being its error.
func (w *Worker) callHandler(j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicked{p}
		}
	}()
	return w.cfg.Handler(j.ctx, j)
}

// panicked is a handler's panic, as its error.
type panicked struct{ value any }

func (p panicked) Error() string { return fmt.Sprintf("the handler panicked: %v", p.value) }

func (w *Worker) freeSlot() {
	w.busy.Add(-1)
	select {
	case w.freed <- struct{}{}:
	default: // one is pending already
	}
}

// forget drops an ended job from the runs in hand and reports it.
func (w *Worker) forget(j *Job, d Done) {
	j.lapse.Stop()
	j.cancel(nil)
	if j.prev != nil {
		<-j.prev.reported
	}
	w.mu.Lock()
	if w.inHand[j.id] == j {
		delete(w.inHand, j.id)
	}
	w.mu.Unlock()
	w.stats.count(d.Outcome)
	if w.cfg.OnDone != nil {
		w.cfg.OnDone(d)
	}
	j.prev = nil // what came before is reported: let it go
	close(j.reported)
}

// drain lets the handlers in hand go on for the grace, then cancels their
// contexts (ErrDraining) and waits for them to return.
func (w *Worker) drain(handlers *sync.WaitGroup, stopWork context.CancelCauseFunc) {
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	if n := w.busy.Load(); n > 0 {
		w.log.Info("worker stopping: waiting for the runs in hand", "runs", n, "grace", w.cfg.Grace)
	}
	select {
	case <-done:
		return
	case <-time.After(w.cfg.Grace):
	}
	w.log.Warn("the grace is over: stopping the runs in hand and handing them back", "runs", w.busy.Load())
	stopWork(ErrDraining)
	<-done
}

// WakeAt wakes the worker, if idle, at t: a handler that parked a run
// until t (Job.Settle with WakeAt, or through a handle of its own) calls
// it, so that the run is claimed on time on a store that announces
// nothing when a parked run comes due. The worker does so itself for the
// retries it parks. A zero t sets nothing.
func (w *Worker) WakeAt(t time.Time) {
	if t.IsZero() {
		return
	}
	time.AfterFunc(time.Until(t)+alarmSlack, func() {
		select {
		case w.alarm <- struct{}{}:
		default:
		}
	})
}

// alarmSlack rings an alarm a little after its time, so that the store's
// clock, which decides, has surely reached it.
const alarmSlack = 10 * time.Millisecond
