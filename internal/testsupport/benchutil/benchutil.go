// Package benchutil holds helpers shared by the adapters' benchmarks.
package benchutil

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/runstate/runstate"
)

// Concurrently runs body in exactly n goroutines that share b.N
// iterations (b.RunParallel would start n × GOMAXPROCS). next reports
// whether the calling goroutine should do one more iteration. The timer
// covers only the goroutines' work.
func Concurrently(b *testing.B, n int, body func(worker int, next func() bool)) {
	var left atomic.Int64
	left.Store(int64(b.N))
	next := func() bool { return left.Add(-1) >= 0 }
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(w, next)
		}()
	}
	wg.Wait()
	b.StopTimer()
}

// Claims runs b.N claims from exactly n workers, claim taking one run for
// worker w and returning its id, and reports claims/s and double-claims:
// a run claimed twice also fails the benchmark. Between the timer's start
// and its stop only claims run.
func Claims(b *testing.B, n int, claim func(worker int) (string, error)) {
	var mu sync.Mutex
	claimed := make(map[string]int, b.N)
	Concurrently(b, n, func(w int, next func() bool) {
		for next() {
			id, err := claim(w)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			claimed[id]++
			mu.Unlock()
		}
	})
	doubles := 0
	for id, times := range claimed {
		if times > 1 {
			b.Errorf("run %s claimed %d times", id, times)
			doubles += times - 1
		}
	}
	b.ReportMetric(float64(doubles), "double-claims")
	b.ReportMetric(float64(len(claimed))/b.Elapsed().Seconds(), "claims/s")
}

// FillQueue creates n queued runs of workflow bench, with priorities 0 to
// 9, from several goroutines.
func FillQueue(b *testing.B, s runstate.RunStateStore, n int) {
	b.Helper()
	Fill(b, n, func(i int64) error {
		_, err := s.CreateRun(context.Background(), runstate.CreateRunParams{WorkflowName: "bench", Priority: int(i % 10)})
		return err
	})
}

// Fill calls put for 1 to n from 16 goroutines, as a benchmark fills its
// store before the timer starts; the first error fails the benchmark.
func Fill(b *testing.B, n int, put func(i int64) error) {
	b.Helper()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := put(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
