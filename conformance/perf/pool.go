package perf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// WorkerPool is one worker process of Slots slots, as a job queue's client
// runs one: whenever slots are free it claims that many queued runs in
// one call (runstate.ClaimRuns), started in the claim's write, and each
// slot works on its run (here, no work) and hands it to a completer, which
// moves it to success under the lease, releasing the lease in the same
// write (ReleaseLease). A slot is free once it has handed its run over:
// the pool claims its next run while the completion commits, as a job
// queue's worker takes its next job while its completer writes the last.
// A completion still counts only once committed, and a run whose
// completion is not committed stays under the pool's lease: after a crash
// it is recovered, never lost. At most Slots completions are in flight, so
// the pool holds at most twice Slots leases. It stops when a claim finds
// nothing. The end-to-end workload measures it, and so does the
// comparison with River (benchmarks/river).
type WorkerPool struct {
	Store runstate.Store
	Slots int
	// ClaimOnly ends each run at its claim: claimed without Start, not
	// completed, its slot free at once (claims alone, measured).
	ClaimOnly bool
	// OnClaim, when set, sees every claim before its slot works on it; an
	// error stops the pool.
	OnClaim func(runstate.Claim) error
}

// PoolResult is what a pool did.
type PoolResult struct {
	// Completions are the times of the completing writes, one per run
	// completed (none under ClaimOnly).
	Completions []time.Duration
	// Claims counts the runs claimed.
	Claims int
}

// Run claims and completes runs until a claim finds none, and returns
// once every slot is done.
func (p WorkerPool) Run(ctx context.Context) (PoolResult, error) {
	if p.Slots < 1 || p.Slots > runstate.MaxBatchItems {
		return PoolResult{}, runstate.InvalidArgument("slots", "is %d; want 1 to %d", p.Slots, runstate.MaxBatchItems)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	owner := runstate.Owner{Worker: "bench-pool", Incarnation: "1"}
	actor := runstate.Actor{Kind: runstate.ActorWorker, ID: owner.String()}
	free := make(chan struct{}, p.Slots)
	for range p.Slots {
		free <- struct{}{}
	}
	claimed := make(chan runstate.Claim, p.Slots)
	var mu sync.Mutex
	var res PoolResult
	// Unbuffered: a slot hands its run over only to an idle completer.
	completions := make(chan runstate.Claim)
	var slots, completers sync.WaitGroup
	for range p.Slots {
		slots.Go(func() {
			for c := range claimed {
				if !p.ClaimOnly {
					completions <- c
				}
				free <- struct{}{}
			}
		})
		completers.Go(func() {
			for c := range completions {
				t0 := time.Now()
				_, err := p.Store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: c.Run.RunID, ExpectedVersion: c.Run.Version,
					LeaseToken: c.Lease.Token, Status: string(runstate.StatusSuccess), Actor: actor, ReleaseLease: true})
				if err != nil {
					cancel(fmt.Errorf("complete run %s: %w", c.Run.RunID, err))
					continue
				}
				mu.Lock()
				res.Completions = append(res.Completions, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	n, err := p.claimUntilEmpty(ctx, owner, actor, free, claimed)
	close(claimed)
	slots.Wait()
	close(completions)
	completers.Wait()
	res.Claims = n
	return res, errors.Join(err, context.Cause(ctx))
}

// claimUntilEmpty claims, whenever slots are free, as many runs as there
// are free slots until a claim finds none, and answers how many it
// claimed.
func (p WorkerPool) claimUntilEmpty(ctx context.Context, owner runstate.Owner, actor runstate.Actor, free chan struct{},
	claimed chan<- runstate.Claim) (int, error) {
	total := 0
	for {
		select {
		case <-free:
		case <-ctx.Done():
			return total, nil // the cause is the pool's error
		}
		n := 1
		for more := true; more && n < p.Slots; {
			select {
			case <-free:
				n++
			default:
				more = false
			}
		}
		res, err := runstate.ClaimRuns(ctx, p.Store, runstate.ClaimRunsParams{Owner: owner, TTL: time.Hour, Max: n, Start: !p.ClaimOnly,
			Actor: actor, Filter: runstate.RunnableFilter{Statuses: []string{string(runstate.StatusQueued)}}})
		if err != nil {
			return total, fmt.Errorf("claim %d runs: %w", n, err)
		}
		total += len(res.Claims)
		for _, c := range res.Claims {
			if p.OnClaim != nil {
				if err := p.OnClaim(c); err != nil {
					return total, err
				}
			}
			claimed <- c
		}
		for range n - len(res.Claims) {
			free <- struct{}{}
		}
		if len(res.Claims) == 0 {
			return total, nil
		}
	}
}
