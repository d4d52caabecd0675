package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/worker"
)

func TestAFailedAttemptIsParkedAndRetriedAfterItsBackoff(t *testing.T) {
	s := openMemory(t, nil)
	id := createRuns(t, s, 1)[0]
	log := newDoneLog(3)
	var backoffs []int
	var mu sync.Mutex
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), MaxAttempts: 3, OnDone: log.add,
		Backoff: func(attempt int) time.Duration {
			mu.Lock()
			backoffs = append(backoffs, attempt)
			mu.Unlock()
			return 20 * time.Millisecond
		},
		Handler: func(_ context.Context, job *worker.Job) error {
			if job.Attempt() < 3 {
				return errors.New("the remote end said 503")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, 3)
	d := log.of(id)
	if len(d) != 3 || d[0].Outcome != worker.Retried || d[1].Outcome != worker.Retried || d[2].Outcome != worker.Succeeded {
		t.Fatalf("reported %+v", d)
	}
	for _, retry := range d[:2] {
		if retry.Run.Status != runstate.StatusWaiting || retry.Run.WakeAt.IsZero() || !strings.Contains(retry.Err.Error(), "503") {
			t.Fatalf("a retry left the run %s, wake at %v, error %v; want it waiting, parked", retry.Run.Status, retry.Run.WakeAt, retry.Err)
		}
	}
	run := d[2].Run
	if run.Status != runstate.StatusSuccess || run.Labels[worker.AttemptLabel] != "2" {
		t.Fatalf("run %s, labels %v", run.Status, run.Labels)
	}
	want := []string{"queued>running", "running>waiting", "waiting>running", "running>waiting", "waiting>running", "running>success"}
	if got := trail(t, s, id); !slices.Equal(got, want) {
		t.Fatalf("trail %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(backoffs, []int{1, 2}) {
		t.Fatalf("backoffs asked for attempts %v", backoffs)
	}
}

// Runs fail with a diagnostic: at once for a permanent error or a panic,
// after the last attempt otherwise.
func TestRunsFailWithADiagnosticThatSaysWhy(t *testing.T) {
	s := openMemory(t, nil)
	ids := map[string]string{}
	for _, name := range []string{"permanent", "panics", "flaky"} {
		run, err := s.CreateRun(t.Context(), runstate.CreateRunParams{WorkflowName: name})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = run.RunID
	}
	log := newDoneLog(4)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), MaxAttempts: 2, OnDone: log.add,
		Backoff: func(int) time.Duration { return time.Millisecond },
		Handler: func(_ context.Context, job *worker.Job) error {
			switch job.Run().WorkflowName {
			case "permanent":
				return worker.Permanent(errors.New("the card was declined"))
			case "panics":
				panic("index out of range")
			}
			return errors.New("timed out")
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, 4) // flaky is reported twice: retried, then failed
	for name, want := range map[string]runstate.Diagnostic{
		"permanent": {ErrorCode: "HANDLER_ERROR", Message: "the card was declined", Retryable: false},
		"panics":    {ErrorCode: "HANDLER_PANIC", Message: "the handler panicked: index out of range", Retryable: true},
		"flaky":     {ErrorCode: "HANDLER_ERROR", Message: "timed out", Retryable: true},
	} {
		run, err := s.GetRun(t.Context(), ids[name])
		if err != nil {
			t.Fatal(err)
		}
		diag := run.Diagnostic
		if run.Status != runstate.StatusFailed || diag == nil || diag.ErrorCode != want.ErrorCode || diag.Message != want.Message ||
			diag.Retryable != want.Retryable {
			t.Errorf("%s: %s with %+v; want failed with %+v", name, run.Status, diag, want)
		}
	}
	if d := log.of(ids["flaky"]); len(d) != 2 || d[0].Outcome != worker.Retried || d[1].Outcome != worker.Failed {
		t.Fatalf("flaky reported %+v", d)
	}
	if st := w.Stats(); st.Failed != 3 || st.Retried != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A handler that makes the run's last write itself (a park) settles it:
// the worker writes nothing after it.
func TestAHandlerThatSettlesTheRunHasTheLastWord(t *testing.T) {
	s := openMemory(t, nil)
	id := createRuns(t, s, 1)[0]
	log := newDoneLog(1)
	wake := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), OnDone: log.add,
		Handler: func(ctx context.Context, job *worker.Job) error {
			if _, err := job.Update(ctx, runstate.UpdateRunParams{Status: string(runstate.StatusWaiting)}); !errors.Is(err, runstate.ErrInvalidArgument) {
				return worker.Permanent(errors.New("Update changed a status"))
			}
			_, err := job.Settle(ctx, runstate.UpdateRunParams{Status: string(runstate.StatusWaiting), WakeAt: &wake})
			if err != nil {
				return worker.Permanent(err)
			}
			return errors.New("ignored: the run is settled")
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, 1)
	if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Settled {
		t.Fatalf("reported %+v", d)
	}
	run, err := s.GetRun(t.Context(), id)
	if err != nil || run.Status != runstate.StatusWaiting || !run.WakeAt.Equal(wake) || run.Version != 3 {
		t.Fatalf("run %s, wake %v, version %d, %v; want waiting until %v at version 3", run.Status, run.WakeAt, run.Version, err, wake)
	}
}

