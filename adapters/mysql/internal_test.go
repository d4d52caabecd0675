package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// openInternal opens a store on a fresh database, dropped after the test.
func openInternal(t testing.TB) *Store { return openInternalWith(t, Options{}) }

// openInternalWith is openInternal with opts, whose DSN and Logger it sets.
func openInternalWith(t testing.TB, opts Options) *Store {
	t.Helper()
	ctx := context.Background()
	srv := sqltest.MySQL.Find(t)
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts.DSN, opts.Logger = srv.DSN(name), slog.New(slog.DiscardHandler)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); srv.DropDatabase(ctx, name) })
	return s
}

// The queue numbers the statements spell out are the ones writes store.
func TestQueueNumbersAgree(t *testing.T) {
	if fmt.Sprint(int(driver.QueueUnleased)) != inQueueUnleased || fmt.Sprint(int(driver.QueueLeased)) != inQueueLeased {
		t.Fatalf("queue %d/%d written, %s/%s searched", driver.QueueUnleased, driver.QueueLeased, inQueueUnleased, inQueueLeased)
	}
}

// The plain lease read answers as the locking one would.
func TestGetLeaseReadsWithoutALock(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLease(ctx, "r1"); err != nil || l.Token != 0 {
		t.Fatalf("a run never leased: %+v, %v", l, err)
	}
	claim, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: "r1", Owner: runstate.Owner{Worker: "w1", Incarnation: "a"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLease(ctx, "r1"); err != nil || l != claim.Lease {
		t.Fatalf("after a claim: %+v, %v; want %+v", l, err, claim.Lease)
	}
	if _, err := s.GetLease(ctx, "nope"); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatalf("an unknown run: %v", err)
	}
}

// Transactions are READ COMMITTED without a statement of their own: every
// connection of the pool is set so when it opens.
func TestTransactionsAreReadCommitted(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	err := s.runs.InTx(ctx, func(tx *sqlx.Tx) error {
		var level string
		err := tx.GetContext(ctx, &level, "SELECT @@tx_isolation")
		if err != nil { // MySQL 8 names it transaction_isolation only
			err = tx.GetContext(ctx, &level, "SELECT @@transaction_isolation")
		}
		if err == nil && level != "READ-COMMITTED" {
			t.Errorf("a transaction's isolation is %s, want READ-COMMITTED", level)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A batch's UPDATE reads the runs table by primary key, one row per row of
// the batch, never by a scan: InnoDB locks the rows an UPDATE examines, so
// a scan would wait on the rows other batches hold.
func TestBatchUpdateReadsRunsByKey(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	for i := range 32 {
		if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: fmt.Sprintf("run-%02d", i), WorkflowName: "explain"}); err != nil {
			t.Fatal(err)
		}
	}
	// A batch of most of the table: a scan then looks as cheap as lookups.
	b := bulkUpdateRuns
	query := "EXPLAIN " + b.Head
	var args []any
	for i := range 30 {
		if i > 0 {
			query += b.Sep
		}
		query += b.Row
		args = append(args, fmt.Sprintf("run-%02d", i), "explain", "running", 0, 2, 2, "{}", 1, 0, "", "", nil, nil, 0, 1, 0)
	}
	query += b.Tail
	rows, err := s.runs.DB().QueryxContext(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		row := map[string]any{}
		if err := rows.MapScan(row); err != nil {
			t.Fatal(err)
		}
		table, access := fmt.Sprintf("%s", row["table"]), fmt.Sprintf("%s", row["type"])
		if table == "r" && (access != "eq_ref" || fmt.Sprintf("%s", row["key"]) != "PRIMARY") {
			t.Errorf("the batch UPDATE reads runstate_runs with %s on key %s, want eq_ref on PRIMARY", access, row["key"])
		}
	}
}

// Writers each moving their own run, twice as many as the pool has
// connections, share writes (group commit, several in flight): shared
// writes of disjoint runs never fail.
func TestConcurrentWritersOfTheirOwnRunsNeverDeadlock(t *testing.T) {
	ctx := context.Background()
	s := openInternalWith(t, Options{MaxOpenConns: 16})
	const writers, writes = 32, 100
	runs := make([]runstate.RunSnapshot, writers)
	for i := range runs {
		var err error
		if runs[i], err = s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "deadlock",
			Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			run := runs[w]
			for i := range writes {
				to := runstate.StatusRunning
				if i%2 == 1 {
					to = runstate.StatusWaiting
				}
				var err error
				if run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(to)}); err != nil {
					errs[w] = fmt.Errorf("writer %d, write %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Timers coming due at one instant are claimed as the queue would take
// them, by workers racing for them, without a failed claim.
func TestTimersDueTogetherAreClaimedInOrder(t *testing.T) {
	benchutil.DueTogether(t, openInternal(t), 200, 4)
}
