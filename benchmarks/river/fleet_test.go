package riverbench

import (
	"context"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/conformance/perf"
	"github.com/runstate/runstate/driver"
)

// runstateFleet is runstate used as a job queue's client uses River: one
// process with slots workers (perf.WorkerPool, the end-to-end workload of
// conformance-runner bench), which claims as many runs as it has free
// slots in one call (runstate.ClaimRuns) and, under finish, starts them in
// the same write (Start); each slot then hands its run to a completer,
// which moves it to success under the lease, releasing the lease in the
// same write, a caller that hears success only once that write is
// committed, and the slot is free for the next claim meanwhile. The
// completers' concurrent writes are single calls: the store groups what
// arrives together.
type runstateFleet struct {
	slots  int
	finish bool
	single *runstateWorkers // prepare and verify: the same runs and checks
}

func newRunstateFleet(slots int, finish bool) *runstateFleet {
	return &runstateFleet{slots: slots, finish: finish, single: newRunstateWorkers(slots, finish)}
}

func (f *runstateFleet) prepare(ctx context.Context, dsn string, units int) error {
	return f.single.prepare(ctx, dsn, units)
}

func (f *runstateFleet) verify(ctx context.Context, dsn string, units int) error {
	return f.single.verify(ctx, dsn, units)
}

func (f *runstateFleet) run(ctx context.Context, dsn string, units int, sw stopwatch) error {
	// One shared write in flight at a time: the most sharing, as a
	// throughput-minded fleet configures it (the default keeps a quarter
	// of the pool in flight, for writes that wait on row locks).
	s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, MaxOpenConns: poolSize, Logger: quiet,
		GroupCommit: driver.GroupCommit{MaxInFlight: 1}})
	if err != nil {
		return err
	}
	defer s.Close()
	sw.start()
	defer sw.stop()
	_, err = perf.WorkerPool{Store: s, Slots: f.slots, ClaimOnly: !f.finish,
		OnClaim: func(c runstate.Claim) error { return f.single.taken.take(c.Run.RunID) }}.Run(ctx)
	return err
}
