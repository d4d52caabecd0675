package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/internal/testsupport/watchtest"
)

// woken waits for a value on wake; the bound only ends a test that would
// otherwise hang, far beyond the milliseconds a notice takes.
func woken(t *testing.T, wake <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no notice", what)
	}
}

// drain takes a notice that may be waiting, so that the next wait sees a
// new one.
func drain(wake <-chan struct{}) {
	select {
	case <-wake:
	default:
	}
}

// endListening ends the sessions that listen on channel, as a lost
// connection would.
func endListening(t *testing.T, s *postgres.Store, channel string) {
	t.Helper()
	var ended int
	if err := s.DB().GetContext(context.Background(), &ended, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'runstate' AND query = $1`, "LISTEN "+channel); err != nil || ended == 0 {
		t.Fatalf("ended %d listening sessions: %v", ended, err)
	}
}

// hearsAgain writes until wake hears a write: the watch listens again
// after its connection was lost (reconnecting takes a pause).
func hearsAgain(t *testing.T, wake <-chan struct{}, write func()) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		drain(wake)
		write()
		select {
		case <-wake:
			return
		case <-time.After(500 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the watch never listened again")
			}
		}
	}
}

// A watcher on one handle hears the runs another handle creates and
// releases, and nothing of another schema; it survives the loss of its
// connection and ends with its context.
func TestWatchRunnableHearsOtherHandles(t *testing.T) {
	srv, schema := freshSchema(t)
	_, other := freshSchema(t)
	ctx := context.Background()
	writer := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema, NotifyRunnable: true})
	elsewhere := open(t, postgres.Options{DSN: srv.DSN(), Schema: other, NotifyRunnable: true})
	watcher := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	watchCtx, stop := context.WithCancel(ctx)
	wake, err := watcher.WatchRunnable(watchCtx, runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatal(err)
	}

	run, err := writer.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "a run created by another handle")
	claim, err := watcher.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w1"}, TTL: time.Minute})
	if err != nil || claim.Run.RunID != run.RunID {
		t.Fatalf("claim after the notice: %+v %v", claim, err)
	}
	drain(wake)
	if err := writer.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: claim.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "a released lease")

	// Another schema's runs are not this watcher's; the notice of the next
	// run of its own schema is the first to come.
	drain(wake)
	if _, err := elsewhere.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.CreateRun(ctx, runstate.CreateRunParams{RunID: "marker", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "its own schema's run")
	select {
	case <-wake:
		t.Fatal("a second notice: the other schema's run was heard")
	case <-time.After(300 * time.Millisecond):
	}

	// The listening connection is ended: the watcher says so with a notice,
	// connects again, and hears the next run.
	endListening(t, writer, "runstate_runnable")
	woken(t, wake, "the lost connection")
	hearsAgain(t, wake, func() {
		if _, err := writer.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
			t.Fatal(err)
		}
	})

	stop()
	for range wake { // closed when its context ends
	}
}

// A write that leaves a run as claimable as it was sends nothing.
func TestOnlyRunnableChangesAreAnnounced(t *testing.T) {
	srv, schema := freshSchema(t)
	ctx := context.Background()
	s := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema, NotifyRunnable: true})
	quiet := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	wake, err := s.WatchRunnable(ctx, runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "created")
	// A message only, and runs made by a handle that does not announce:
	// the next notice is the marker's.
	if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr("hello")}); err != nil {
		t.Fatal(err)
	}
	if _, err := quiet.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "marker", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "the marker")
	select {
	case <-wake:
		t.Fatal("a notice for a write that changed nothing claimable")
	case <-time.After(300 * time.Millisecond):
	}
}

// A run's watcher on one handle hears the writes of that run by another
// handle with NotifyRuns (a create, an update, a claim), and ends with its
// context; a writer without NotifyRuns announces nothing, and the same
// run id in another schema is another run.
func TestWatchRunHearsTheRunsWrites(t *testing.T) {
	srv, schema := freshSchema(t)
	_, other := freshSchema(t)
	ctx := context.Background()
	writer := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema, NotifyRuns: true})
	elsewhere := open(t, postgres.Options{DSN: srv.DSN(), Schema: other, NotifyRuns: true})
	quiet := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	watcher := open(t, postgres.Options{DSN: srv.DSN(), Schema: schema})
	if _, err := watcher.WatchRun(ctx, runstate.WatchRunParams{RunID: "not a run id"}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("a malformed run id: %v, want INVALID_ARGUMENT", err)
	}
	const id = "watched-run"
	watchCtx, stop := context.WithCancel(ctx)
	wake, err := watcher.WatchRun(watchCtx, runstate.WatchRunParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := elsewhere.CreateRun(ctx, runstate.CreateRunParams{RunID: id, WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	run, err := writer.CreateRun(ctx, runstate.CreateRunParams{RunID: id, WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "the run created by another handle")
	drain(wake)
	if _, err := quiet.UpdateRun(ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: run.Version, Status: string(runstate.StatusRunning), Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "test"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Error("a writer without NotifyRuns woke the watcher")
	case <-time.After(300 * time.Millisecond):
	}
	run, err = writer.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.UpdateRun(ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: run.Version, Status: string(runstate.StatusWaiting), Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "test"}}); err != nil {
		t.Fatal(err)
	}
	woken(t, wake, "the run updated by another handle")

	// A second watch of the same run shares the listening connection.
	second, err := watcher.WatchRun(watchCtx, runstate.WatchRunParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	var listening int
	if err := writer.DB().GetContext(ctx, &listening, `SELECT COUNT(*) FROM pg_stat_activity
		WHERE application_name = 'runstate' AND query = 'LISTEN runstate_run'`); err != nil || listening != 1 {
		t.Fatalf("%d connections listen for the writes of runs (%v), want the one the watches share", listening, err)
	}
	// The listening connection is ended: both watches wake, and the
	// listener connects again and hears the next write.
	drain(wake)
	endListening(t, writer, "runstate_run")
	woken(t, wake, "the lost connection")
	woken(t, second, "the lost connection, the second watch")
	hearsAgain(t, second, func() {
		if run, err = writer.GetRun(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := writer.UpdateRun(ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: run.Version, Message: ptr("again")}); err != nil {
			t.Fatal(err)
		}
	})
	stop()
	for range wake {
	}
	for range second {
	}
}

// A parked run coming due wakes the watchers of runnable runs, as a write
// would: the watch reads the parked index for the next wake time.
func TestADueRunWakesTheWatchers(t *testing.T) {
	srv, schema := freshSchema(t)
	watchtest.DueRunsWakeWatchers(t, open(t, postgres.Options{DSN: srv.DSN(), Schema: schema, NotifyRunnable: true}))
}