// The outcomes survive a store that fails a whole completion write, and
// one that fails part-way through a batch: every run ends in success,
// written once.
func TestCompletionsSurviveAStoreFailingMidBatch(t *testing.T) {
	s := &failingBatches{Store: openMemory(t, nil)}
	const n = 120
	ids := createRuns(t, s, n)
	log := newDoneLog(n)
	release := make(chan struct{})
	var waiting atomic.Int64
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 40, CompleteBatch: 40, CompletionsInFlight: 1, OnDone: log.add,
		Handler: func(context.Context, *worker.Job) error {
			// Outcomes come together, so that batches carry many.
			if waiting.Add(1) == 40 {
				close(release)
			}
			<-release
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, n)
	if s.wholeFailures.Load() != 1 || s.partFailures.Load() != 1 {
		t.Fatalf("the store failed %d whole writes and %d part-way; want one each", s.wholeFailures.Load(), s.partFailures.Load())
	}
	for _, id := range ids {
		if got := trail(t, s, id); !slices.Equal(got, []string{"queued>running", "running>success"}) {
			t.Fatalf("run %s: trail %v", id, got)
		}
		if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Succeeded {
			t.Fatalf("run %s: reported %+v", id, d)
		}
	}
}

// failingBatches fails its first UpdateRuns call whole, and applies only
// the first half of the first batch of several that follows, the rest
// failing as a store that went away part-way would.
type failingBatches struct {
	runstate.Store
	calls                       atomic.Int64
	wholeFailures, partFailures atomic.Int64
}

func (f *failingBatches) Features() runstate.Features {
	feat := runstate.Resolve(f.Store)
	feat.BatchUpdater = f
	return feat
}

func (f *failingBatches) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	inner, _ := runstate.As[runstate.BatchUpdater](f.Store)
	if f.calls.Add(1) == 1 {
		f.wholeFailures.Add(1)
		return runstate.UpdateRunsResult{}, runstate.Unavailable("the test's store", errors.New("connection reset by peer"))
	}
	if len(p.Updates) < 4 || f.partFailures.Load() > 0 {
		return inner.UpdateRuns(ctx, p)
	}
	f.partFailures.Add(1)
	half := len(p.Updates) / 2
	res, err := inner.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: p.Updates[:half]})
	if err != nil {
		return res, err
	}
	for range p.Updates[half:] {
		res.Items = append(res.Items, runstate.UpdateRunsItem{Err: runstate.Unavailable("the test's store", errors.New("connection lost mid-batch"))})
	}
	return res, nil
}

// A drain lets the runs in hand finish and claims nothing more.
func TestADrainLetsTheRunsInHandFinish(t *testing.T) {
	s := openMemory(t, nil)
	ids := createRuns(t, s, 3)
	log := newDoneLog(3)
	inHandler, release := make(chan struct{}, 3), make(chan struct{})
	var finished atomic.Int64
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 3, Grace: hangGuard, OnDone: log.add,
		Handler: func(context.Context, *worker.Job) error {
			inHandler <- struct{}{}
			<-release
			finished.Add(1)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	for range 3 {
		<-inHandler
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(50 * time.Millisecond) // the drain has begun
	later := createRuns(t, s, 2)
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) with three runs in hand", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if finished.Load() != 3 {
		t.Fatalf("Run returned with %d of 3 handlers done", finished.Load())
	}
	for _, id := range ids {
		if run, _ := s.GetRun(t.Context(), id); run.Status != runstate.StatusSuccess {
			t.Fatalf("run %s is %s after the drain; want success", id, run.Status)
		}
	}
	for _, id := range later {
		if run, _ := s.GetRun(t.Context(), id); run.Status != runstate.StatusQueued {
			t.Fatalf("run %s, created during the drain, is %s; want queued, unclaimed", id, run.Status)
		}
	}
}

