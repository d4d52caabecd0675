package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlkit"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
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
			st, err := s.runs.ClaimCandidates(q, skipLocked)
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
	// The statement reads its candidates' keys in a derived table, then
	// their rows by primary key (readByKey). The derived table has one
	// EXPLAIN row per part of the UNION: the queue head, then the expired
	// leases and the earlier incarnation's, merged from their two indexes,
	// then the due parked runs (and the union's own row).
	wantKey := []string{"claim_order", "lease_expiry,by_lease_owner", "parked"}
	part, byKey := 0, false
	for rows.Next() {
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
		t.Logf("skip_locked=%v: select_type=%s table=%s type=%s key=%s rows=%s extra=%s", skipLocked, text("select_type"), text("table"), text("type"), text("key"), text("rows"), text("Extra"))
		switch text("select_type") {
		case "PRIMARY":
			if text("table") == "r" {
				byKey = text("type") == "eq_ref" && text("key") == "PRIMARY"
			}
			continue
		case "DERIVED", "UNION":
		default:
			continue // the UNION RESULT row
		}
		if part >= len(wantKey) {
			t.Errorf("skip_locked=%v: a part more than the %d expected: %v", skipLocked, len(wantKey), row)
			continue
		}
		if text("type") == "ALL" || text("key") != wantKey[part] {
			t.Errorf("skip_locked=%v part %d: type=%s key=%s, want a range on %s", skipLocked, part+1, text("type"), text("key"), wantKey[part])
		}
		// The head of the queue, the hot path, is read in index order.
		if part == 0 && strings.Contains(text("Extra"), "filesort") {
			t.Errorf("skip_locked=%v: the queue head sorts: %s", skipLocked, text("Extra"))
		}
		part++
	}
	if part != len(wantKey) || !byKey {
		t.Errorf("skip_locked=%v: %d parts (want %d), rows read by primary key: %v", skipLocked, part, len(wantKey), byKey)
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
// optimizer's statistics would have it scan and sort the table: the page's
// keys from the index, then each row by its key (readByKey), the page
// read three times over (index, derived table, primary key), not the
// table's 3,200 runs.
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
		if walked := rowsWalked(t, s, st); walked > 3*101+10 {
			t.Errorf("%s: a page of 101 runs walked %d index entries of 3,200 runs", tc.name, walked)
		}
	}
}

// No read of claim candidates or listings makes the server keep a snapshot
// in a temporary table on disk (readByKey), whichever way the optimizer
// joins a label filter: here a label so rare that it reads the labels
// first and sorts what it joins. One connection, so that its session's
// counters are the store's.
func TestLabelFilteredReadsKeepSnapshotsOffDisk(t *testing.T) {
	ctx := context.Background()
	clock := conformance.NewManualClock(time.Now().UTC())
	s := openInternalWith(t, Options{MaxOpenConns: 1, Clock: clock})
	for i := range 400 {
		if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "plain", Priority: i % 5, Labels: map[string]string{"pool": "common"}}); err != nil {
			t.Fatal(err)
		}
	}
	rare := map[string]string{"pool": "rare"}
	owner := runstate.Owner{Worker: "w", Incarnation: "1"}
	var rareRuns []runstate.RunSnapshot
	for i := range 6 {
		r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "rare", Priority: i % 2, Labels: rare})
		if err != nil {
			t.Fatal(err)
		}
		rareRuns = append(rareRuns, r)
	}
	// Every queue holds rare runs: two leased (their leases lapse below),
	// two parked (their time comes below), two queued.
	for range 2 {
		if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Minute, Filter: runstate.RunnableFilter{Labels: rare}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rareRuns[4:] {
		wake := clock.Now().Add(time.Minute)
		if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, WakeAt: &wake}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	if _, err := s.runs.DB().ExecContext(ctx, "ANALYZE TABLE runstate_runs, runstate_labels"); err != nil {
		t.Fatal(err)
	}
	onDisk := func() int {
		t.Helper()
		var n int
		if err := s.runs.DB().GetContext(ctx, &n, `SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'CREATED_TMP_DISK_TABLES'`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The counter counts: a read of whole rows in claim order, filtered
	// by the rare label, keeps them on disk.
	before := onDisk()
	var control []string
	if err := s.runs.DB().SelectContext(ctx, &control, `SELECT r.snapshot FROM runstate_runs r WHERE r.queue = 1
		AND EXISTS (SELECT 1 FROM runstate_labels l WHERE l.run_id = r.run_id AND l.label_key = 'pool' AND l.label_value = 'rare')
		ORDER BY r.priority DESC, r.created_at, r.run_id LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	if onDisk() == before {
		t.Fatal("a sorted read of whole rows joined to a rare label used no temporary table on disk: the test no longer shows what it checks")
	}

	before = onDisk()
	filter := runstate.RunnableFilter{Labels: rare}
	page, err := s.ListRuns(ctx, runstate.ListRunsParams{Labels: rare})
	if err != nil || len(page.Runs) != len(rareRuns) {
		t.Fatalf("listing by the rare label: %d runs, want %d (%v)", len(page.Runs), len(rareRuns), err)
	}
	runnable, err := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: filter})
	if err != nil || len(runnable.Runs) != len(rareRuns) {
		t.Fatalf("runnable by the rare label: %d runs, want %d (%v)", len(runnable.Runs), len(rareRuns), err)
	}
	// Claims of one run each: a batch write of several rows is a
	// multi-table UPDATE, which MariaDB stages in a temporary table of its
	// own (docs/mysql.md); this test is about reads.
	for range 3 {
		claimed, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Filter: filter, Max: 1})
		if err != nil || len(claimed.Claims) != 1 {
			t.Fatalf("a batch claim by the rare label: %d claims, want 1 (%v)", len(claimed.Claims), err)
		}
		if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Minute, Filter: filter}); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is left: each claim reads again the locking way before it
	// says so.
	if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Minute, Filter: filter}); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatalf("a claim with every rare run claimed: %v, want ErrNotFound", err)
	}
	if claimed, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Filter: filter, Max: 4}); err != nil || len(claimed.Claims) != 0 {
		t.Fatalf("a batch claim with every rare run claimed: %d claims (%v), want none", len(claimed.Claims), err)
	}
	if n := onDisk() - before; n != 0 {
		t.Errorf("listings and claims by a rare label kept %d temporary tables on disk, want none", n)
	}
}
