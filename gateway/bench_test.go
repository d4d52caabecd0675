package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/plugin/plugintest"
)

// memoryPlugin is the memory store's plugin, built once per test binary.
var memoryPlugin = plugintest.NewBinaries("github.com/runstate/runstate/cmd/runstate-plugin-memory")

func TestMain(m *testing.M) {
	code := m.Run()
	memoryPlugin.Cleanup()
	os.Exit(code)
}

// BenchmarkGatewayOverhead measures a call to a memory store through the
// gateway (TCP loopback, mutual TLS, a bearer token) side by side with the
// same call in-process and through the memory store's plugin (a child
// process), with the p50 and p99 latency of each.
func BenchmarkGatewayOverhead(b *testing.B) {
	ctx := context.Background()
	w := newWorld(b)
	p, err := plugin.Open(ctx, memoryPlugin.Path(b, "github.com/runstate/runstate/cmd/runstate-plugin-memory"),
		plugin.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	stores := map[string]runstate.Store{"in-process": w.store, "gateway": w.dial(b, "operator-o"), "plugin": leased(p.Store())}
	for _, op := range []string{"GetRun", "UpdateRun"} {
		for _, name := range []string{"in-process", "plugin", "gateway"} {
			b.Run(op+"/"+name, func(b *testing.B) {
				store := stores[name]
				run, err := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				took := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					if op == "GetRun" {
						_, err = store.GetRun(ctx, run.RunID)
					} else {
						msg := fmt.Sprint(i)
						run, err = store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: &msg})
					}
					took = append(took, time.Since(start))
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				reportPercentiles(b, took)
			})
		}
	}
}

// BenchmarkGatewayThroughput is GetRun by 8 remote workers at once, each
// with its own connection.
func BenchmarkGatewayThroughput(b *testing.B) {
	ctx := context.Background()
	w := newWorld(b)
	run, err := w.store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var clients []runstate.Store
	for range 8 {
		clients = append(clients, w.dial(b, "reader-r"))
	}
	var next sync.Mutex
	i := 0
	b.SetParallelism(8) // with GOMAXPROCS, at least 8 goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		store := clients[i%len(clients)]
		i++
		next.Unlock()
		for pb.Next() {
			if _, err := store.GetRun(ctx, run.RunID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func reportPercentiles(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	at := func(q float64) float64 { return float64(took[min(len(took)-1, int(q*float64(len(took))))]) / 1e3 }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
