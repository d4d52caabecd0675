package mysql

import (
	"context"
	"testing"

	"github.com/runstate/runstate/adapters/internal/sqlkit"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// Claim-next waits for a matching run whose row another transaction holds
// (instead of answering that nothing is runnable), for a bounded time.
func TestClaimNextWaitsForAHeldRowBoundedly(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	sqltest.ClaimWaitsForAHeldRow(t, s, s.runs.DB(), "SELECT version FROM runstate_runs WHERE run_id = ? FOR UPDATE", sqlkit.ClaimWaitLimit)
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
