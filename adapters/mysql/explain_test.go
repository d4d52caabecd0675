package mysql

import (
	"context"
	"errors"
	"fmt"
	"github.com/runstate/runstate/driver"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

func TestClaimQueriesUseTheIndexWithoutSorting(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	// Enough rows of every kind that the optimizer's choice is the real
	// one: a third canceled, a third leased by claim-next, a third queued.
	for i := range 3000 {
		r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "explain", Priority: i % 7})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: 1, Status: "canceled"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 1000 {
		if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	q := driver.RunnableQuery{Statuses: []runstate.RunStatus{runstate.StatusQueued, runstate.StatusWaiting}, Limit: 1, Claimant: &runstate.Owner{Worker: "w", Incarnation: "1"}}
	// The claimant's worker holds a thousand leases, none of an earlier
	// incarnation: the part that looks for those must not walk them all,
	// whether or not the table's statistics are fresh.
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.runs.DB().ExecContext(ctx, "ANALYZE TABLE runstate_runs"); err != nil {
				t.Fatal(err)
			}
		}
		// Both passes of claim-next, the skipping one and the reading one,
		// use the same plan.
		for _, skipLocked := range []bool{true, false} {
			lock := forClaimReading
			if skipLocked {
				lock = forClaimSkipping
			}
			st, err := s.runs.ClaimCandidates(q, lock)
			if err != nil {
				t.Fatal(err)
			}
			explainClaim(t, s, st, skipLocked)
			if walked := rowsWalked(t, s, st); walked > 10 {
				t.Errorf("analyzed=%v skip_locked=%v: one claim-next read walked %d index entries; it should read only its few candidates", analyzed, skipLocked, walked)
			}
		}
	}
}

func explainClaim(t *testing.T, s *Store, st sqlkit.Statement, skipLocked bool) {
	t.Helper()
	rows, err := s.runs.DB().QueryxContext(context.Background(), "EXPLAIN "+st.Query, st.Args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// One EXPLAIN row per part of the UNION: the queue head, then the
	// expired leases and the earlier incarnation's, merged from their two
	// indexes (then the union's own row).
	wantKey := []string{"claim_order", "lease_expiry,by_lease_owner"}
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

// rowsWalked runs st in a transaction on one connection and returns how
// many index entries the server read for it (EXPLAIN shows the plan the
// optimizer expects; this is the one it ran).
func rowsWalked(t *testing.T, s *Store, st sqlkit.Statement) int {
	t.Helper()
	ctx := context.Background()
	conn, err := s.runs.DB().Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "FLUSH STATUS"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, st.Query, st.Args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	err = errors.Join(rows.Err(), rows.Close())
	tx.Rollback()
	if err != nil {
		t.Fatal(err)
	}
	var walked int
	err = conn.GetContext(ctx, &walked, `SELECT SUM(VARIABLE_VALUE) FROM information_schema.SESSION_STATUS
		WHERE VARIABLE_NAME IN ('HANDLER_READ_KEY', 'HANDLER_READ_NEXT', 'HANDLER_READ_PREV', 'HANDLER_READ_RND_NEXT')`)
	if err != nil {
		t.Fatal(err)
	}
	return walked
}

// A page of ListRuns reads about a page of index entries, whatever the
// filter's index, also right after a burst of concurrent inserts, when the
// optimizer's statistics would have it scan and sort the table.
func TestListingReadsAPageNotTheTable(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 400 {
				if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: fmt.Sprintf("wf%d", w%2)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, tc := range []struct {
		name string
		q    driver.RunQuery
		st   runstate.RunStatus
	}{
		{"all runs", driver.RunQuery{Limit: 101}, ""},
		{"by status", driver.RunQuery{Limit: 101}, runstate.StatusQueued},
		{"by workflow", driver.RunQuery{Limit: 101, Filter: driver.RunFilter{WorkflowName: "wf1"}}, ""},
	} {
		st, err := s.runs.ListSQL(tc.q, tc.st)
		if err != nil {
			t.Fatal(err)
		}
		if walked := rowsWalked(t, s, st); walked > 2*101+10 {
			t.Errorf("%s: a page of 101 runs walked %d index entries of 3,200 runs", tc.name, walked)
		}
	}
}
