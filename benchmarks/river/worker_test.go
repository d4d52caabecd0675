package riverbench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/worker"
)

// runstateWorker is runstate's shipped worker (package worker) on the
// runs created beforehand: one process of slots slots, claiming and
// starting as many runs as it has free slots in one call, and writing the
// outcomes in batches with several in flight, each committed before it
// counts. It stops once every run is done.
type runstateWorker struct {
	slots  int
	single *runstateWorkers // prepare and verify: the same runs and checks
}

func newRunstateWorker(slots int) *runstateWorker {
	return &runstateWorker{slots: slots, single: newRunstateWorkers(slots, true)}
}

func (f *runstateWorker) prepare(ctx context.Context, dsn string, units int) error {
	return f.single.prepare(ctx, dsn, units)
}

func (f *runstateWorker) verify(ctx context.Context, dsn string, units int) error {
	return f.single.verify(ctx, dsn, units)
}

func (f *runstateWorker) run(ctx context.Context, dsn string, units int, sw stopwatch) error {
	s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, MaxOpenConns: poolSize, Logger: quiet})
	if err != nil {
		return err
	}
	defer s.Close()
	return runWorker(ctx, s, f.slots, units, f.single.taken, sw)
}

// completeLinger is how long the worker's outcomes wait for others to
// share their write: River's completer writes its completions every 50
// ms (every 250 ms while fewer than 100 wait), so the worker may wait as
// long. Both count a unit only once its completion is committed.
const completeLinger = 50 * time.Millisecond

// runWorker runs the worker package on s until units runs are done, each
// taken into taken.
func runWorker(ctx context.Context, s runstate.Store, slots, units int, taken *ledger[string], sw stopwatch) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var failure atomic.Value
	w, err := worker.New(worker.Config{Store: s, Owner: runstate.Owner{Worker: "bench-worker", Incarnation: "1"}, Slots: slots,
		LeaseTTL: leaseTTL, Poll: time.Millisecond, Logger: quiet, CompleteLinger: completeLinger,
		Handler: func(_ context.Context, job *worker.Job) error {
			if err := taken.take(job.Run().RunID); err != nil {
				failure.Store(err)
				cancel()
			}
			return nil
		},
		OnDone: func(d worker.Done) {
			if d.Outcome != worker.Succeeded {
				failure.Store(errors.New("run " + d.Run.RunID + ": " + string(d.Outcome)))
				cancel()
			}
			if done.Add(1) == int64(units) {
				cancel()
			}
		}})
	if err != nil {
		return err
	}
	sw.start()
	err = w.Run(ctx)
	sw.stop()
	if f, ok := failure.Load().(error); ok {
		return errors.Join(err, f)
	}
	if n := done.Load(); n != int64(units) && err == nil {
		return errors.New("the worker stopped before every run was done")
	}
	return err
}
