package perf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
)

// endToEnd measures each level twice, each on a fresh store holding
// opts.Claims queued runs: first one call per transition (end-to-end-calls,
// the baseline, as workers did before batches), then a worker pool
// (end-to-end). Every transition is durable and audited before the caller
// hears of it; PerSecond is runs completed per second, and a run handed
// out twice is counted.
func endToEnd(ctx context.Context, target conformance.Target, opts Options) ([]Measurement, error) {
	var out []Measurement
	for _, level := range opts.Levels {
		for _, w := range []struct {
			name string
			run  func(context.Context, runstate.Store, int) (*latencies, map[string]int, error)
		}{{EndToEndCalls, endToEndCalls}, {EndToEnd, endToEndPool}} {
			m, err := endToEndLevel(ctx, target, opts, w.name, level, w.run)
			out = append(out, m)
			if err != nil {
				return out, fmt.Errorf("%s, slots=%d: %w", w.name, level, err)
			}
		}
	}
	return out, nil
}

// endToEndLevel enqueues opts.Claims runs in a fresh store, in batches of
// 100, and has run take and complete them all with level workers.
func endToEndLevel(ctx context.Context, target conformance.Target, opts Options, name string, level int,
	run func(context.Context, runstate.Store, int) (*latencies, map[string]int, error)) (Measurement, error) {
	if !target.Capabilities.Leases {
		return Measurement{Workload: name, Level: level, Skipped: "the store has no leases"}, nil
	}
	opts.Progress(fmt.Sprintf("%s, slots=%d", name, level))
	var m Measurement
	err := withStore(ctx, target, func(st runstate.RunStateStore) error {
		full, ok := runstate.As[runstate.Store](st)
		if !ok {
			return errors.New("the target declares leases but its store has no lease operations")
		}
		if err := enqueue(ctx, full, opts.Claims); err != nil {
			return err
		}
		start := time.Now()
		lat, claimed, err := run(ctx, full, level)
		m = lat.measurement(name, level, time.Since(start))
		for _, n := range claimed {
			m.DoubleClaims += n - 1
		}
		if err == nil && m.Ops != opts.Claims {
			err = fmt.Errorf("completed %d of the %d runs enqueued", m.Ops, opts.Claims)
		}
		return err
	})
	return m, err
}

// endToEndCalls takes and completes every queued run with level workers,
// each making one call per transition and waiting for each: ClaimNextRun,
// UpdateRun to running, UpdateRun to success, ReleaseLease. P50 and P99
// are a run's time from its claim to its release.
func endToEndCalls(ctx context.Context, st runstate.Store, level int) (*latencies, map[string]int, error) {
	lat := &latencies{}
	var mu sync.Mutex
	claimed := map[string]int{}
	err := parallel(level, func(w int) error {
		owner := runstate.Owner{Worker: fmt.Sprintf("bench-worker-%d", w), Incarnation: "1"}
		actor := runstate.Actor{Kind: runstate.ActorWorker, ID: owner.String()}
		var mine []time.Duration
		defer func() { lat.add(mine) }()
		for {
			t0 := time.Now()
			c, err := st.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
			if errors.Is(err, runstate.ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("worker %d: claim-next: %w", w, err)
			}
			mu.Lock()
			claimed[c.Run.RunID]++
			mu.Unlock()
			run := c.Run
			for _, to := range []runstate.RunStatus{runstate.StatusRunning, runstate.StatusSuccess} {
				if run, err = st.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version,
					LeaseToken: c.Lease.Token, Status: string(to), Actor: actor}); err != nil {
					return fmt.Errorf("worker %d: move run %s to %s: %w", w, c.Run.RunID, to, err)
				}
			}
			if err := st.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: c.Lease.Token}); err != nil {
				return fmt.Errorf("worker %d: release run %s: %w", w, run.RunID, err)
			}
			mine = append(mine, time.Since(t0))
		}
	})
	return lat, claimed, err
}

// endToEndPool takes and completes every queued run as one worker process
// of level slots does (WorkerPool): whenever slots are free it claims that
// many runs in one call and starts them in the claim (runstate.ClaimRuns
// with Start), and each run is moved to success under the lease, releasing
// the lease in the same write (ReleaseLease), while its slot takes the
// next. P50 and P99 are a run's completing write.
func endToEndPool(ctx context.Context, st runstate.Store, level int) (*latencies, map[string]int, error) {
	var mu sync.Mutex
	claimed := map[string]int{}
	res, err := WorkerPool{Store: st, Slots: level, OnClaim: func(c runstate.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		claimed[c.Run.RunID]++
		return nil
	}}.Run(ctx)
	return &latencies{all: res.Completions}, claimed, err
}

// enqueue creates n runs in batches of 100.
func enqueue(ctx context.Context, st runstate.RunStateStore, n int) error {
	for done := 0; done < n; {
		batch := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, min(100, n-done))}
		for i := range batch.Runs {
			batch.Runs[i] = runstate.CreateRunParams{WorkflowName: "bench", Priority: (done + i) % 10}
		}
		if _, err := runstate.CreateRuns(ctx, st, batch); err != nil {
			return fmt.Errorf("enqueue runs %d to %d: %w", done+1, done+len(batch.Runs), err)
		}
		done += len(batch.Runs)
	}
	return nil
}
