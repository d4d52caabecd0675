// Package watchtest checks a runstate.RunWatcher from outside, the same
// way through every path (in process, a plugin process, a gateway
// process): a write of the watched run wakes the watch, and the watch
// ends with its context. It also checks what a runstate.RunnableWatcher
// of a store with due alarms promises: a parked run coming due, which no
// write announces, wakes its watchers.
package watchtest

import (
	"context"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// Bound is how long a wake-up may take before a test fails: far beyond
// the milliseconds one takes, it only ends a test that would otherwise
// hang.
const Bound = 20 * time.Second

// RunWakesOnUpdate creates a run through writer, watches it through w,
// moves it to running through writer and fails t unless the watch wakes
// within Bound; then it ends the watch's context and fails t unless the
// channel closes. It returns the time from the start of the update to the
// wake-up, for the test to report.
func RunWakesOnUpdate(t testing.TB, w runstate.RunWatcher, writer runstate.RunStateStore) time.Duration {
	t.Helper()
	ctx := context.Background()
	run, err := writer.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	wake, err := w.WatchRun(watchCtx, runstate.WatchRunParams{RunID: run.RunID})
	if err != nil {
		t.Fatalf("WatchRun: %v", err)
	}
	// A wake-up may come for nothing (at least once): only the one after
	// the update counts.
	for drained := false; !drained; {
		select {
		case <-wake:
		default:
			drained = true
		}
	}
	began := time.Now()
	if _, err := writer.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(runstate.StatusRunning),
		Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "watchtest"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-wake:
		if !open {
			t.Fatal("the watch ended instead of waking")
		}
	case <-time.After(Bound):
		t.Fatalf("no wake-up within %v of an update of the watched run", Bound)
	}
	latency := time.Since(began)
	stop()
	deadline := time.After(Bound)
	for {
		select {
		case _, open := <-wake:
			if !open {
				return latency
			}
		case <-deadline:
			t.Fatalf("the watch goes on %v after its context ended", Bound)
		}
	}
}

// DueRunsWakeWatchers parks a run of s for a moment and checks that its
// coming due wakes a watcher of runnable runs with no write to announce
// it, and that the run is claimable once it has.
func DueRunsWakeWatchers(t *testing.T, s runstate.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, ok := runstate.As[runstate.RunnableWatcher](s)
	if !ok {
		t.Fatal("the store announces no runnable runs")
	}
	wake, err := w.WatchRunnable(ctx, runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "due"})
	if err != nil {
		t.Fatal(err)
	}
	due := run.CreatedAt.Add(300 * time.Millisecond)
	if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &due}); err != nil {
		t.Fatal(err)
	}
	// The creation's notice, if it is still there, is not the one meant.
	select {
	case <-wake:
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Minute}); err == nil {
		t.Fatal("the parked run was claimed before its time")
	}
	select {
	case <-wake:
	case <-time.After(Bound):
		t.Fatalf("no notice %v after the parked run came due", Bound)
	}
	if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Minute}); err != nil {
		t.Fatalf("claiming the run the notice announced: %v", err)
	}
}
