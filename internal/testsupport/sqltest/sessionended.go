package sqltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// SessionEndedSQL is an engine's SQL for SessionEndedMidCall: the
// blocker's statements, and how the store's statements that wait for
// what they hold begin.
type SessionEndedSQL struct {
	// LockRow (run_id) locks a run's row; the store waits for it in a
	// statement beginning with WaitsForRow.
	LockRow, WaitsForRow string
	// InsertAudit (run_id, seq) inserts an audit row; the store waits for
	// its key in a statement beginning with WaitsForAudit.
	InsertAudit, WaitsForAudit string
}

// Blocker is a session of its own that holds, in a transaction, the lock
// a store's call will wait for.
type Blocker interface {
	// Exec runs a statement in the blocker's transaction.
	Exec(query string, args ...any) error
	// EndWaiter ends the store's session once it waits in a statement
	// beginning with waits, failing the test if none does; done carries the
	// call's result, which must not come first.
	EndWaiter(t *testing.T, waits string, done <-chan error)
	// Rollback ends the blocker's transaction.
	Rollback() error
}

// SessionEndedMidCall checks a session the server ends in the middle of a
// transaction (killed, or its backend terminated): the caller gets
// UNAVAILABLE, nothing of the call is written, and the next call works on
// the same store, whose pool replaces the dead sessions.
func SessionEndedMidCall(t *testing.T, s runstate.Store, newBlocker func(t *testing.T) Blocker, q SessionEndedSQL) {
	ctx := context.Background()
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "kill"})
	if err != nil {
		t.Fatal(err)
	}
	if run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"}); err != nil {
		t.Fatal(err)
	}
	state := func() (runstate.RunSnapshot, int) {
		got, err := s.GetRun(ctx, run.RunID)
		if err != nil {
			t.Fatalf("GetRun after the kill: %v", err)
		}
		page, err := s.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: run.RunID})
		if err != nil {
			t.Fatal(err)
		}
		return got, len(page.Events)
	}
	for _, tc := range []struct {
		name string
		// hold takes, in the blocker's transaction, the lock the call will wait for.
		hold  func(b Blocker) error
		waits string // how the statement held up begins
		patch runstate.UpdateRunParams
	}{
		{"while waiting for the run's row lock", func(b Blocker) error { return b.Exec(q.LockRow, run.RunID) },
			q.WaitsForRow, runstate.UpdateRunParams{Status: "waiting"}},
		// A forbidden transition writes two events (rejected, then the move
		// to failed); the second one's key is taken here, so the call has
		// written one audit row when it starts waiting.
		{"while writing the second of two audit rows", func(b Blocker) error { return b.Exec(q.InsertAudit, run.RunID, 4) },
			q.WaitsForAudit, runstate.UpdateRunParams{Status: "queued"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, events := state()
			b := newBlocker(t)
			if err := tc.hold(b); err != nil {
				t.Fatal(err)
			}
			p := tc.patch
			p.RunID, p.ExpectedVersion = run.RunID, before.Version
			done := make(chan error, 1)
			go func() { _, err := s.UpdateRun(ctx, p); done <- err }()
			b.EndWaiter(t, tc.waits, done)
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("the call did not return after its session was ended")
			}
			if !errors.Is(err, runstate.ErrUnavailable) {
				t.Fatalf("UpdateRun on an ended session: %v (code %q), want UNAVAILABLE", err, runstate.CodeOf(err))
			}
			t.Logf("caller sees: %v", err)
			b.Rollback()
			after, afterEvents := state()
			if after.Version != before.Version || after.Status != before.Status || afterEvents != events {
				t.Fatalf("half-written: version %d->%d, status %s->%s, events %d->%d",
					before.Version, after.Version, before.Status, after.Status, events, afterEvents)
			}
			message := "after the kill"
			next, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: after.Version, Message: &message})
			if err != nil || next.Version != after.Version+1 {
				t.Fatalf("the call after the kill: %v", err)
			}
		})
	}
}
