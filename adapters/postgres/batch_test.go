package postgres_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// A batch of 100 is one write statement, whatever its size, committed
// alone (no BEGIN, no COMMIT): runs, labels, events and the notice in
// one; the rows and events of claims or updates in one, after one read
// of the rows, or none when the handle wrote them last.
func TestBatchIsOneStatement(t *testing.T) {
	var counter benchutil.Counter
	s := openBatchStore(t, &counter, true)
	// CreateRuns on a new handle reads the time, then inserts and
	// notifies in one statement; ClaimRuns reads its candidates and
	// writes; UpdateRuns writes the rows the claim wrote, without reading
	// them.
	benchutil.CheckBatchCosts(t, s, &counter, 100, map[string]benchutil.Cost{
		"CreateRuns": {Statements: 2}, "ClaimRuns": {Statements: 2}, "UpdateRuns": {Statements: 1}})
}

// Of two batches racing to create one run_id, one is created whole, and
// the other refused whole, naming the item that collided: found by its
// check, or by that check run again when the other committed in between.
func TestRacingBatchCreatesNameTheCollidingItem(t *testing.T) {
	benchutil.RacingCreates(t, openBatchStore(t, new(benchutil.Counter), true), 30)
}

// openBatchStore opens the adapter on a fresh schema, announcing runnable
// runs when notify is set, with its statements and commits counted on c.
func openBatchStore(tb testing.TB, c *benchutil.Counter, notify bool) benchutil.BatchStore {
	srv := sqltest.Postgres.Find(tb)
	s, err := postgres.OpenCounting(context.Background(), postgres.Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true,
		MaxOpenConns: 40, NotifyRunnable: notify, Logger: quiet}, c)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// The largest batch's labels are more values than one statement binds:
// they are split into several statements of one transaction.
func TestLargestBatchCreatesEveryLabel(t *testing.T) {
	benchutil.CreateLargestBatch(t, openBatchStore(t, new(benchutil.Counter), false))
}
