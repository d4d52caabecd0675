package riverbench

import (
	"fmt"
	"testing"
	"time"
)

// minUnits is the least work a measured run does, whatever b.N: River's
// client start, and each side's first connections, would otherwise weigh
// on the first small runs of the benchmark framework.
const minUnits = 1000

// workerCounts are the W of the workloads with workers.
var workerCounts = []int{8, 32}

// batchSize is the jobs or runs of one batched enqueue.
const batchSize = 100

// BenchmarkEndToEnd: N units enqueued beforehand (not measured), then W
// workers take and complete each. River: a client with MaxWorkers W and a
// no-op worker, until N completions. runstate: W goroutines each claim,
// move the run to running and to success under the lease, and release it
// (one call each, as the demo runner's workers do); runstate-fleet: one
// process of W slots that claims and starts as many runs as it has free
// slots in one call, each run's success and release then written by a
// completer while its slot takes the next; runstate-worker: the worker
// package, W slots, its outcomes written in batches, several in flight.
func BenchmarkEndToEnd(b *testing.B) {
	srv := openServer(b)
	for _, w := range workerCounts {
		b.Run(fmt.Sprintf("river/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRiverWorkers(w), 1)
		})
		b.Run(fmt.Sprintf("runstate/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRunstateWorkers(w, true), 1)
		})
		b.Run(fmt.Sprintf("runstate-fleet/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRunstateFleet(w, true), 1)
		})
		b.Run(fmt.Sprintf("runstate-worker/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRunstateWorker(w), 1)
		})
	}
}

// BenchmarkClaims: runstate's ClaimNextRun alone, each claim a unit
// (runstate-fleet: ClaimRuns of up to W at a time).
// River has no claim without the rest: its fetch and completion are one
// unit, measured as in BenchmarkEndToEnd.
func BenchmarkClaims(b *testing.B) {
	srv := openServer(b)
	for _, w := range workerCounts {
		b.Run(fmt.Sprintf("river/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRiverWorkers(w), 1)
		})
		b.Run(fmt.Sprintf("runstate/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRunstateWorkers(w, false), 1)
		})
		b.Run(fmt.Sprintf("runstate-fleet/workers=%d", w), func(b *testing.B) {
			measure(b, srv, newRunstateFleet(w, false), 1)
		})
	}
}

// BenchmarkEnqueue: one caller enqueues one unit per call: River's Insert
// beside runstate's CreateRun.
func BenchmarkEnqueue(b *testing.B) {
	srv := openServer(b)
	b.Run("river", func(b *testing.B) { measure(b, srv, &riverEnqueue{batch: 1}, 1) })
	b.Run("runstate", func(b *testing.B) { measure(b, srv, &runstateEnqueue{batch: 1}, 1) })
}

// BenchmarkEnqueueBatched: one caller enqueues batchSize units per call:
// River's InsertMany beside runstate's CreateRuns (all or none, one
// transaction).
func BenchmarkEnqueueBatched(b *testing.B) {
	srv := openServer(b)
	name := fmt.Sprintf("batch=%d", batchSize)
	b.Run("river/"+name, func(b *testing.B) { measure(b, srv, &riverEnqueue{batch: batchSize}, batchSize) })
	b.Run("runstate/"+name, func(b *testing.B) { measure(b, srv, &runstateEnqueue{batch: batchSize}, batchSize) })
}

// measure runs wl on a fresh database and reports per unit: the time
// (ns/op is per unit, not per b.N, when the floor applies), units/s, the
// server's and this process's CPU, and the commits in the database. The
// CPU and commit window is wider than the timed one: it also holds the
// opening and closing of run's connections, which every unit shares.
func measure(b *testing.B, srv *server, wl workload, unitMultiple int) {
	ctx := b.Context()
	units := max(b.N, minUnits)
	units = (units + unitMultiple - 1) / unitMultiple * unitMultiple
	b.StopTimer()
	db := srv.freshDatabase(b)
	if err := wl.prepare(ctx, db.dsn, units); err != nil {
		b.Fatal(err)
	}
	before := srv.sample(ctx, b, db)
	clientBefore := processCPU()
	b.ResetTimer()
	if err := wl.run(ctx, db.dsn, units, benchTimer{b}); err != nil {
		b.Fatal(err)
	}
	clientAfter := processCPU() // before the wait for the server to settle
	after := srv.sample(ctx, b, db)
	elapsed := b.Elapsed()
	perUnit := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(units) }
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(units), "ns/op")
	b.ReportMetric(float64(units)/elapsed.Seconds(), "units/s")
	if srv.postmaster != 0 {
		b.ReportMetric(perUnit(after.serverCPU-before.serverCPU), "server-cpu-ms/unit")
	}
	b.ReportMetric(perUnit(clientAfter-clientBefore), "client-cpu-ms/unit")
	b.ReportMetric(float64(after.commits-before.commits)/float64(units), "commits/unit")
}
