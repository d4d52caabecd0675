package postgres_test

import (
	"context"
	"testing"

	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// A batch of 100 is one transaction of a few statements, whatever its
// size: a read that locks the rows, one statement per table written, and
// the NOTIFY of runs that became claimable.
func TestBatchIsOneTransaction(t *testing.T) {
	srv := sqltest.Postgres.Find(t)
	var counter benchutil.Counter
	s, err := postgres.OpenCounting(context.Background(), postgres.Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true,
		NotifyRunnable: true, Logger: quiet}, &counter)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The most statements each batch may send: CreateRuns reads the time
	// (outside the transaction) and which ids exist, then inserts runs,
	// labels and events, and notifies;
	// ClaimRuns locks its candidates, inserts events, updates the rows;
	// UpdateRuns locks, inserts events, updates, and notifies.
	most := map[string]int64{"CreateRuns": 6, "ClaimRuns": 3, "UpdateRuns": 4}
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

func openBatchStore(t *testing.T) *postgres.Store {
	srv := sqltest.Postgres.Find(t)
	s, err := postgres.Open(context.Background(), postgres.Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
