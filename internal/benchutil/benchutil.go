// Package benchutil holds helpers shared by the adapters' benchmarks.
package benchutil

import (
	"sync"
	"sync/atomic"
	"testing"
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
