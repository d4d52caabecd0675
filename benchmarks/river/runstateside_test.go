package riverbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
)

// openRunstate opens the runstate side of the benchmarks: the PostgreSQL
// reference store, its pool the size of River's. Its batch calls
// (runstate.CreateRuns, ClaimRuns) are the store's own: one transaction a
// batch.
func openRunstate(ctx context.Context, dsn string) (*postgres.Store, error) {
	return postgres.Open(ctx, postgres.Options{DSN: dsn, MaxOpenConns: poolSize, Logger: quiet})
}

// openStore opens the store for preparing and verifying, outside the seam.
func openStore(ctx context.Context, dsn string) (*postgres.Store, error) {
	return postgres.Open(ctx, postgres.Options{DSN: dsn, MaxOpenConns: poolSize, Logger: quiet})
}

// newRun is runstate's unit: a run without steps, as River's job has no
// arguments.
func newRun() runstate.CreateRunParams {
	return runstate.CreateRunParams{WorkflowName: "bench"}
}

// leaseTTL is long enough that no lease expires during a benchmark, so
// that no run is claimed twice.
const leaseTTL = 10 * time.Minute

// runstateWorkers is runstate's end to end (finish) or claims only:
// units runs created beforehand, then workers goroutines claim them until
// none is left, and under finish also execute each as the demo runner's
// workers do.
type runstateWorkers struct {
	workers int
	finish  bool
	taken   *ledger[string]
	runIDs  []string
}

func newRunstateWorkers(workers int, finish bool) *runstateWorkers {
	return &runstateWorkers{workers: workers, finish: finish, taken: newLedger[string]()}
}

func (w *runstateWorkers) prepare(ctx context.Context, dsn string, units int) error {
	s, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	const creators = 8
	ids := make([][]string, creators)
	errs := make([]error, creators)
	var wg sync.WaitGroup
	for c := range creators {
		wg.Go(func() {
			for i := c; i < units; i += creators {
				run, err := s.CreateRun(ctx, newRun())
				if err != nil {
					errs[c] = err
					return
				}
				ids[c] = append(ids[c], run.RunID)
			}
		})
	}
	wg.Wait()
	w.runIDs = slices.Concat(ids...)
	return errors.Join(errs...)
}

func (w *runstateWorkers) run(ctx context.Context, dsn string, units int, sw stopwatch) error {
	ops, err := openRunstate(ctx, dsn)
	if err != nil {
		return err
	}
	defer ops.Close()
	errs := make([]error, w.workers)
	var wg sync.WaitGroup
	sw.start()
	for i := range w.workers {
		owner := runstate.Owner{Worker: fmt.Sprintf("worker-%d", i), Incarnation: "1"}
		wg.Go(func() { errs[i] = w.work(ctx, ops, owner) })
	}
	wg.Wait()
	sw.stop()
	return errors.Join(errs...)
}

// work claims runs until none is left. Under finish each run goes to
// running and then to success, both writes fenced by the lease token, and
// its lease is released: one call per transition, the unit the comparison
// began with (the demo runner's worker before batches: it now claims and
// starts in one write, and its last write releases the lease).
func (w *runstateWorkers) work(ctx context.Context, ops runstate.Store, owner runstate.Owner) error {
	actor := runstate.Actor{Kind: runstate.ActorWorker, ID: owner.String()}
	for {
		claim, err := ops.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: leaseTTL})
		if errors.Is(err, runstate.ErrNotFound) {
			return nil // every run was created before the workers started
		}
		if err != nil {
			return err
		}
		if err := w.taken.take(claim.Run.RunID); err != nil {
			return err
		}
		if !w.finish {
			continue
		}
		run, token := claim.Run, claim.Lease.Token
		run, err = ops.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: token,
			Status: string(runstate.StatusRunning), Actor: actor})
		if err != nil {
			return err
		}
		_, err = ops.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: token,
			Status: string(runstate.StatusSuccess), Actor: actor})
		if err != nil {
			return err
		}
		if err := ops.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: token}); err != nil {
			return err
		}
	}
}

func (w *runstateWorkers) verify(ctx context.Context, dsn string, units int) error {
	if len(w.runIDs) != units {
		return fmt.Errorf("%d runs created, want %d", len(w.runIDs), units)
	}
	if err := w.taken.exactlyOnce(w.runIDs); err != nil {
		return err
	}
	if !w.finish {
		return nil
	}
	s, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, id := range w.runIDs {
		if err := endedInSuccess(ctx, s, id); err != nil {
			return err
		}
	}
	return nil
}

// endedInSuccess checks that a run is success, with the audit trail of one
// execution: created, queued to running, running to success.
func endedInSuccess(ctx context.Context, s *postgres.Store, id string) error {
	run, err := s.GetRun(ctx, id)
	if err != nil {
		return err
	}
	if run.Status != runstate.StatusSuccess {
		return fmt.Errorf("run %s is %s, want success", id, run.Status)
	}
	page, err := s.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id})
	if err != nil {
		return err
	}
	var trail []string
	for _, ev := range page.Events {
		trail = append(trail, fmt.Sprintf("%s:%s>%s", ev.Kind, ev.From, ev.To))
	}
	want := []string{"created:>queued", "transition:queued>running", "transition:running>success"}
	if !slices.Equal(trail, want) || page.More {
		return fmt.Errorf("run %s: audit trail %v (more: %v), want %v", id, trail, page.More, want)
	}
	return nil
}

// runstateEnqueue creates units runs, batch at a time: CreateRun for one,
// CreateRuns for more.
type runstateEnqueue struct {
	batch  int
	runIDs []string
}

func (e *runstateEnqueue) prepare(ctx context.Context, dsn string, units int) error {
	s, err := openStore(ctx, dsn) // Open applies the migrations
	if err != nil {
		return err
	}
	return s.Close()
}

func (e *runstateEnqueue) run(ctx context.Context, dsn string, units int, sw stopwatch) error {
	ops, err := openRunstate(ctx, dsn)
	if err != nil {
		return err
	}
	defer ops.Close()
	e.runIDs = make([]string, 0, units)
	sw.start()
	defer sw.stop()
	for len(e.runIDs) < units {
		if e.batch == 1 {
			run, err := ops.CreateRun(ctx, newRun())
			if err != nil {
				return err
			}
			e.runIDs = append(e.runIDs, run.RunID)
			continue
		}
		batch := make([]runstate.CreateRunParams, min(e.batch, units-len(e.runIDs)))
		for i := range batch {
			batch[i] = newRun()
		}
		res, err := runstate.CreateRuns(ctx, ops, runstate.CreateRunsParams{Runs: batch})
		if err != nil {
			return err
		}
		for _, r := range res.Runs {
			e.runIDs = append(e.runIDs, r.RunID)
		}
	}
	return nil
}

func (e *runstateEnqueue) verify(ctx context.Context, dsn string, units int) error {
	s, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	queued := 0
	for cursor := ""; ; {
		page, err := s.ListRuns(ctx, runstate.ListRunsParams{Statuses: []string{string(runstate.StatusQueued)}, Limit: runstate.MaxPageLimit, Cursor: cursor})
		if err != nil {
			return err
		}
		queued += len(page.Runs)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	distinct := map[string]bool{}
	for _, id := range e.runIDs {
		distinct[id] = true
	}
	if len(distinct) != units || queued != units {
		return fmt.Errorf("%d distinct runs created, %d queued; want %d", len(distinct), queued, units)
	}
	return nil
}
