package mysql

import (
	"context"
	"fmt"
	"github.com/runstate/runstate/spec/driver"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate/spec"
)

func TestClaimQueriesUseTheIndexWithoutSorting(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	// Enough rows of every kind that the optimizer's choice is the real one.
	for i := range 3000 {
		r, err := s.CreateRun(ctx, spec.CreateRunParams{WorkflowName: "explain", Priority: i % 7})
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 1:
			if _, err := s.ClaimRun(ctx, spec.ClaimRunParams{RunID: r.RunID, Owner: spec.Owner{Worker: "w"}, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := s.UpdateRun(ctx, spec.UpdateRunParams{RunID: r.RunID, ExpectedVersion: 1, Status: "canceled"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.data.db.ExecContext(ctx, "ANALYZE TABLE runstate_runs"); err != nil {
		t.Fatal(err)
	}
	q := driver.RunnableQuery{Statuses: []spec.RunStatus{spec.StatusQueued, spec.StatusWaiting}, Limit: 1, Claimant: &spec.Owner{Worker: "w2", Incarnation: "1"}}
	// Both passes of claim-next, the skipping one and the reading one, use
	// the same plan.
	for _, skipLocked := range []bool{true, false} {
		lock := forClaimReading
		if skipLocked {
			lock = forClaimSkipping
		}
		st, err := s.data.claimCandidates(q, lock)
		if err != nil {
			t.Fatal(err)
		}
		explainClaim(t, s, st, skipLocked)
	}
}

func explainClaim(t *testing.T, s *Store, st statement, skipLocked bool) {
	t.Helper()
	rows, err := s.data.db.QueryxContext(context.Background(), "EXPLAIN "+st.query, st.args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// One EXPLAIN row per part of the UNION: the queue head, the expired
	// leases, the earlier incarnation's leases (then the union's own row).
	wantKey := []string{"claim_order", "lease_expiry", "by_lease_owner"}
	for part := 0; rows.Next(); part++ {
		row := map[string]any{}
		if err := rows.MapScan(row); err != nil {
			t.Fatal(err)
		}
		text := func(k string) string {
			if row[k] == nil {
				return ""
			}
			return fmt.Sprintf("%s", row[k])
		}
		t.Logf("skip_locked=%v part %d: select_type=%s table=%s type=%s key=%s rows=%s extra=%s", skipLocked, part+1, text("select_type"), text("table"), text("type"), text("key"), text("rows"), text("Extra"))
		if part >= len(wantKey) {
			continue // the UNION RESULT row
		}
		if text("type") == "ALL" || text("key") != wantKey[part] {
			t.Errorf("skip_locked=%v part %d: type=%s key=%s, want a range on %s", skipLocked, part+1, text("type"), text("key"), wantKey[part])
		}
		// The head of the queue, the hot path, is read in index order.
		if part == 0 && strings.Contains(text("Extra"), "filesort") {
			t.Errorf("skip_locked=%v: the queue head sorts: %s", skipLocked, text("Extra"))
		}
	}
}
