package mysql_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// benchDB opens the adapter on a fresh database for one benchmark run.
func benchDB(b *testing.B) (*mysql.Store, string) { return benchDBOver(b, 0, 64) }

// benchDBOver opens the adapter on a fresh database through a proxy adding
// roundTrip to every exchange with the server (none: directly), with up to
// conns connections.
func benchDBOver(b *testing.B, roundTrip time.Duration, conns int) (*mysql.Store, string) {
	b.Helper()
	srv := sqltest.MySQL.Find(b)
	ctx := context.Background()
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		b.Fatal(err)
	}
	dsn := srv.DSN(name)
	if roundTrip > 0 {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			b.Fatal(err)
		}
		proxy, err := benchutil.StartDelayProxy(cfg.Addr, roundTrip)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { proxy.Close() })
		direct, err := sqlx.Open("mysql", dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer direct.Close()
		cfg.Addr = proxy.Addr()
		dsn = cfg.FormatDSN()
		proxied, err := sqlx.Open("mysql", dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer proxied.Close()
		// Calibrated once per round trip, so that the adapter and its
		// baseline meet the same delay.
		if delay, ok := calibrated[roundTrip]; ok {
			proxy.SetDelay(delay)
		} else {
			proxy.Calibrate(roundTrip, pinger(b, proxied), pinger(b, direct))
			calibrated[roundTrip] = proxy.Delay()
		}
	}
	s, err := mysql.Open(ctx, mysql.Options{DSN: dsn, MaxOpenConns: conns, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(); srv.DropDatabase(ctx, name) })
	return s, name
}

// calibrated holds the proxy delay that gave each round trip.
var calibrated = map[time.Duration]time.Duration{}

// pinger times one trivial statement on db.
func pinger(b *testing.B, db *sqlx.DB) func() time.Duration {
	return func() time.Duration {
		start := time.Now()
		if _, err := db.Exec("SELECT 1"); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}

// reportPing reports the median time of a trivial statement: the round
// trip the workers see, proxy included.
func reportPing(b *testing.B, db *sqlx.DB) {
	b.Helper()
	lat := make([]time.Duration, 21)
	for i := range lat {
		lat[i] = pinger(b, db)()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "ping-µs")
}

// BenchmarkCASUpdate: a transition (CAS + audit row) per op, each goroutine
// on its own run, the adapter beside the hand-written transaction.
func BenchmarkCASUpdate(b *testing.B) {
	for _, par := range []int{1, 8, 32} {
		for _, impl := range []string{"adapter", "handwritten"} {
			b.Run(fmt.Sprintf("%s/conc=%d", impl, par), func(b *testing.B) {
				s, _ := benchDB(b)
				casUpdates(b, s, par, impl)
			})
		}
	}
}

// BenchmarkCASUpdateOverNetwork is BenchmarkCASUpdate with the server a
// network away: a proxy in this process adds 0.5 ms or 2 ms to every
// round trip.
func BenchmarkCASUpdateOverNetwork(b *testing.B) {
	for _, rtt := range []time.Duration{500 * time.Microsecond, 2 * time.Millisecond} {
		for _, par := range []int{1, 8, 32} {
			for _, impl := range []string{"adapter", "handwritten"} {
				b.Run(fmt.Sprintf("rtt=%v/%s/conc=%d", rtt, impl, par), func(b *testing.B) {
					s, _ := benchDBOver(b, rtt, 64)
					casUpdates(b, s, par, impl)
					reportPing(b, s.DB())
				})
			}
		}
	}
}

func casUpdates(b *testing.B, s *mysql.Store, par int, impl string) {
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
	done := measureServer(b, s.DB())
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
	done()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}

// claimWithoutSkipLocked is the baseline claim: the same query and update,
// but FOR UPDATE waits for the row another claimer locked.
func claimWithoutSkipLocked(ctx context.Context, db *sqlx.DB, worker string) (string, error) {
	tx, err := db.BeginTxx(ctx, nil) // the pool's sessions are READ COMMITTED, as for the adapter
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
	if _, err := tx.ExecContext(ctx, `UPDATE runstate_runs SET queue = 2, lease_token = lease_token + 1, lease_worker = ?,
		lease_acquired_at = UTC_TIMESTAMP(6), lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, lease_released = FALSE
		WHERE run_id = ?`, worker, id); err != nil {
		return "", err
	}
	return id, tx.Commit()
}

// BenchmarkClaimNext: claims per second with 1, 4 and 16 workers, the
// adapter (SKIP LOCKED) beside the FOR UPDATE baseline. Every claimed run
// is recorded; a run claimed twice fails the benchmark.
func BenchmarkClaimNext(b *testing.B) {
	for _, workers := range []int{1, 4, 8, 16} {
		for _, impl := range []string{"skiplocked", "forupdate"} {
			b.Run(fmt.Sprintf("%s/workers=%d", impl, workers), func(b *testing.B) {
				s, _ := benchDB(b)
				claims(b, s, workers, impl)
			})
		}
	}
}

// BenchmarkClaimNextOverNetwork is BenchmarkClaimNext with the server a
// network away (0.5 ms or 2 ms added to each round trip), where a claimer
// waiting for the head of the queue waits for its holder's round trips.
func BenchmarkClaimNextOverNetwork(b *testing.B) {
	for _, rtt := range []time.Duration{500 * time.Microsecond, 2 * time.Millisecond} {
		for _, workers := range []int{16, 64} {
			for _, impl := range []string{"skiplocked", "forupdate"} {
				b.Run(fmt.Sprintf("rtt=%v/%s/workers=%d", rtt, impl, workers), func(b *testing.B) {
					s, _ := benchDBOver(b, rtt, workers+8)
					claims(b, s, workers, impl)
					reportPing(b, s.DB())
				})
			}
		}
	}
}

func claims(b *testing.B, s *mysql.Store, workers int, impl string) {
	ctx := context.Background()
	benchutil.FillQueue(b, s, b.N+workers)
	done := measureServer(b, s.DB())
	benchutil.Claims(b, workers, func(w int) (string, error) {
		owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
		if impl == "skiplocked" {
			cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
			return cl.Run.RunID, err
		}
		return claimWithoutSkipLocked(ctx, s.DB(), owner.Worker)
	})
	done()
}

// BenchmarkBatchUpdate: runs/s of transitions made one UpdateRun each
// (size=1) beside UpdateRuns of 10 and 100, with commits and statements
// per run. An op is one run's transition.
func BenchmarkBatchUpdate(b *testing.B) {
	benchutil.RunBatchSizes(b, openBatchStore, benchutil.BatchUpdates)
}

// BenchmarkBatchClaim: runs/s claimed one ClaimNextRun each (size=1)
// beside ClaimRuns of 10 and 100, with commits and statements per run.
// An op is one run's claim.
func BenchmarkBatchClaim(b *testing.B) {
	benchutil.RunBatchSizes(b, openBatchStore, benchutil.BatchClaims)
}

// BenchmarkParkedRuns: claim-next and a runnable page with none and with
// 10,000 runs parked for signals and timers (benchutil.BenchParked): the
// parked index (migration 3) keeps them out of both.
func BenchmarkParkedRuns(b *testing.B) {
	benchutil.BenchParked(b, func(b *testing.B) runstate.Store { s, _ := benchDB(b); return s }, 10000)
}
