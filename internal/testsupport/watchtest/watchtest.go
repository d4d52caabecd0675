// Package watchtest checks a runstate.RunWatcher from outside, the same
// way through every path (in process, a plugin process, a gateway
// process): a write of the watched run wakes the watch, and the watch
// ends with its context.
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
