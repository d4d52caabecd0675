package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqlkit"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// openInternal opens a store on a fresh schema, dropped after the test.
func openInternal(t testing.TB) *Store {
	t.Helper()
	srv := sqltest.Postgres.Find(t)
	s, err := Open(context.Background(), Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The queue numbers the statements and partial indexes spell out are the
// ones writes store.
func TestQueueNumbersAgree(t *testing.T) {
	if fmt.Sprint(int(driver.QueueUnleased)) != inQueueUnleased || fmt.Sprint(int(driver.QueueLeased)) != inQueueLeased {
		t.Fatalf("queue %d/%d written, %s/%s searched", driver.QueueUnleased, driver.QueueLeased, inQueueUnleased, inQueueLeased)
	}
	var schema []byte
	for _, name := range []string{"migrations/001_init.sql", "migrations/002_claim_by_status.sql"} {
		b, err := migrations.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		schema = append(schema, b...)
	}
	for _, index := range []string{"claim_by_status ON runstate_runs (status, priority DESC, created_at, run_id) WHERE queue = " + inQueueUnleased,
		"lease_expiry ON runstate_runs (lease_expires_at) WHERE queue = " + inQueueLeased,
		"by_lease_owner ON runstate_runs (lease_worker, lease_incarnation) WHERE queue = " + inQueueLeased} {
		if !strings.Contains(string(schema), index) {
			t.Errorf("the schema has no partial index %s", index)
		}
	}
}

// The server's refusals map to the contract's codes, whatever the path
// that produced them: a refused password cannot be produced on a server
// that trusts local logins, so the mapping is checked here as well.
func TestErrorsMapToTheContract(t *testing.T) {
	for state, want := range map[string]error{
		stateInvalidPassword:      runstate.ErrPermissionDenied,
		stateInvalidAuthorization: runstate.ErrPermissionDenied,
		stateInsufficientPrivs:    runstate.ErrPermissionDenied,
		stateUniqueViolation:      runstate.ErrAlreadyExists,
		stateUnknownDatabase:      runstate.ErrInvalidArgument,
		stateDeadlock:             runstate.ErrUnavailable,
		stateAdminShutdown:        runstate.ErrUnavailable,
		"08006":                   runstate.ErrUnavailable,
		"XX000":                   runstate.ErrUnavailable,
	} {
		err := interpretError(fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "FATAL", Code: state, Message: "from the server"}))
		if !errors.Is(err, want) {
			t.Errorf("SQLSTATE %s: %v, want %v", state, err, want)
		}
	}
	for _, err := range []error{context.Canceled, context.DeadlineExceeded} {
		if got := interpretError(fmt.Errorf("query: %w", err)); !errors.Is(got, err) || runstate.CodeOf(got) != "" {
			t.Errorf("%v became %v: a context's error passes as it is", err, got)
		}
	}
}

// Transactions are READ COMMITTED whatever the database's or role's
// default: a locking read must see the latest committed row, never fail on
// it. Every session of the store says so itself.
func TestTransactionsAreReadCommitted(t *testing.T) {
	s := openInternal(t)
	tx, err := s.runs.DB().Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var level, session string
	if err := tx.Get(&level, "SHOW transaction_isolation"); err != nil || level != "read committed" {
		t.Fatalf("a transaction's isolation %q (%v), want read committed", level, err)
	}
	if err := tx.Get(&session, "SELECT setting FROM pg_settings WHERE name = 'default_transaction_isolation' AND source = 'client'"); err != nil || session != "read committed" {
		t.Fatalf("the session's default %q (%v), want read committed set by the store", session, err)
	}
}

