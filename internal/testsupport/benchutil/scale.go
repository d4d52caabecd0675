package benchutil

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/runstate/runstate"
)

// BulkLoader stores runs as a store's Insert would, many per transaction:
// a million runs through the one-transaction-per-run API would take longer
// than the measurements they are for. Each run comes with its created
// event (seq 1).
type BulkLoader func(ctx context.Context, runs []runstate.RunSnapshot) error

// ScaleOpener opens a fresh store under the scale benchmarks and its bulk
// loader.
type ScaleOpener func(b *testing.B) (runstate.Store, BulkLoader)

// ScaleRuns is how many finished runs the scale benchmarks put around the
// live ones: 1,000,000, or $RUNSTATE_SCALE_RUNS for a quicker try.
func ScaleRuns(b *testing.B) int {
	if v := os.Getenv("RUNSTATE_SCALE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10000 {
			b.Fatalf("RUNSTATE_SCALE_RUNS=%q: want a count of at least 10000", v)
		}
		return n
	}
	return 1_000_000
}

// liveRuns is how many non-terminal runs recovery settles.
const liveRuns = 10_000

// bulkRuns makes n runs of status, created a microsecond apart from start.
func bulkRuns(n int, status runstate.RunStatus, start time.Time) []runstate.RunSnapshot {
	runs := make([]runstate.RunSnapshot, n)
	for i := range runs {
		at := start.Add(time.Duration(i) * time.Microsecond)
		runs[i] = runstate.RunSnapshot{RunID: ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String(), WorkflowName: "bench",
			Status: status, Priority: i % 10, CreatedAt: at, UpdatedAt: at, Version: 1,
			Steps: []runstate.Step{{Name: "build", Status: runstate.StepQueued}}}
		if status.Terminal() {
			runs[i].Steps[0].Status = runstate.StepSuccess
		}
	}
	return runs
}

// load stores n runs of status in chunks, created from start on.
func load(b *testing.B, bulk BulkLoader, n int, status runstate.RunStatus, start time.Time) {
	b.Helper()
	const chunk = 10_000
	for done := 0; done < n; done += chunk {
		runs := bulkRuns(min(chunk, n-done), status, start.Add(time.Duration(done)*time.Microsecond))
		if err := bulk(context.Background(), runs); err != nil {
			b.Fatalf("bulk load of %s runs: %v", status, err)
		}
	}
}

// Scale measures what must not grow with the finished runs a store holds:
// claim-next, a page of ListRuns deep into the store, and recovery of
// 10,000 live runs, each in a store of ScaleRuns finished runs beside an
// empty one. The benchmark names carry the number of finished runs, so
// each pair compares side by side.
func Scale(b *testing.B, open ScaleOpener) {
	ctx := context.Background()
	finished := ScaleRuns(b)
	empty, emptyBulk := open(b)
	big, bigBulk := open(b)
	// Finished runs were created an hour ago, before every live run.
	load(b, bigBulk, finished, runstate.StatusSuccess, time.Now().Add(-time.Hour))
	stores := []struct {
		finished int
		store    runstate.Store
		bulk     BulkLoader
	}{{0, empty, emptyBulk}, {finished, big, bigBulk}}

	for _, s := range stores {
		b.Run(fmt.Sprintf("claim-next/finished=%d", s.finished), func(b *testing.B) {
			load(b, s.bulk, b.N, runstate.StatusQueued, time.Now())
			owner := runstate.Owner{Worker: "bench", Incarnation: "1"}
			claims := make([]runstate.Claim, 0, b.N)
			b.ResetTimer()
			for range b.N {
				c, err := s.store.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				claims = append(claims, c)
			}
			// The claimed runs finish, as a worker's would, so that what
			// follows sees finished runs only.
			b.StopTimer()
			for _, c := range claims {
				if _, err := s.store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: c.Run.RunID, ExpectedVersion: c.Run.Version,
					Status: string(runstate.StatusCanceled), LeaseToken: c.Lease.Token}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	// Page 1 against the page nine tenths deep, in the big store.
	depth := finished * 9 / 10
	cursor := ""
	for seen := 0; seen < depth; seen += runstate.MaxPageLimit {
		page, err := big.ListRuns(ctx, runstate.ListRunsParams{Limit: runstate.MaxPageLimit, Cursor: cursor})
		if err != nil {
			b.Fatal(err)
		}
		cursor = page.NextCursor
	}
	for _, at := range []struct {
		depth  int
		cursor string
	}{{0, ""}, {depth, cursor}} {
		b.Run(fmt.Sprintf("list-page/depth=%d", at.depth), func(b *testing.B) {
			for b.Loop() {
				page, err := big.ListRuns(ctx, runstate.ListRunsParams{Limit: 100, Cursor: at.cursor})
				if err != nil || len(page.Runs) != 100 {
					b.Fatalf("a page of %d runs: %v", len(page.Runs), err)
				}
			}
		})
	}

	for _, s := range stores {
		b.Run(fmt.Sprintf("recovery/live=%d/finished=%d", liveRuns, s.finished), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				load(b, s.bulk, liveRuns, runstate.StatusRunning, time.Now())
				b.StartTimer()
				rep, err := runstate.Recover(ctx, s.store, runstate.RecoveryOptions{Owner: runstate.Owner{Worker: "bench-recovery", Incarnation: "1"},
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil || rep.Interrupted != liveRuns {
					b.Fatalf("recovery interrupted %d of %d runs: %v", rep.Interrupted, liveRuns, err)
				}
			}
		})
	}
}
