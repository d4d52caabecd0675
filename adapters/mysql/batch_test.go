package mysql_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// A batch of 100 is one transaction: one read that locks the rows, one
// statement per table inserted into, and the rows updated one by one
// within it.
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
	// exist, then inserts runs, labels and events; ClaimRuns locks its candidates, inserts events, then sets
	// each run's lease and snapshot; UpdateRuns locks, inserts events and
	// updates each run.
	most := map[string]int64{"CreateRuns": 5, "ClaimRuns": 2 + 2*100, "UpdateRuns": 2 + 100}
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
