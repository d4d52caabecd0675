package riverbench

import (
	"testing"
)

// TestEveryWorkloadDoesItsWork runs each benchmark's workload once on a
// few units and checks in the database that every unit was done exactly
// once: so that the benchmarks measure the work they claim.
func TestEveryWorkloadDoesItsWork(t *testing.T) {
	srv := openServer(t)
	const units = 60
	workloads := []struct {
		name string
		wl   workload
	}{
		{"end-to-end/river", newRiverWorkers(8)},
		{"end-to-end/runstate", newRunstateWorkers(8, true)},
		{"claims/runstate", newRunstateWorkers(8, false)},
		{"end-to-end/runstate-fleet", newRunstateFleet(8, true)},
		{"claims/runstate-fleet", newRunstateFleet(8, false)},
		{"end-to-end/runstate-worker", newRunstateWorker(8)},
		{"enqueue/river", &riverEnqueue{batch: 1}},
		{"enqueue/runstate", &runstateEnqueue{batch: 1}},
		{"enqueue-batched/river", &riverEnqueue{batch: 25}},
		{"enqueue-batched/runstate", &runstateEnqueue{batch: 25}},
	}
	for _, c := range workloads {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			db := srv.freshDatabase(t)
			if err := c.wl.prepare(ctx, db.dsn, units); err != nil {
				t.Fatal(err)
			}
			if err := c.wl.run(ctx, db.dsn, units, noTimer{}); err != nil {
				t.Fatal(err)
			}
			if err := c.wl.verify(ctx, db.dsn, units); err != nil {
				t.Fatal(err)
			}
		})
	}
}
