package mysql_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// A batch of 100 is one write statement, whatever its size, which is a
// call of a stored procedure that commits (no BEGIN, no COMMIT from the
// client): runs, labels and events in one; the rows and events of claims
// or updates in one, after one read of the rows, or none when the handle
// wrote them last.
func TestBatchIsOneStatement(t *testing.T) {
	var counter benchutil.Counter
	s := openBatchStore(t, &counter)
	// CreateRuns on a new handle reads the time, then inserts in one
	// call; ClaimRuns reads its candidates and writes; UpdateRuns writes
	// the rows the claim wrote, without reading them.
	benchutil.CheckBatchCosts(t, s, &counter, 100, map[string]benchutil.Cost{
		"CreateRuns": {Statements: 2}, "ClaimRuns": {Statements: 2}, "UpdateRuns": {Statements: 1}})
}

// Of two batches racing to create one run_id, one is created whole, and
// the other refused whole, naming the item that collided: found by its
// check, or by that check run again when the other committed in between.
func TestRacingBatchCreatesNameTheCollidingItem(t *testing.T) {
	benchutil.RacingCreates(t, openBatchStore(t, new(benchutil.Counter)), 30)
}

// openBatchStore opens the adapter on a fresh database, with its
// statements and commits counted on c.
func openBatchStore(tb testing.TB, c *benchutil.Counter) benchutil.BatchStore {
	srv := sqltest.MySQL.Find(tb)
	ctx := context.Background()
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := mysql.OpenCounting(ctx, mysql.Options{DSN: srv.DSN(name), MaxOpenConns: 64, Logger: quiet}, c)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(); srv.DropDatabase(ctx, name) })
	return s
}

// The batch UPDATE joins rows by run_id compared byte for byte: runs whose
// ids differ only in case each get their own change.
func TestBatchUpdateTellsRunIDsApartByCase(t *testing.T) {
	s := openBatchStore(t, new(benchutil.Counter))
	ctx := context.Background()
	created, err := s.CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{
		{RunID: "case-a", WorkflowName: "lower"}, {RunID: "CASE-A", WorkflowName: "upper"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		{RunID: "case-a", ExpectedVersion: created.Runs[0].Version, Status: string(runstate.StatusRunning)},
		{RunID: "CASE-A", ExpectedVersion: created.Runs[1].Version, Status: string(runstate.StatusCanceled)}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []runstate.RunStatus{runstate.StatusRunning, runstate.StatusCanceled} {
		got, err := s.GetRun(ctx, created.Runs[i].RunID)
		if res.Items[i].Err != nil || err != nil || got.Status != want || got.WorkflowName != created.Runs[i].WorkflowName {
			t.Fatalf("run %s: %v, %v, %s of %s; want %s", created.Runs[i].RunID, res.Items[i].Err, err, got.Status, got.WorkflowName, want)
		}
	}
}

// The largest batch's labels are more values than one statement binds:
// they are split into several statements of one transaction.
func TestLargestBatchCreatesEveryLabel(t *testing.T) {
	benchutil.CreateLargestBatch(t, openBatchStore(t, new(benchutil.Counter)))
}