// Claim-next waits for a matching run whose row another transaction holds
// (instead of answering that nothing is runnable), for a bounded time.
func TestClaimNextWaitsForAHeldRowBoundedly(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	sqltest.ClaimWaitsForAHeldRow(t, s, s.runs.DB(), "SELECT version FROM runstate_runs WHERE run_id = $1 FOR UPDATE", sqlkit.ClaimWaitLimit)
	// The bound was the transaction's own: pooled sessions wait as configured.
	var wait string
	if err := s.runs.DB().GetContext(ctx, &wait, "SHOW lock_timeout"); err != nil || wait != "0" {
		t.Errorf("a pooled session's lock_timeout: %q (%v), want the server's 0", wait, err)
	}
}

// plan is a node of EXPLAIN (FORMAT JSON).
type plan struct {
	NodeType     string `json:"Node Type"`
	IndexName    string `json:"Index Name"`
	RelationName string `json:"Relation Name"`
	CTEName      string `json:"CTE Name"`
	SubplanName  string `json:"Subplan Name"`
	ActualRows   int    `json:"Actual Rows"`
	Plans        []plan `json:"Plans"`
}

// walk calls visit with every node under p, and the part of the
// statement it belongs to: a CTE that locks is a subplan of its own, one
// that does not is inlined as a branch of the UNION ALL (an Append).
func (p plan) walk(part string, visit func(part string, n plan)) {
	if strings.HasPrefix(p.SubplanName, "CTE ") {
		part = strings.TrimPrefix(p.SubplanName, "CTE ")
	}
	visit(part, p)
	for i, c := range p.Plans {
		if part == "" && p.NodeType == "Append" && c.NodeType == "Subquery Scan" {
			c.walk(fmt.Sprintf("part%d", i), visit)
			continue
		}
		c.walk(part, visit)
	}
}

// explain returns the plan of st, as executed (ANALYZE): each node with
// the rows it produced.
func explain(t *testing.T, s *Store, st sqlkit.Statement) plan {
	t.Helper()
	var out string
	if err := s.runs.DB().Get(&out, "EXPLAIN (ANALYZE, FORMAT JSON) "+st.Query, st.Args...); err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, st.Query)
	}
	var plans []struct{ Plan plan }
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output: %v\n%s", err, out)
	}
	return plans[0].Plan
}

