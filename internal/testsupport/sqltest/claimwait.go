package sqltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
)

// ClaimWaitsForAHeldRow checks that claim-next waits for the only
// matching run while another transaction holds its row (instead of
// answering that nothing is runnable), and answers UNAVAILABLE when the
// row stays held past limit. db is s's pool; lockRow locks a run's row
// (run_id) in the engine's SQL. It returns once the held row is released,
// for the caller to check what the wait left on the pool's sessions.
func ClaimWaitsForAHeldRow(t *testing.T, s runstate.Store, db *sqlx.DB, lockRow string, limit time.Duration) {
	t.Helper()
	ctx := context.Background()
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "held"})
	if err != nil {
		t.Fatal(err)
	}
	hold := func(d time.Duration) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, lockRow, run.RunID); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(d, func() { tx.Commit() })
	}
	claim := func() (runstate.Claim, error) {
		return s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w"}, TTL: time.Minute})
	}

	hold(300 * time.Millisecond) // a writer's moment: claim-next waits it out
	cl, err := claim()
	if err != nil || cl.Run.RunID != run.RunID {
		t.Fatalf("claim-next while a writer held the only run for 300ms: %+v %v", cl, err)
	}
	if err := s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cl.Lease.Token}); err != nil {
		t.Fatal(err)
	}

	hold(limit + 2*time.Second) // held too long: unavailable, never "nothing runnable"
	if _, err = claim(); !errors.Is(err, runstate.ErrUnavailable) {
		t.Fatalf("claim-next while the only run's row stayed held: %v, want UNAVAILABLE", err)
	}
	time.Sleep(2500 * time.Millisecond)
}
