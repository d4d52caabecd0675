package plugin_test

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/plugin"
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

// floorClient calls the floor server (plugin/internal/floorserver): plain
// grpc-go to another process that calls the same store, without
// runstate's protocol.
type floorClient struct{ conn *grpc.ClientConn }

func startFloor(b *testing.B, kind string) floorClient {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "floor.sock")
	cmd := exec.Command(bin(b, floorPkg), "-socket", sock, "-store", kind, "-dir", b.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("floor server: %q, %v", line, err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(4<<20))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return floorClient{conn}
}

func (f floorClient) call(ctx context.Context, method string, in, out proto.Message) error {
	return f.conn.Invoke(ctx, "/runstate.floor.Floor/"+method, in, out)
}

func (f floorClient) create(ctx context.Context) (string, error) {
	var id wrapperspb.StringValue
	err := f.call(ctx, "Create", &emptypb.Empty{}, &id)
	return id.Value, err
}

// benchStores returns the store under test in-process and through its
// plugin, and the plugin's client.
func benchStores(b *testing.B, kind string) (map[string]runstate.RunStateStore, *plugin.Client) {
	ctx := context.Background()
	out := map[string]runstate.RunStateStore{}
	var c *plugin.Client
	var err error
	quiet := slog.New(slog.DiscardHandler)
	switch kind {
	case "memory":
		out["in-process"] = memorytest.Open(b, nil)
		c, err = plugin.Open(ctx, bin(b, memoryPkg), plugin.Options{Logger: quiet})
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
		c, err = plugin.Open(ctx, bin(b, badgerPkg), plugin.Options{Logger: quiet, Config: map[string]string{"dir": b.TempDir()}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		out["plugin"] = c.Store()
	}
	return out, c
}

// BenchmarkPluginOverhead compares each call in-process, through a plugin
// process and through the floor (plain grpc-go to a process calling the
// same store), for the memory and Badger stores (Badger syncs writes).
// The plugin's own cost is its latency less the floor's.
func BenchmarkPluginOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("grpc/Noop/floor", func(b *testing.B) {
		f := startFloor(b, "memory")
		measure(b, func() error { return f.call(ctx, "Noop", &emptypb.Empty{}, &emptypb.Empty{}) })
	})
	for _, kind := range []string{"memory", "badger"} {
		f := startFloor(b, kind)
		id, err := f.create(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(kind+"/GetRun/floor", func(b *testing.B) {
			measure(b, func() error { return f.call(ctx, "Get", wrapperspb.String(id), &wrapperspb.Int64Value{}) })
		})
		b.Run(kind+"/UpdateRun/floor", func(b *testing.B) {
			measure(b, func() error { return f.call(ctx, "Update", wrapperspb.String(id), &wrapperspb.Int64Value{}) })
		})
		stores, client := benchStores(b, kind)
		for _, where := range []string{"in-process", "plugin"} {
			s := stores[where]
			run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench",
				Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}}})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(kind+"/GetRun/"+where, func(b *testing.B) {
				measure(b, func() error { _, err := s.GetRun(ctx, run.RunID); return err })
			})
			if where == "plugin" {
				// The same call on the generated gRPC client: the plugin's
				// transport without the host's conversions and checks.
				b.Run(kind+"/GetRun/plugin-raw", func(b *testing.B) {
					measure(b, func() error { return client.RawGetRun(ctx, run.RunID) })
				})
			}
			b.Run(kind+"/UpdateRun/"+where, func(b *testing.B) {
				measure(b, func() error {
					st := runstate.StatusRunning // from queued or waiting
					if run.Status == runstate.StatusRunning {
						st = runstate.StatusWaiting
					}
					var err error
					run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(st)})
					return err
				})
			})
		}
	}
}

// BenchmarkPluginThroughput: calls per second from 8 concurrent callers,
// in-process, through the plugin process and through the floor.
func BenchmarkPluginThroughput(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"memory", "badger"} {
		f := startFloor(b, kind)
		id, err := f.create(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(kind+"/GetRun/floor", func(b *testing.B) {
			benchutil.Concurrently(b, 8, func(_ int, next func() bool) {
				for next() {
					if err := f.call(ctx, "Get", wrapperspb.String(id), &wrapperspb.Int64Value{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
		stores, _ := benchStores(b, kind)
		for _, where := range []string{"in-process", "plugin"} {
			s := stores[where]
			run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench"})
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
