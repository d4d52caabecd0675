package mysql

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

// Claim-next waits for a matching run whose row another transaction holds
// (instead of answering that nothing is runnable), for a bounded time.
func TestClaimNextWaitsForAHeldRowBoundedly(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "held"})
	if err != nil {
		t.Fatal(err)
	}
	hold := func(d time.Duration) {
		tx, err := s.runs.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT version FROM runstate_runs WHERE run_id = ? FOR UPDATE", run.RunID); err != nil {
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

	hold(sqlkit.ClaimWaitLimit + 2*time.Second) // held too long: unavailable, never "nothing runnable"
	_, err = claim()
	if !errors.Is(err, runstate.ErrUnavailable) {
		t.Fatalf("claim-next while the only run's row stayed held: %v, want UNAVAILABLE", err)
	}
	time.Sleep(2500 * time.Millisecond)
	// The session's lock wait is back to the server's default afterwards.
	var wait int
	if err := s.runs.DB().GetContext(ctx, &wait, "SELECT @@GLOBAL.innodb_lock_wait_timeout"); err != nil {
		t.Fatal(err)
	}
	conn, err := s.runs.DB().Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var session int
	if err := conn.GetContext(ctx, &session, "SELECT @@SESSION.innodb_lock_wait_timeout"); err != nil || session != wait {
		t.Errorf("a pooled connection's lock wait: %d, the server's %d (%v)", session, wait, err)
	}
}
