package riverbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's unit of work: a job that does nothing, as a runstate
// run here is moved to success with nothing done in between.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// noopWorker takes each job into a ledger and succeeds.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	taken *ledger[int64]
}

func (w *noopWorker) Work(ctx context.Context, job *river.Job[noopArgs]) error {
	return w.taken.take(job.ID)
}

func openRiverPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = poolSize
	return pgxpool.NewWithConfig(ctx, cfg)
}

// newRiverClient returns a client that works the default queue with
// workers workers, or an insert-only one when workers is 0.
func newRiverClient(pool *pgxpool.Pool, workers int, taken *ledger[int64]) (*river.Client[pgx.Tx], error) {
	registry := river.NewWorkers()
	river.AddWorker(registry, &noopWorker{taken: taken})
	cfg := &river.Config{Workers: registry, Logger: quiet}
	if workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
		// River's fastest fetching: the least time between two fetches and
		// between two polls it allows (FetchCooldownMin, FetchPollIntervalMin;
		// the defaults are 100 ms and 1 s). Inserts also wake fetchers
		// through LISTEN/NOTIFY, but here every job is inserted before the
		// client starts, so the fetch loop alone feeds the workers.
		cfg.FetchCooldown = river.FetchCooldownMin
		cfg.FetchPollInterval = river.FetchPollIntervalMin
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// migrateRiver creates River's tables in the database.
func migrateRiver(ctx context.Context, dsn string) error {
	pool, err := openRiverPool(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return err
	}
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// riverWorkers is River's end to end: units jobs inserted beforehand, then
// a client with workers workers works them until every one has completed.
// It is River's claims-only workload too: fetching and completing are one
// unit in River.
type riverWorkers struct {
	workers int
	taken   *ledger[int64]
	jobIDs  []int64
}

func newRiverWorkers(workers int) *riverWorkers {
	return &riverWorkers{workers: workers, taken: newLedger[int64]()}
}

func (w *riverWorkers) prepare(ctx context.Context, dsn string, units int) error {
	if err := migrateRiver(ctx, dsn); err != nil {
		return err
	}
	pool, err := openRiverPool(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := newRiverClient(pool, 0, w.taken)
	if err != nil {
		return err
	}
	const chunk = 1000
	for inserted := 0; inserted < units; inserted += chunk {
		batch := make([]river.InsertManyParams, min(chunk, units-inserted))
		for i := range batch {
			batch[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		results, err := client.InsertMany(ctx, batch)
		if err != nil {
			return err
		}
		for _, r := range results {
			w.jobIDs = append(w.jobIDs, r.Job.ID)
		}
	}
	return nil
}

func (w *riverWorkers) run(ctx context.Context, dsn string, units int, sw stopwatch) error {
	pool, err := openRiverPool(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := newRiverClient(pool, w.workers, w.taken)
	if err != nil {
		return err
	}
	// Events that overflow a subscription are dropped: room for all.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: units + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	defer cancel()
	sw.start()
	if err := client.Start(ctx); err != nil {
		return err
	}
	waitErr := awaitCompletions(ctx, events, units)
	sw.stop()
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer stopCancel()
	return errors.Join(waitErr, client.Stop(stopCtx))
}

// awaitCompletions returns once units jobs have completed; River sends
// the event after the completion is committed.
func awaitCompletions(ctx context.Context, events <-chan *river.Event, units int) error {
	const quietLimit = 2 * time.Minute // no progress for this long: stuck
	quietFor := time.NewTimer(quietLimit)
	defer quietFor.Stop()
	for completed := 0; completed < units; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d: %s", ev.Job.ID, ev.Kind)
			}
			completed++
			quietFor.Reset(quietLimit)
		case <-quietFor.C:
			return fmt.Errorf("%d of %d jobs completed, then none for %v", completed, units, quietLimit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *riverWorkers) verify(ctx context.Context, dsn string, units int) error {
	if len(w.jobIDs) != units {
		return fmt.Errorf("%d jobs inserted, want %d", len(w.jobIDs), units)
	}
	if err := w.taken.exactlyOnce(w.jobIDs); err != nil {
		return err
	}
	var all, completedOnFirstAttempt int
	err := queryRow(ctx, dsn, `SELECT count(*), count(*) FILTER (WHERE state = 'completed' AND attempt = 1) FROM river_job`,
		&all, &completedOnFirstAttempt)
	if err != nil {
		return err
	}
	if all != units || completedOnFirstAttempt != units {
		return fmt.Errorf("river_job: %d jobs, %d completed on their first attempt; want %d and %d", all, completedOnFirstAttempt, units, units)
	}
	return nil
}

// riverEnqueue inserts units jobs, batch at a time: Insert for one,
// InsertMany for more.
type riverEnqueue struct {
	batch  int
	jobIDs []int64
}

func (e *riverEnqueue) prepare(ctx context.Context, dsn string, units int) error {
	return migrateRiver(ctx, dsn)
}

func (e *riverEnqueue) run(ctx context.Context, dsn string, units int, sw stopwatch) error {
	pool, err := openRiverPool(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := newRiverClient(pool, 0, nil)
	if err != nil {
		return err
	}
	e.jobIDs = make([]int64, 0, units)
	sw.start()
	defer sw.stop()
	for len(e.jobIDs) < units {
		if e.batch == 1 {
			r, err := client.Insert(ctx, noopArgs{}, nil)
			if err != nil {
				return err
			}
			e.jobIDs = append(e.jobIDs, r.Job.ID)
			continue
		}
		batch := make([]river.InsertManyParams, min(e.batch, units-len(e.jobIDs)))
		for i := range batch {
			batch[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		results, err := client.InsertMany(ctx, batch)
		if err != nil {
			return err
		}
		for _, r := range results {
			e.jobIDs = append(e.jobIDs, r.Job.ID)
		}
	}
	return nil
}

func (e *riverEnqueue) verify(ctx context.Context, dsn string, units int) error {
	distinct := map[int64]bool{}
	for _, id := range e.jobIDs {
		distinct[id] = true
	}
	var available int
	if err := queryRow(ctx, dsn, `SELECT count(*) FROM river_job WHERE state = 'available'`, &available); err != nil {
		return err
	}
	if len(distinct) != units || available != units {
		return fmt.Errorf("%d distinct jobs inserted, %d available; want %d", len(distinct), available, units)
	}
	return nil
}

// queryRow reads one row on a connection of its own.
func queryRow(ctx context.Context, dsn, query string, dest ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, query).Scan(dest...)
}
