package mysql_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// A batch of 100 is one transaction of a few statements, whatever its
// size: a read that locks the rows, and one statement per table written.
func TestBatchIsOneTransaction(t *testing.T) {
	srv := sqltest.MySQL.Find(t)
	ctx := context.Background()
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.DropDatabase(ctx, name)
	var counter benchutil.Counter
	s, err := mysql.OpenCounting(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet}, &counter)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// CreateRuns reads the time (outside the transaction) and which ids
	// exist, then inserts runs, labels and events; ClaimRuns and
	// UpdateRuns lock their rows, insert events and update the rows.
	most := map[string]int64{"CreateRuns": 5, "ClaimRuns": 3, "UpdateRuns": 3}
	for name, cost := range benchutil.BatchCosts(t, s, &counter, 100) {
		t.Logf("%s of 100: %v", name, cost)
		if cost.Commits != 1 || cost.Statements > most[name] {
			t.Errorf("%s of 100 sent %v; want 1 commit and at most %d statements", name, cost, most[name])
		}
	}
}

// Of two batches racing to create one run_id, one is created whole, and
// the other refused whole, naming the item that collided: found by its
// check, or by that check run again when the other committed in between.
func TestRacingBatchCreatesNameTheCollidingItem(t *testing.T) {
	benchutil.RacingCreates(t, openBatchStore(t), 30)
}

func openBatchStore(t *testing.T) *mysql.Store {
	srv := sqltest.MySQL.Find(t)
	ctx := context.Background()
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mysql.Open(ctx, mysql.Options{DSN: srv.DSN(name), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); srv.DropDatabase(ctx, name) })
	return s
}

// The batch UPDATE joins rows by run_id compared byte for byte: runs whose
// ids differ only in case each get their own change.
func TestBatchUpdateTellsRunIDsApartByCase(t *testing.T) {
	s := openBatchStore(t)
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
