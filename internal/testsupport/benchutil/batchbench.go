package benchutil

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// BatchSizes are the batch benchmarks' sizes; 1 is the single call
// (UpdateRun, ClaimNextRun), measured in the same run as the batches.
var BatchSizes = []int{1, 10, 100}

// BatchWorkers is how many goroutines a batch benchmark runs.
const BatchWorkers = 4

// BatchUpdates updates b.N runs, size to a call (UpdateRuns; UpdateRun
// for 1), from BatchWorkers goroutines, each flipping its own runs
// between running and waiting. It reports runs/s, and the commits and
// statements per run counted on c.
func BatchUpdates(b *testing.B, s BatchStore, c *Counter, size int) {
	ctx := context.Background()
	owned := make([][]runstate.RunSnapshot, BatchWorkers)
	for w := range owned {
		owned[w] = CreateBatch(b, s, size, "bench")
	}
	calls := (b.N + size - 1) / size
	c.measure(b, func() int {
		var left atomic.Int64
		left.Store(int64(calls))
		Concurrently(b, BatchWorkers, func(w int, _ func() bool) {
			runs := owned[w]
			for i := 0; left.Add(-1) >= 0; i++ {
				if err := updateAll(ctx, s, runs, FlipStatus(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		return calls * size
	})
}

// FlipStatus is running for even i, waiting for odd.
func FlipStatus(i int) runstate.RunStatus {
	if i%2 == 1 {
		return runstate.StatusWaiting
	}
	return runstate.StatusRunning
}

// updateAll moves runs to status, in one UpdateRuns (one UpdateRun for a
// single run), and keeps their new versions.
func updateAll(ctx context.Context, s BatchStore, runs []runstate.RunSnapshot, status runstate.RunStatus) error {
	if len(runs) == 1 {
		run, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: runs[0].RunID, ExpectedVersion: runs[0].Version, Status: string(status)})
		runs[0] = run
		return err
	}
	p := runstate.UpdateRunsParams{Updates: make([]runstate.UpdateRunParams, len(runs))}
	for i, r := range runs {
		p.Updates[i] = runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: string(status)}
	}
	res, err := s.UpdateRuns(ctx, p)
	if err != nil {
		return err
	}
	for i, item := range res.Items {
		if item.Err != nil {
			return item.Err
		}
		runs[i] = item.Run
	}
	return nil
}

// BatchClaims claims b.N queued runs, size to a call (ClaimRuns;
// ClaimNextRun for 1), from BatchWorkers goroutines. It reports runs/s,
// the commits and statements per run counted on c, and fails on a run
// claimed twice.
func BatchClaims(b *testing.B, s BatchStore, c *Counter, size int) {
	ctx := context.Background()
	calls := (b.N + size - 1) / size
	CreateBatch(b, s, calls*size, "bench")
	var mu sync.Mutex
	claimed := map[string]int{}
	c.measure(b, func() int {
		var left atomic.Int64
		left.Store(int64(calls))
		Concurrently(b, BatchWorkers, func(w int, _ func() bool) {
			owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
			for left.Add(-1) >= 0 {
				ids, err := claimSome(ctx, s, owner, size)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				for _, id := range ids {
					claimed[id]++
				}
				mu.Unlock()
			}
		})
		return len(claimed)
	})
	for id, times := range claimed {
		if times > 1 {
			b.Errorf("run %s claimed %d times", id, times)
		}
	}
}

// claimSome claims up to size runs for owner and returns their ids.
func claimSome(ctx context.Context, s BatchStore, owner runstate.Owner, size int) ([]string, error) {
	if size == 1 {
		cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
		return []string{cl.Run.RunID}, err
	}
	res, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: owner, TTL: time.Hour, Max: size})
	ids := make([]string, len(res.Claims))
	for i, cl := range res.Claims {
		ids[i] = cl.Run.RunID
	}
	return ids, err
}

// measure runs timed, which times itself and answers how many runs it
// wrote, and reports runs/s, and the commits and statements per run it
// sent, counted on c.
func (c *Counter) measure(b *testing.B, timed func() int) {
	runs := 0
	cost, _ := c.Cost(func() error { runs = timed(); return nil })
	b.ReportMetric(float64(runs)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64(cost.Commits)/float64(max(runs, 1)), "commits/run")
	b.ReportMetric(float64(cost.Statements)/float64(max(runs, 1)), "stmts/run")
}

// CreateBatch creates n queued runs of workflow, with priorities 0 to 9,
// in batches of up to runstate.MaxBatchItems.
func CreateBatch(b *testing.B, s BatchStore, n int, workflow string) []runstate.RunSnapshot {
	b.Helper()
	var out []runstate.RunSnapshot
	for len(out) < n {
		p := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, min(n-len(out), runstate.MaxBatchItems))}
		for i := range p.Runs {
			p.Runs[i] = runstate.CreateRunParams{WorkflowName: workflow, Priority: (len(out) + i) % 10}
		}
		res, err := s.CreateRuns(context.Background(), p)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, res.Runs...)
	}
	return out
}

// RunBatchSizes runs bench for each of BatchSizes, on a store open
// gives it, counting on a Counter of its own.
func RunBatchSizes(b *testing.B, open func(testing.TB, *Counter) BatchStore, bench func(*testing.B, BatchStore, *Counter, int)) {
	for _, size := range BatchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			var c Counter
			bench(b, open(b, &c), &c, size)
		})
	}
}
