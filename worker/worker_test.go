package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/worker"
)

// hangGuard bounds every wait of these tests: a guard against a hang,
// never a claim about speed.
const hangGuard = 30 * time.Second

func openMemory(t *testing.T, clock runstate.Clock) *memory.Store {
	t.Helper()
	s, err := memory.Open(t.Context(), memory.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func createRuns(t *testing.T, s runstate.RunStateStore, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		run, err := s.CreateRun(t.Context(), runstate.CreateRunParams{WorkflowName: "w"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = run.RunID
	}
	return ids
}

// started runs w until stop is called, which cancels its context and
// returns Run's error.
func started(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(hangGuard):
				err = errors.New("Run did not return after its context ended")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// doneLog collects what OnDone saw.
type doneLog struct {
	mu    sync.Mutex
	runs  map[string][]worker.Done
	count chan struct{}
}

func newDoneLog(capacity int) *doneLog {
	return &doneLog{runs: map[string][]worker.Done{}, count: make(chan struct{}, capacity)}
}

func (l *doneLog) add(d worker.Done) {
	l.mu.Lock()
	l.runs[d.Run.RunID] = append(l.runs[d.Run.RunID], d)
	l.mu.Unlock()
	l.count <- struct{}{}
}

// wait waits for n more reports.
func (l *doneLog) wait(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-l.count:
		case <-time.After(hangGuard):
			t.Fatalf("%d of %d runs reported done after %v", i, n, hangGuard)
		}
	}
}

func (l *doneLog) of(id string) []worker.Done {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs[id])
}

func trail(t *testing.T, s runstate.RunStateStore, id string) []string {
	t.Helper()
	page, err := s.ListAuditEvents(t.Context(), runstate.ListAuditParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range page.Events {
		if ev.Kind == runstate.AuditTransition {
			out = append(out, string(ev.From)+">"+string(ev.To))
		}
	}
	return out
}

func owner(name string) runstate.Owner { return runstate.Owner{Worker: name, Incarnation: "1"} }

func TestEveryRunIsHandledOnceAndEndsInSuccess(t *testing.T) {
	s := openMemory(t, nil)
	const n = 300
	ids := createRuns(t, s, n)
	var calls sync.Map
	var inHand, most atomic.Int64
	log := newDoneLog(n)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 8, CompleteBatch: 16, OnDone: log.add,
		Handler: func(ctx context.Context, job *worker.Job) error {
			now := inHand.Add(1)
			defer inHand.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			if job.Run().Status != runstate.StatusRunning || job.Attempt() != 1 || job.TakenOver() {
				return worker.Permanent(fmt.Errorf("the handler got %+v, attempt %d", job.Run(), job.Attempt()))
			}
			c, _ := calls.LoadOrStore(job.Run().RunID, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	log.wait(t, n)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m > 8 {
		t.Errorf("%d handlers ran at once with 8 slots", m)
	}
	for _, id := range ids {
		c, ok := calls.Load(id)
		if !ok || c.(*atomic.Int64).Load() != 1 {
			t.Fatalf("run %s: handled %v times, want once", id, c)
		}
		run, err := s.GetRun(t.Context(), id)
		if err != nil || run.Status != runstate.StatusSuccess {
			t.Fatalf("run %s: %v, %v; want success", id, run.Status, err)
		}
		if got := trail(t, s, id); !slices.Equal(got, []string{"queued>running", "running>success"}) {
			t.Fatalf("run %s: trail %v", id, got)
		}
		// The start was the claim's write, and both writes are the
		// worker's, fenced by the claim's lease.
		page, err := s.ListAuditEvents(t.Context(), runstate.ListAuditParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events[1:] {
			if ev.Actor != (runstate.Actor{Kind: runstate.ActorWorker, ID: "w1/1"}) || ev.LeaseToken == 0 {
				t.Fatalf("run %s: event %+v; want the worker's, fenced", id, ev)
			}
		}
		if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Succeeded || d[0].Run.Status != runstate.StatusSuccess {
			t.Fatalf("run %s: reported %+v", id, d)
		}
		lease, err := s.GetLease(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		// An unreleased lease is renewable by its token even once expired.
		if _, err := s.RenewLease(t.Context(), runstate.RenewLeaseParams{RunID: id, Token: lease.Token, TTL: time.Minute}); !errors.Is(err, runstate.ErrLeaseLost) {
			t.Fatalf("run %s: renewing its last lease: %v; want ErrLeaseLost, released by the completion", id, err)
		}
	}
	if st := w.Stats(); st.Claimed != n || st.Succeeded != n || st.Failed+st.Lost+st.Unwritten+st.HandedBack != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A store that announces runnable runs wakes an idle worker: with a poll
// of an hour, a run created after the worker went idle is still handled.
func TestAnIdleWorkerWakesOnTheStoresNotice(t *testing.T) {
	s := openMemory(t, nil)
	log := newDoneLog(1)
	idle := make(chan struct{})
	var once sync.Once
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Poll: time.Hour, OnDone: log.add,
		// The first claim finds nothing; the worker then waits for a notice.
		OnClaim: func(r worker.ClaimReport) {
			if r.Claimed == 0 && r.Err == nil {
				once.Do(func() { close(idle) })
			}
		},
		Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	<-idle
	id := createRuns(t, s, 1)[0]
	log.wait(t, 1)
	if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Succeeded {
		t.Fatalf("reported %+v", d)
	}
}

// A lease lost mid-handler (it lapsed and another worker claimed the run)
// cancels the handler's context with ErrLeaseLost; the handler's writes
// are refused, and the worker writes nothing for the run.
func TestALeaseLostMidHandlerStopsTheHandlerAndWritesNothing(t *testing.T) {
	clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openMemory(t, clock)
	id := createRuns(t, s, 1)[0]
	log := newDoneLog(1)
	inHandler := make(chan *worker.Job, 1)
	type stop struct{ cause, write error }
	stopped := make(chan stop, 1)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), LeaseTTL: time.Hour, RenewEvery: 10 * time.Millisecond, OnDone: log.add,
		Handler: func(ctx context.Context, job *worker.Job) error {
			inHandler <- job
			<-ctx.Done()
			_, err := job.Update(context.Background(), runstate.UpdateRunParams{Message: ptr("too late")})
			stopped <- stop{context.Cause(ctx), err}
			return errors.New("stopped")
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	job := <-inHandler
	first := job.Lease()
	// Renewals go on: the store's expiry moves with its clock.
	clock.Advance(time.Minute)
	waitFor(t, "a renewal after the clock moved", func() bool {
		l, err := s.GetLease(t.Context(), id)
		return err == nil && l.ExpiresAt.After(first.ExpiresAt)
	})
	// The lease lapses (no renewal between the move and the claim) and
	// another worker takes the run.
	var taken runstate.Claim
	waitFor(t, "another worker's claim of the lapsed lease", func() bool {
		clock.Advance(2 * time.Hour)
		taken, err = s.ClaimRun(t.Context(), runstate.ClaimRunParams{RunID: id, Owner: owner("w2"), TTL: 24 * time.Hour,
			Statuses: []string{string(runstate.StatusRunning)}})
		return err == nil
	})
	var why stop
	select {
	case why = <-stopped:
	case <-time.After(hangGuard):
		t.Fatal("the handler's context was not cancelled after its lease was lost")
	}
	if !errors.Is(why.cause, runstate.ErrLeaseLost) || !errors.Is(why.write, runstate.ErrLeaseLost) {
		t.Fatalf("the context's cause %v, the late write's error %v; want the lost lease both", why.cause, why.write)
	}
	log.wait(t, 1)
	if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Lost {
		t.Fatalf("reported %+v, want lost", d)
	}
	run, err := s.GetRun(t.Context(), id)
	if err != nil || run.Status != runstate.StatusRunning || run.Message != "" {
		t.Fatalf("run %+v, %v: the worker wrote after losing the lease", run, err)
	}
	if _, err := s.RenewLease(t.Context(), runstate.RenewLeaseParams{RunID: id, Token: taken.Lease.Token, TTL: time.Hour}); err != nil {
		t.Fatalf("the other worker's lease: %v; want it held", err)
	}
	if st := w.Stats(); st.Lost != 1 || st.Succeeded+st.Failed+st.Retried+st.HandedBack != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func ptr[T any](v T) *T { return &v }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, hangGuard)
		}
	}
}
