package riverbench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/driver"
)

// runstateFleet is runstate used as a job queue's client uses River: one
// process with slots workers, which claims as many runs as it has free
// slots in one call (runstate.ClaimRuns) and, under finish, starts them in
// the same write (Start); each worker then moves its run to success under
// the lease and releases it, a caller that hears success only once that
// write is committed. The workers' concurrent writes are single calls: the
// store groups what arrives together.
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	owner := runstate.Owner{Worker: "fleet", Incarnation: "1"}
	actor := runstate.Actor{Kind: runstate.ActorWorker, ID: owner.String()}
	free := make(chan struct{}, f.slots)
	for range f.slots {
		free <- struct{}{}
	}
	claimed := make(chan runstate.Claim, f.slots)
	errs := make([]error, f.slots+1)
	var workers sync.WaitGroup
	sw.start()
	for i := range f.slots {
		workers.Go(func() {
			for c := range claimed {
				if err := f.complete(ctx, s, c, actor); err != nil && errs[i] == nil {
					errs[i] = err
					cancel()
				}
				free <- struct{}{}
			}
		})
	}
	errs[f.slots] = f.claimUntilEmpty(ctx, s, owner, actor, free, claimed)
	close(claimed)
	workers.Wait()
	sw.stop()
	return errors.Join(errs...)
}

// claimUntilEmpty claims, whenever a slot is free, as many runs as there
// are free slots, until no run is left (every run was created before).
func (f *runstateFleet) claimUntilEmpty(ctx context.Context, s runstate.Store, owner runstate.Owner, actor runstate.Actor,
	free chan struct{}, claimed chan<- runstate.Claim) error {
	for {
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		n := 1
		for more := true; more && n < f.slots; {
			select {
			case <-free:
				n++
			default:
				more = false
			}
		}
		res, err := runstate.ClaimRuns(ctx, s, runstate.ClaimRunsParams{Owner: owner, TTL: leaseTTL, Max: n,
			Start: f.finish, Actor: actor, Filter: runstate.RunnableFilter{Statuses: []string{string(runstate.StatusQueued)}}})
		if err != nil {
			return err
		}
		for _, c := range res.Claims {
			if err := f.single.taken.take(c.Run.RunID); err != nil {
				return err
			}
			claimed <- c
		}
		for range n - len(res.Claims) {
			free <- struct{}{}
		}
		if len(res.Claims) == 0 {
			return nil
		}
	}
}

// complete finishes a claimed run: under finish, success under its lease
// and the lease released, in one write (ReleaseLease); claims alone end at
// the claim.
func (f *runstateFleet) complete(ctx context.Context, s runstate.Store, c runstate.Claim, actor runstate.Actor) error {
	if !f.finish {
		return nil
	}
	if c.Run.Status != runstate.StatusRunning {
		return fmt.Errorf("run %s was claimed %s, want running (claimed with Start)", c.Run.RunID, c.Run.Status)
	}
	_, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: c.Run.RunID, ExpectedVersion: c.Run.Version, LeaseToken: c.Lease.Token,
		Status: string(runstate.StatusSuccess), Actor: actor, ReleaseLease: true})
	return err
}