// Claim-next reads the head of the queue from the claim_by_status index
// in order, a part per status, never sorting it, and the leased runs it
// may take from their own indexes; nothing scans the table. So it is
// before the server has statistics of the table (a new deployment's first
// burst, a benchmark's fresh database), and after.
func TestClaimQueriesUseTheIndexWithoutSorting(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	// Enough rows of every kind that the planner's choice is the real one:
	// most finished, some leased by claim-next, some queued.
	if _, err := s.runs.DB().ExecContext(ctx, `INSERT INTO runstate_runs (run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue)
		SELECT 'done-' || i, 'explain', 'succeeded', i % 7, now() - i * interval '1 ms', 1, 1, '{}', 0 FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "explain", Priority: i % 7}); err != nil {
			t.Fatal(err)
		}
	}
	for range 300 {
		if _, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for _, analysed := range []bool{false, true} {
		if analysed {
			if _, err := s.runs.DB().ExecContext(ctx, "ANALYZE runstate_runs"); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(fmt.Sprintf("analysed=%v", analysed), func(t *testing.T) { checkClaimPlans(t, s, analysed) })
	}
}

// checkClaimPlans checks the plans of claim-next's statements, for two
// statuses: part0 and part1 read the queue head, part2 the leased runs,
// part3 the parked runs that are due (sorted: they are the few whose time
// came since the last claims).
// The leased runs' part reads its own indexes before the table is
// analysed too: it never combines them with by_status, which holds every
// run, and every version of one not yet vacuumed.
func checkClaimPlans(t *testing.T, s *Store, analysed bool) {
	q := driver.RunnableQuery{Statuses: []runstate.RunStatus{runstate.StatusQueued, runstate.StatusWaiting}, Limit: 1, Claimant: &runstate.Owner{Worker: "w", Incarnation: "1"}}
	for _, skipLocked := range []bool{true, false} {
		st, err := s.runs.ClaimCandidates(q, skipLocked)
		if err != nil {
			t.Fatal(err)
		}
		p := explain(t, s, st)
		indexes := map[string]map[string]bool{}
		p.walk("", func(cte string, n plan) {
			if indexes[cte] == nil {
				indexes[cte] = map[string]bool{}
			}
			if n.IndexName != "" {
				indexes[cte][n.IndexName] = true
			}
			switch {
			case strings.Contains(n.NodeType, "Index Scan") && n.ActualRows > 10:
				// The claimant's worker holds 300 leases, none of an
				// earlier incarnation: no part may walk them.
				t.Errorf("%s: %s of %s read %d entries; a claim reads only its few candidates", cte, n.NodeType, n.IndexName, n.ActualRows)
			case n.NodeType == "Seq Scan":
				t.Errorf("%s: a sequential scan of %s", cte, n.RelationName)
			case n.NodeType == "Sort" && cte != "part2" && cte != "part3":
				t.Errorf("%s: the queue head is sorted, not read in index order", cte)
			}
		})
		for _, head := range []string{"part0", "part1"} {
			if !indexes[head]["runstate_runs_claim_by_status"] {
				t.Errorf("%s, a queue head, does not read claim_by_status: %v", head, indexes[head])
			}
		}
		if !indexes["part2"]["runstate_runs_lease_expiry"] || !indexes["part2"]["runstate_runs_by_lease_owner"] || indexes["part2"]["runstate_runs_by_status"] {
			t.Errorf("the leased runs are not read from their indexes: %v", indexes["part2"])
		}
		if !indexes["part3"]["runstate_runs_parked"] || len(indexes["part3"]) != 1 {
			t.Errorf("the parked runs that are due are not read from their index alone: %v", indexes["part3"])
		}
		if t.Failed() {
			out, _ := json.MarshalIndent(p, "", "  ")
			t.Fatalf("plan:\n%s", out)
		}
	}
}

// The lean write refuses a row whose change was decided on a database
// time later than the database's at the write (a known row's estimate,
// from a clock here running fast), as it refuses a row at another
// version; a time not later is written, and the row's new version and
// the statement's time come back.
func TestLeanWriteChecksAKnownRowsTime(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "clock"})
	if err != nil {
		t.Fatal(err)
	}
	var read struct {
		RowVersion int64     `db:"row_version"`
		Now        time.Time `db:"now"`
	}
	if err := s.runs.DB().GetContext(ctx, &read, `SELECT `+rowVersion+` AS row_version, statement_timestamp() AS now
		FROM runstate_runs r WHERE run_id = $1`, run.RunID); err != nil {
		t.Fatal(err)
	}
	write := func(notBefore time.Time) (written []struct {
		RunID      string    `db:"run_id"`
		RowVersion int64     `db:"row_version"`
		Now        time.Time `db:"now"`
	}) {
		t.Helper()
		none := []*time.Time{nil}
		err := s.runs.DB().SelectContext(ctx, &written, qWriteRuns, []string{run.RunID}, []string{run.WorkflowName},
			[]string{string(run.Status)}, []int32{0}, []int64{run.Version}, []int64{1}, []string{""}, []int16{1}, []int64{0},
			[]string{""}, []string{""}, none, none, []bool{false}, []int64{read.RowVersion}, []*time.Time{&notBefore},
			[]string{}, []int64{}, []string{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return written
	}
	if got := write(read.Now.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("a change decided an hour ahead of the database was written: %+v", got)
	}
	got := write(read.Now)
	if len(got) != 1 || got[0].RowVersion == read.RowVersion || got[0].Now.Before(read.Now) {
		t.Fatalf("written %+v; want the row at a new version, at a time not before %v", got, read.Now)
	}
}

// Timers coming due at one instant are claimed as the queue would take
// them, by workers racing for them, without a failed claim.
func TestTimersDueTogetherAreClaimedInOrder(t *testing.T) {
	benchutil.DueTogether(t, openInternal(t), 200, 4)
}
