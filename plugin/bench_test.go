package plugin_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/internal/benchutil"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/spec"
)

// measure runs op b.N times and reports the median and 99th percentile
// latency besides ns/op.
func measure(b *testing.B, op func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// stores returns the store under test in-process and through its plugin.
func benchStores(b *testing.B, kind string) map[string]spec.RunStateStore {
	ctx := context.Background()
	out := map[string]spec.RunStateStore{}
	quiet := slog.New(slog.DiscardHandler)
	switch kind {
	case "memory":
		out["in-process"] = memorytest.Open(b, nil)
		c, err := plugin.Open(ctx, bin(b, memoryPkg), plugin.Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		out["plugin"] = c.Store()
	case "badger":
		s, err := badger.Open(ctx, badger.Options{Dir: b.TempDir(), GCInterval: -1, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		out["in-process"] = s
		c, err := plugin.Open(ctx, bin(b, badgerPkg), plugin.Options{Logger: quiet, Config: map[string]string{"dir": b.TempDir()}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		out["plugin"] = c.Store()
	}
	return out
}

// BenchmarkPluginOverhead compares each call in-process and through a
// plugin process, for the memory and Badger stores (Badger syncs writes).
func BenchmarkPluginOverhead(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"memory", "badger"} {
		stores := benchStores(b, kind)
		for _, where := range []string{"in-process", "plugin"} {
			s := stores[where]
			run, err := s.CreateRun(ctx, spec.CreateRunParams{WorkflowName: "bench",
				Steps: []spec.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}}})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(kind+"/GetRun/"+where, func(b *testing.B) {
				measure(b, func() error { _, err := s.GetRun(ctx, run.RunID); return err })
			})
			b.Run(kind+"/UpdateRun/"+where, func(b *testing.B) {
				measure(b, func() error {
					st := spec.StatusRunning // from queued or waiting
					if run.Status == spec.StatusRunning {
						st = spec.StatusWaiting
					}
					var err error
					run, err = s.UpdateRun(ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(st)})
					return err
				})
			})
		}
	}
}

// BenchmarkPluginThroughput: calls per second from 8 concurrent callers,
// in-process and through the plugin process.
func BenchmarkPluginThroughput(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"memory", "badger"} {
		stores := benchStores(b, kind)
		for _, where := range []string{"in-process", "plugin"} {
			s := stores[where]
			run, err := s.CreateRun(ctx, spec.CreateRunParams{WorkflowName: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(kind+"/GetRun/"+where, func(b *testing.B) {
				benchutil.Concurrently(b, 8, func(_ int, next func() bool) {
					for next() {
						if _, err := s.GetRun(ctx, run.RunID); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			})
		}
	}
}