// A drain past its grace stops the handlers (ErrDraining) and hands their
// runs back, claimable at once, and another worker completes them.
func TestADrainPastItsGraceHandsTheRunsBack(t *testing.T) {
	s := openMemory(t, nil)
	ids := createRuns(t, s, 2)
	inHandler := make(chan struct{}, 2)
	causes := make(chan error, 2)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 2, Grace: 50 * time.Millisecond,
		Handler: func(ctx context.Context, _ *worker.Job) error {
			inHandler <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	<-inHandler
	<-inHandler
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if cause := <-causes; !errors.Is(cause, worker.ErrDraining) {
			t.Fatalf("the handler's context ended for %v; want ErrDraining", cause)
		}
	}
	if st := w.Stats(); st.HandedBack != 2 {
		t.Fatalf("stats %+v", st)
	}
	page, err := s.ListRunnableRuns(t.Context(), runstate.ListRunnableParams{})
	if err != nil || len(page.Runs) != 2 {
		t.Fatalf("runnable after the hand-back: %d, %v; want both", len(page.Runs), err)
	}
	log := newDoneLog(2)
	next, err := worker.New(worker.Config{Store: s, Owner: owner("w2"), OnDone: log.add,
		Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	started(t, next)
	log.wait(t, 2)
	for _, id := range ids {
		want := []string{"queued>running", "running>waiting", "waiting>running", "running>success"}
		if got := trail(t, s, id); !slices.Equal(got, want) {
			t.Fatalf("run %s: trail %v, want %v", id, got, want)
		}
	}
}

// Under RecoverTakeover, a worker that also claims running runs takes
// over the runs of a worker that died, and its handler knows.
func TestAWorkerTakesOverTheRunsOfADeadOne(t *testing.T) {
	clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openMemory(t, clock)
	id := createRuns(t, s, 1)[0]
	if _, err := runstate.ClaimRuns(t.Context(), s, runstate.ClaimRunsParams{Owner: owner("dead"), TTL: time.Minute, Max: 1, Start: true}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := runstate.Recover(t.Context(), s, runstate.RecoveryOptions{Policy: runstate.RecoverTakeover, Owner: owner("recovery")}); err != nil {
		t.Fatal(err)
	}
	// Queued runs behind it: each is started by its claim, never handed
	// over unstarted, and handled once.
	queued := createRuns(t, s, 3)
	log := newDoneLog(4)
	var mu sync.Mutex
	seen := map[string][]string{}
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 4, OnDone: log.add,
		Filter: runstate.RunnableFilter{Statuses: []string{"queued", "waiting", "running"}},
		Handler: func(_ context.Context, job *worker.Job) error {
			mu.Lock()
			defer mu.Unlock()
			seen[job.Run().RunID] = append(seen[job.Run().RunID], fmt.Sprintf("started=%v taken_over=%v", job.Started(), job.TakenOver()))
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, 4)
	mu.Lock()
	defer mu.Unlock()
	if got := seen[id]; len(got) != 1 || got[0] != "started=false taken_over=true" {
		t.Fatalf("the dead worker's run was handled %v", got)
	}
	for _, q := range queued {
		if got := seen[q]; len(got) != 1 || got[0] != "started=true taken_over=false" {
			t.Fatalf("queued run %s was handled %v; want once, started by its claim", q, got)
		}
	}
	for _, r := range append(queued, id) {
		if d := log.of(r); len(d) != 1 || d[0].Outcome != worker.Succeeded {
			t.Fatalf("run %s reported %+v", r, d)
		}
	}
}

func TestNewRefusesABadConfiguration(t *testing.T) {
	s := openMemory(t, nil)
	handler := func(context.Context, *worker.Job) error { return nil }
	good := worker.Config{Store: s, Owner: owner("w1"), Handler: handler}
	for name, tc := range map[string]struct {
		change func(*worker.Config)
		field  string
	}{
		"no store":                {func(c *worker.Config) { c.Store = nil }, "store"},
		"no handler":              {func(c *worker.Config) { c.Handler = nil }, "handler"},
		"no incarnation":          {func(c *worker.Config) { c.Owner.Incarnation = "" }, "owner"},
		"negative slots":          {func(c *worker.Config) { c.Slots = -1 }, "slots"},
		"too many slots":          {func(c *worker.Config) { c.Slots = runstate.MaxBatchItems + 1 }, "slots"},
		"renewals too rare":       {func(c *worker.Config) { c.LeaseTTL, c.RenewEvery = time.Second, time.Second }, "renew_every"},
		"a terminal status":       {func(c *worker.Config) { c.Filter.Statuses = []string{"success"} }, "filter.statuses"},
		"an unknown status":       {func(c *worker.Config) { c.Filter.Statuses = []string{"Queued"} }, "status"},
		"a negative grace":        {func(c *worker.Config) { c.Grace = -time.Second }, "grace"},
		"a lease of two days":     {func(c *worker.Config) { c.LeaseTTL = 48 * time.Hour }, "ttl"},
		"a negative linger":       {func(c *worker.Config) { c.CompleteLinger = -time.Millisecond }, "complete_linger"},
		"a linger past the lease": {func(c *worker.Config) { c.LeaseTTL, c.CompleteLinger = time.Minute, time.Minute }, "complete_linger"},
	} {
		t.Run(name, func(t *testing.T) {
			c := good
			tc.change(&c)
			_, err := worker.New(c)
			var e *runstate.Error
			if !errors.Is(err, runstate.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != tc.field {
				t.Fatalf("New: %v; want ErrInvalidArgument naming %s", err, tc.field)
			}
		})
	}
	if _, err := worker.New(good); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
	if _, err := worker.New(worker.Config{Store: noLeases{s}, Owner: owner("w1"), Handler: handler}); !errors.Is(err, runstate.ErrUnsupported) {
		t.Fatalf("a store without leases: %v; want ErrUnsupported", err)
	}
}

// noLeases is a store without a lease side.
type noLeases struct{ runstate.RunStateStore }

func (noLeases) Features() runstate.Features { return runstate.Features{} }

// hangingBatches is a store whose writes after the claim never answer
// until their caller gives up, as a store behind a connection that died
// without a word.
type hangingBatches struct{ runstate.Store }

func (h hangingBatches) Features() runstate.Features {
	feat := runstate.Resolve(h.Store)
	feat.BatchUpdater = h
	return feat
}

func (hangingBatches) UpdateRuns(ctx context.Context, _ runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	<-ctx.Done()
	return runstate.UpdateRunsResult{}, ctx.Err()
}

func (hangingBatches) RenewLease(ctx context.Context, _ runstate.RenewLeaseParams) (runstate.Lease, error) {
	<-ctx.Done()
	return runstate.Lease{}, ctx.Err()
}

func (hangingBatches) ReleaseLease(ctx context.Context, _ runstate.ReleaseLeaseParams) error {
	<-ctx.Done()
	return ctx.Err()
}

// A store that stops answering holds a worker's stop no longer than the
// leases it could still honour: the outcome is given up, unwritten, and
// Run returns.
func TestAStoreThatStopsAnsweringHoldsTheStopOnlyUntilTheLeasesAreUp(t *testing.T) {
	mem := openMemory(t, nil)
	id := createRuns(t, mem, 1)[0]
	log := newDoneLog(1)
	w, err := worker.New(worker.Config{Store: hangingBatches{mem}, Owner: owner("w1"), LeaseTTL: time.Second, Grace: 100 * time.Millisecond,
		OnDone: log.add, Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	log.wait(t, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Unwritten {
		t.Fatalf("reported %+v, want unwritten", d)
	}
	if run, _ := mem.GetRun(t.Context(), id); run.Status != runstate.StatusRunning {
		t.Fatalf("run %s; want it running, for recovery", run.Status)
	}
}
