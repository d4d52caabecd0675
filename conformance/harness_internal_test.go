package conformance

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
)

// watchedHarness records when it is closed, and whether a check was still
// running at that moment.
type watchedHarness struct {
	store          *memory.Store
	checkRunning   *atomic.Bool
	closed         atomic.Bool
	closedUnderRun atomic.Bool
}

func (h *watchedHarness) Store() runstate.RunStateStore { return h.store }
func (h *watchedHarness) OpenHandle(context.Context) (runstate.RunStateStore, error) {
	return h.store, nil
}
func (h *watchedHarness) Advance(time.Duration) {}
func (h *watchedHarness) Close(context.Context) error {
	h.closedUnderRun.Store(h.checkRunning.Load())
	h.closed.Store(true)
	return nil // the test reads the store afterwards
}

func watchedTarget(store *memory.Store, running *atomic.Bool, made **watchedHarness) Target {
	return Target{Name: "watched", CheckTimeout: 50 * time.Millisecond, NewHarness: func(context.Context) (Harness, error) {
		*made = &watchedHarness{store: store, checkRunning: running}
		return *made, nil
	}}
}

// A check that overruns is ended through its context; its harness is
// closed only after it has stopped, never under it.
func TestTimedOutCheckStopsBeforeItsHarnessCloses(t *testing.T) {
	var running atomic.Bool
	var h *watchedHarness
	target := watchedTarget(openMemory(t), &running, &h)
	rule := Rule{ID: "T-001", check: func(c *checkState) {
		running.Store(true)
		defer running.Store(false)
		<-c.ctx.Done()
		time.Sleep(100 * time.Millisecond) // winds down after cancellation
	}}
	res := RunRule(context.Background(), target, rule)
	if res.Outcome != Error || !strings.Contains(res.Detail, "did not finish within") {
		t.Fatalf("outcome %s %q, want an error naming the time limit", res.Outcome, res.Detail)
	}
	if !h.closed.Load() || h.closedUnderRun.Load() {
		t.Fatalf("harness closed %v, while the check ran %v", h.closed.Load(), h.closedUnderRun.Load())
	}
}

// A check that ignores cancellation is abandoned with its harness open.
func TestCheckThatIgnoresCancellationIsAbandoned(t *testing.T) {
	defer func(d time.Duration) { abandonAfter = d }(abandonAfter)
	abandonAfter = 50 * time.Millisecond
	var running atomic.Bool
	var h *watchedHarness
	release := make(chan struct{})
	target := watchedTarget(openMemory(t), &running, &h)
	rule := Rule{ID: "T-002", check: func(c *checkState) {
		running.Store(true)
		defer running.Store(false)
		<-release
	}}
	res := RunRule(context.Background(), target, rule)
	if res.Outcome != Error || !strings.Contains(res.Detail, "abandoned") {
		t.Fatalf("outcome %s %q, want an error saying the check was abandoned", res.Outcome, res.Detail)
	}
	if h.closed.Load() {
		t.Fatal("the harness of a check still running was closed")
	}
	release <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for !h.closed.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !h.closed.Load() || h.closedUnderRun.Load() {
		t.Fatalf("once the abandoned check stopped: harness closed %v, while it ran %v", h.closed.Load(), h.closedUnderRun.Load())
	}
}

// A harness whose store holds runs is refused before the check writes; a
// target may allow it explicitly.
func TestStoreWithRunsIsRefused(t *testing.T) {
	ctx := context.Background()
	store := openMemory(t)
	if _, err := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "real", Steps: []runstate.StepSpec{{Name: "s"}}}); err != nil {
		t.Fatal(err)
	}
	var running atomic.Bool
	var h *watchedHarness
	target := watchedTarget(store, &running, &h)
	target.CheckTimeout = time.Minute
	ran := false
	rule := Rule{ID: "T-003", check: func(c *checkState) { ran = true }}

	if err := CheckEmpty(ctx, target); !errors.Is(err, ErrStoreNotEmpty) {
		t.Fatalf("CheckEmpty: %v, want ErrStoreNotEmpty", err)
	}
	store = openMemory(t)
	if _, err := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "real", Steps: []runstate.StepSpec{{Name: "s"}}}); err != nil {
		t.Fatal(err)
	}
	target = watchedTarget(store, &running, &h)
	if res := RunRule(ctx, target, rule); res.Outcome != Error || ran || !strings.Contains(res.Detail, "not empty") {
		t.Fatalf("outcome %s %q (check ran: %v), want an error before the check", res.Outcome, res.Detail, ran)
	}
	if !h.closed.Load() {
		t.Error("the refused harness was not closed")
	}
	if page, _ := store.ListRuns(ctx, runstate.ListRunsParams{}); len(page.Runs) != 1 {
		t.Fatalf("%d runs after a refused check", len(page.Runs))
	}

	target = watchedTarget(openMemory(t), &running, &h)
	if err := CheckEmpty(ctx, target); err != nil {
		t.Fatalf("CheckEmpty on an empty store: %v", err)
	}
	store = openMemory(t)
	store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "real", Steps: []runstate.StepSpec{{Name: "s"}}})
	target = watchedTarget(store, &running, &h)
	target.AllowStoredRuns = true
	if res := RunRule(ctx, target, rule); res.Outcome != Pass || !ran {
		t.Fatalf("AllowStoredRuns: outcome %s %q, check ran %v", res.Outcome, res.Detail, ran)
	}
}

// openMemory opens a memory store for one test. (memorytest imports this
// package, so its helper cannot serve here.)
func openMemory(t *testing.T) *memory.Store {
	t.Helper()
	s, err := memory.Open(context.Background(), memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
