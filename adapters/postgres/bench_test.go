package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// benchStore opens the adapter on a fresh schema for one benchmark run.
func benchStore(b *testing.B) *postgres.Store { return benchStoreNotifying(b, false) }

// benchStoreNotifying is benchStore, announcing every write of a run
// when notifyRuns is set (Options.NotifyRuns).
func benchStoreNotifying(b *testing.B, notifyRuns bool) *postgres.Store {
	b.Helper()
	srv := sqltest.Postgres.Find(b)
	s, err := postgres.Open(context.Background(), postgres.Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true,
		MaxOpenConns: 40, NotifyRuns: notifyRuns, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkCASUpdate: a transition (CAS + audit row) per op, each goroutine
// on its own run, the adapter beside the hand-written transaction.
func BenchmarkCASUpdate(b *testing.B) {
	for _, par := range []int{1, 8, 32} {
		for _, impl := range []string{"adapter", "handwritten"} {
			b.Run(fmt.Sprintf("%s/conc=%d", impl, par), func(b *testing.B) {
				casUpdates(b, benchStore(b), par, impl)
			})
		}
	}
}

// BenchmarkCASUpdateNotifyingRuns: the adapter's transitions without
// and with Options.NotifyRuns, whose trigger sends a NOTIFY per write and
// whose commits take the notification queue's lock one at a time.
func BenchmarkCASUpdateNotifyingRuns(b *testing.B) {
	for _, par := range []int{1, 8, 32} {
		for _, notify := range []bool{false, true} {
			b.Run(fmt.Sprintf("notify_runs=%v/conc=%d", notify, par), func(b *testing.B) {
				casUpdates(b, benchStoreNotifying(b, notify), par, "adapter")
			})
		}
	}
}

func casUpdates(b *testing.B, s *postgres.Store, par int, impl string) {
	ctx := context.Background()
	runs := make([]runstate.RunSnapshot, par)
	for i := range runs {
		r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench",
			Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}}})
		if err != nil {
			b.Fatal(err)
		}
		runs[i] = r
	}
	benchutil.Concurrently(b, par, func(w int, next func() bool) {
		run := runs[w]
		for i := 0; next(); i++ {
			var err error
			if impl == "adapter" {
				run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(benchutil.FlipStatus(i))})
			} else {
				err = benchutil.HandWrittenUpdate(ctx, s.DB(), run.RunID, benchutil.FlipStatus(i))
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}

// claimWithoutSkipLocked is the baseline claim: the same head of the queue
// and update, but FOR UPDATE waits for the row another claimer locked.
func claimWithoutSkipLocked(ctx context.Context, db *sqlx.DB, worker string) (string, error) {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	var id string
	err = tx.GetContext(ctx, &id, `SELECT run_id FROM runstate_runs WHERE queue = 1 AND status IN ('queued', 'waiting')
		ORDER BY priority DESC, created_at, run_id LIMIT 1 FOR UPDATE`)
	if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE runstate_runs SET queue = 2, lease_token = lease_token + 1, lease_worker = $1,
		lease_acquired_at = statement_timestamp(), lease_expires_at = statement_timestamp() + interval '1 hour', lease_released = FALSE
		WHERE run_id = $2`, worker, id); err != nil {
		return "", err
	}
	return id, tx.Commit()
}

// BenchmarkClaimNext: claims per second with 1, 8 and 16 workers, the
// adapter (SKIP LOCKED) beside the FOR UPDATE baseline. Every claimed run
// is recorded; a run claimed twice fails the benchmark.
func BenchmarkClaimNext(b *testing.B) {
	for _, workers := range []int{1, 8, 16} {
		for _, impl := range []string{"skiplocked", "forupdate"} {
			b.Run(fmt.Sprintf("%s/workers=%d", impl, workers), func(b *testing.B) {
				s := benchStore(b)
				ctx := context.Background()
				benchutil.FillQueue(b, s, b.N+workers)
				benchutil.Claims(b, workers, func(w int) (string, error) {
					owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
					if impl == "skiplocked" {
						cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
						return cl.Run.RunID, err
					}
					return claimWithoutSkipLocked(ctx, s.DB(), owner.Worker)
				})
			})
		}
	}
}

// BenchmarkBatchUpdate: runs/s of transitions made one UpdateRun each
// (size=1) beside UpdateRuns of 10 and 100, with commits and statements
// per run. An op is one run's transition.
func BenchmarkBatchUpdate(b *testing.B) {
	benchutil.RunBatchSizes(b, batchBenchStore, benchutil.BatchUpdates)
}

// BenchmarkBatchClaim: runs/s claimed one ClaimNextRun each (size=1)
// beside ClaimRuns of 10 and 100, with commits and statements per run.
// An op is one run's claim.
func BenchmarkBatchClaim(b *testing.B) {
	benchutil.RunBatchSizes(b, batchBenchStore, benchutil.BatchClaims)
}

// batchBenchStore is a store for a batch benchmark: without announcing
// runnable runs, as Options' default, like the other benchmarks' stores.
func batchBenchStore(tb testing.TB, c *benchutil.Counter) benchutil.BatchStore {
	return openBatchStore(tb, c, false)
}

// BenchmarkParkedRuns: claim-next and a runnable page with none and with
// 10,000 runs parked for signals and timers (benchutil.BenchParked): the
// parked index (migration 4) keeps them out of both.
func BenchmarkParkedRuns(b *testing.B) {
	benchutil.BenchParked(b, func(b *testing.B) runstate.Store { return benchStore(b) }, 10000)
}
