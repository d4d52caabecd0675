package perf_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/perf"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
)

var small = perf.Options{Levels: []int{1, 4}, Duration: 100 * time.Millisecond, Claims: 200, ListRuns: 1000, RecoveryRuns: 300}

func TestEveryWorkloadIsMeasured(t *testing.T) {
	ms, err := perf.Run(context.Background(), memorytest.Target(false), small)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cas-update x1", "cas-update x4", "claim-next x1", "claim-next x4", "list-page depth=0", "list-page depth=900", "recovery runs=300",
		"end-to-end-calls x1", "end-to-end x1", "end-to-end-calls x4", "end-to-end x4"}
	if len(ms) != len(want) {
		t.Fatalf("got %d measurements, want %v", len(ms), want)
	}
	for i, m := range ms {
		if m.Label() != want[i] {
			t.Errorf("measurement %d is %s, want %s", i, m.Label(), want[i])
		}
		if m.Ops <= 0 || m.PerSecond <= 0 || m.Seconds <= 0 {
			t.Errorf("%s: ops %d, %.1f/s over %.3fs", m.Label(), m.Ops, m.PerSecond, m.Seconds)
		}
		if m.Workload != perf.Recovery && (m.P50 <= 0 || m.P99 < m.P50) {
			t.Errorf("%s: p50 %v, p99 %v", m.Label(), m.P50, m.P99)
		}
		if m.DoubleClaims != 0 {
			t.Errorf("%s: %d double claims on the memory store", m.Label(), m.DoubleClaims)
		}
	}
	if got := ms[2].Ops + 0; got != small.Claims {
		t.Errorf("claim-next x1 made %d claims, want %d", got, small.Claims)
	}
	if ms[6].Ops != small.RecoveryRuns {
		t.Errorf("recovery settled %d runs, want %d", ms[6].Ops, small.RecoveryRuns)
	}
	for _, m := range ms[7:] {
		if m.Ops != small.Claims {
			t.Errorf("%s completed %d runs, want %d", m.Label(), m.Ops, small.Claims)
		}
	}
}

// A store that hands a run to two workers is caught and counted.
func TestDoubleClaimsAreCounted(t *testing.T) {
	target := memorytest.Target(false)
	inner := target.NewHarness
	target.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
		h, err := inner(ctx)
		return doubling{h}, err
	}
	opts := small
	opts.Levels = []int{2}
	ms, err := perf.Run(context.Background(), target, opts)
	if !errors.Is(err, perf.ErrDoubleClaim) {
		t.Fatalf("err = %v, want ErrDoubleClaim", err)
	}
	var found bool
	for _, m := range ms {
		if m.Workload == perf.ClaimNext {
			found = true
			if m.DoubleClaims != small.Claims/2 {
				t.Errorf("counted %d double claims, want %d (every second claim repeats the one before)", m.DoubleClaims, small.Claims/2)
			}
		}
	}
	if !found {
		t.Error("no claim-next measurement")
	}
}

// doubling's store answers every second claim-next with the claim before.
type doubling struct{ conformance.Harness }

func (d doubling) Store() runstate.RunStateStore {
	st, _ := runstate.As[runstate.Store](d.Harness.Store())
	return &doublingStore{Store: st}
}

type doublingStore struct {
	runstate.Store
	mu   sync.Mutex
	n    int
	last runstate.Claim
}

func (s *doublingStore) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n%2 == 0 {
		return s.last, nil
	}
	c, err := s.Store.ClaimNextRun(ctx, p)
	s.last = c
	return c, err
}

// A store without leases is measured on what it has; claim-next is
// reported skipped, not passed.
func TestWithoutLeasesClaimNextIsSkipped(t *testing.T) {
	target := memorytest.Target(false)
	target.Capabilities.Leases = false
	inner := target.NewHarness
	target.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
		h, err := inner(ctx)
		return noLeases{h}, err
	}
	ms, err := perf.Run(context.Background(), target, small)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Workload == perf.ClaimNext && (m.Skipped == "" || m.Ops != 0) {
			t.Errorf("%s: skipped %q with %d ops", m.Label(), m.Skipped, m.Ops)
		}
		if m.Workload == perf.Recovery && m.Ops != small.RecoveryRuns {
			t.Errorf("recovery without leases settled %d runs", m.Ops)
		}
	}
}

type noLeases struct{ conformance.Harness }

// Store hides the lease operations.
func (n noLeases) Store() runstate.RunStateStore {
	return featuretest.WithoutLeases(n.Harness.Store())
}

// A pool claims a slot's next run while the slot's last completion
// commits, and holds no more than Slots completions in flight and twice
// Slots leases; every run is completed once, after its commit.
func TestPoolClaimsWhileCompletionsCommit(t *testing.T) {
	ctx := context.Background()
	h, err := memorytest.Target(false).NewHarness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	const slots, runs = 4, 120
	for i := range runs {
		if _, err := h.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "pool", Priority: i % 3}); err != nil {
			t.Fatal(err)
		}
	}
	full, _ := runstate.As[runstate.Store](h.Store())
	st := &slowCompletions{Store: full}
	res, err := perf.WorkerPool{Store: st, Slots: slots, OnClaim: func(runstate.Claim) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.held++
		st.maxHeld = max(st.maxHeld, st.held)
		return nil
	}}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claims != runs || len(res.Completions) != runs {
		t.Errorf("%d claims and %d completions, want %d of each", res.Claims, len(res.Completions), runs)
	}
	if st.maxInFlight > slots || st.maxHeld > 2*slots {
		t.Errorf("at most %d completions in flight and %d leases held, want at most %d and %d", st.maxInFlight, st.maxHeld, slots, 2*slots)
	}
	// More leases than slots: a slot's next run was claimed while its
	// last completion was in flight.
	if st.maxHeld <= slots {
		t.Errorf("at most %d leases held at once, want more than the %d slots", st.maxHeld, slots)
	}
	page, err := h.Store().ListRuns(ctx, runstate.ListRunsParams{Statuses: []string{string(runstate.StatusSuccess)}, Limit: runs})
	if err != nil || len(page.Runs) != runs {
		t.Errorf("%d runs ended in success, want %d: %v", len(page.Runs), runs, err)
	}
}

// slowCompletions makes each completion take a while, and counts them in
// flight and the leases a pool holds (claimed, not yet completed).
type slowCompletions struct {
	runstate.Store
	mu                                   sync.Mutex
	inFlight, maxInFlight, held, maxHeld int
}

func (s *slowCompletions) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if !p.ReleaseLease { // a start, where the store has no batch claims
		return s.Store.UpdateRun(ctx, p)
	}
	s.mu.Lock()
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	run, err := s.Store.UpdateRun(ctx, p)
	s.mu.Lock()
	s.inFlight--
	s.held--
	s.mu.Unlock()
	return run, err
}
