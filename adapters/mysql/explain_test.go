package mysql

import (
	"context"
	"fmt"
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
	if _, err := s.db.ExecContext(ctx, "ANALYZE TABLE runstate_runs"); err != nil {
		t.Fatal(err)
	}
	q, err := spec.PrepareClaimNext(spec.ClaimNextParams{Owner: spec.Owner{Worker: "w2", Incarnation: "1"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stmts, err := s.claimCandidates(q, spec.Owner{Worker: "w2", Incarnation: "1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stmts {
		rows, err := s.db.QueryxContext(ctx, "EXPLAIN "+st.query, st.args...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			row := map[string]any{}
			if err := rows.MapScan(row); err != nil {
				t.Fatal(err)
			}
			text := func(k string) string { return fmt.Sprintf("%s", row[k]) }
			t.Logf("EXPLAIN %s\n  -> type=%s key=%s rows=%s extra=%s", strings.Join(strings.Fields(st.query), " "), text("type"), text("key"), text("rows"), text("Extra"))
			if text("type") == "ALL" || strings.Contains(text("Extra"), "filesort") || text("key") != "claim_order" {
				t.Errorf("claim query does not walk claim_order without sorting: type=%s key=%s extra=%s", text("type"), text("key"), text("Extra"))
			}
		}
		rows.Close()
	}
}
