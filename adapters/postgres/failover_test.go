package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/adapters/postgres/pgtest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// The failover rules (FAULT-009…012) on a primary with a synchronous
// standby of this test's own: each failover kills the primary with
// SIGKILL after stalling its standby's stream, and promotes the standby.
func TestConformanceAcrossFailovers(t *testing.T) {
	pair := sqltest.StartPostgresPair(t, sqltest.PairOptions{Synchronous: true})
	conformance.Run(t, pgtest.TargetFailingOver(pair.Scratch, true, pair), "FAULT")
	logFailovers(t, pair)
}

// Twenty failovers in a row on the synchronous pair, made by one fault
// of FAULT-009 while its writers write: no acknowledged write lost. Its
// claimers drain FAULT-011's pool within a failover or two, so workers of
// the test's own claim from a pool of their own through all twenty, each
// on a handle of its own: no run is acknowledged to two of them, and each
// acknowledged claim is its run's lease afterwards.
func TestFailoverRulesHoldOverTwentyFailovers(t *testing.T) {
	pair := sqltest.StartPostgresPair(t, sqltest.PairOptions{Synchronous: true, PerFault: 20})
	rules, err := conformance.Select([]string{"FAULT-009"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	claims := startFailoverClaimers(t, pair)
	target := pgtest.TargetFailingOver(pair.Scratch, true, pair)
	// Twenty failovers, each with a standby rebuilt after it, take about
	// 140 s on a slow machine: more than a check's default 2 minutes.
	target.CheckTimeout = 5 * time.Minute
	for _, res := range conformance.RunRules(context.Background(), target, rules, nil) {
		if res.Outcome != conformance.Pass {
			t.Errorf("%s: %s %s %v", res.Rule.ID, res.Outcome, res.Detail, res.Failures)
			continue
		}
		t.Logf("%s %v: %s", res.Rule.ID, res.Duration.Round(time.Millisecond), res.Detail)
	}
	claims.stopAndCheck(t)
	if n := len(pair.Timings().Failovers); n < 20 {
		t.Errorf("%d failovers, want at least 20", n)
	}
	logFailovers(t, pair)
}

// failoverClaimers claim runs through failovers, each worker on a store
// handle of its own, and keep what each acknowledged claim returned.
type failoverClaimers struct {
	first   *postgres.Store // the handle that made the schema
	stop    context.CancelFunc
	done    sync.WaitGroup
	mu      sync.Mutex
	claims  map[string][]runstate.Lease
	failed  int
	unknown []error // errors other than UNAVAILABLE or a deadline
}

// startFailoverClaimers fills a pool of runs on pair and starts four
// claimers on it, paced, so that the pool lasts longer than twenty
// failovers.
func startFailoverClaimers(t *testing.T, pair *sqltest.PostgresPair) *failoverClaimers {
	const workers, poolSize = 4, 2000
	ctx := context.Background()
	schema := pair.Scratch.NewSchemaName()
	open := func(first bool) *postgres.Store {
		s, err := postgres.Open(ctx, postgres.Options{DSN: pair.Scratch.DSN(), Schema: schema, ScratchSchema: first, MaxOpenConns: 4, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c := &failoverClaimers{first: open(true), claims: map[string][]runstate.Lease{}}
	t.Cleanup(func() { c.first.Close() })
	for range poolSize / runstate.MaxBatchItems {
		batch := make([]runstate.CreateRunParams, runstate.MaxBatchItems)
		for i := range batch {
			batch[i] = runstate.CreateRunParams{WorkflowName: "claimed-through-failovers"}
		}
		if _, err := runstate.CreateRuns(ctx, c.first, runstate.CreateRunsParams{Runs: batch}); err != nil {
			t.Fatal(err)
		}
	}
	run, stop := context.WithCancel(ctx)
	c.stop = stop
	for w := range workers {
		handle := open(false)
		t.Cleanup(func() { handle.Close() })
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			c.claimUntil(run, handle, runstate.Owner{Worker: fmt.Sprintf("worker-%d", w), Incarnation: "i1"})
		}()
	}
	return c
}

// claimUntil claims with a short deadline, as a worker would, until ctx ends.
func (c *failoverClaimers) claimUntil(ctx context.Context, handle *postgres.Store, me runstate.Owner) {
	for ctx.Err() == nil {
		call, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		cl, err := handle.ClaimNextRun(call, runstate.ClaimNextParams{Owner: me, TTL: 10 * time.Minute})
		cancel()
		c.mu.Lock()
		switch {
		case err == nil:
			c.claims[cl.Run.RunID] = append(c.claims[cl.Run.RunID], cl.Lease)
		case errors.Is(err, runstate.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			c.failed++
		default:
			c.unknown = append(c.unknown, err)
		}
		c.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// stopAndCheck stops the claimers and checks that no run was acknowledged
// to two of them and that each acknowledged claim is its run's lease.
func (c *failoverClaimers) stopAndCheck(t *testing.T) {
	c.stop()
	c.done.Wait()
	ctx := context.Background()
	for id, got := range c.claims {
		if len(got) > 1 {
			t.Errorf("run %s claimed %d times across failovers: %v", id, len(got), got)
			continue
		}
		lease, err := c.first.GetLease(ctx, id)
		if err != nil {
			t.Fatalf("GetLease(%s): %v", id, err)
		}
		if lease.Token != got[0].Token || lease.Owner != got[0].Owner {
			t.Errorf("run %s: acknowledged claim %+v, lease now %+v", id, got[0], lease)
		}
	}
	for _, err := range c.unknown {
		t.Errorf("a claim across failovers failed otherwise than UNAVAILABLE or its deadline: %v", err)
	}
	if len(c.claims) == 0 {
		t.Error("no claim acknowledged across the failovers")
	}
	t.Logf("claimers through the failovers: %d claims acknowledged, each its run's lease, none twice; %d failed with UNAVAILABLE or their deadline", len(c.claims), c.failed)
}

// With asynchronous replication the same failover loses writes the
// primary acknowledged before its standby received them, and the kit
// sees it: FAULT-009 fails, naming the lost writes.
func TestAsyncFailoverIsCaughtLosingAcknowledgedWrites(t *testing.T) {
	pair := sqltest.StartPostgresPair(t, sqltest.PairOptions{Synchronous: false})
	rules, err := conformance.Select([]string{"FAULT-009"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := conformance.RunRule(context.Background(), pgtest.TargetFailingOver(pair.Scratch, true, pair), rules[0])
	lost := slices.DeleteFunc(slices.Clone(res.Failures), func(f conformance.Failure) bool {
		return !strings.Contains(f.Expected, "acknowledged")
	})
	if res.Outcome != conformance.Fail || len(lost) == 0 {
		t.Fatalf("FAULT-009 on an asynchronous standby: %s %s %v, want it failed on acknowledged writes lost", res.Outcome, res.Detail, res.Failures)
	}
	// One failure per acknowledged write whose audit event is gone.
	gone := 0
	for _, f := range lost {
		if strings.Contains(f.Expected, "audit trail to hold the event of its acknowledged write") {
			gone++
		}
	}
	t.Logf("FAULT-009 failed as it must: %d acknowledged writes lost (%d failures in all), the first failure: %s", gone, len(lost), lost[0])
	logFailovers(t, pair)
}

func logFailovers(t *testing.T, pair *sqltest.PostgresPair) {
	t.Helper()
	mean := func(ds []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(max(len(ds), 1))
	}
	tm := pair.Timings()
	t.Logf("%d failovers (stall, kill, promotion): mean %v, slowest %v; %d standbys rebuilt: mean %v, slowest %v",
		len(tm.Failovers), mean(tm.Failovers).Round(time.Millisecond), slices.Max(append(tm.Failovers, 0)).Round(time.Millisecond),
		len(tm.Rebuilds), mean(tm.Rebuilds).Round(time.Millisecond), slices.Max(append(tm.Rebuilds, 0)).Round(time.Millisecond))
}
