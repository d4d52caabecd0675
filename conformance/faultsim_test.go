package conformance_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
)

// A simulated backend for the FAULT rules' own tests: the memory store
// behind a "link" that a harness partitions, resets, delays and restarts.
// A call crosses the link twice: its request (lost in a partition, refused
// while the backend is down) and its answer (lost when the connection is
// cut or partitioned after the backend applied the call, so that the
// caller cannot know the outcome, as over a real network).

// simLink is the path between the handles and the memory store.
type simLink struct {
	mu          sync.Mutex
	partitioned bool
	down        bool
	delay       time.Duration
	healed      chan struct{} // closed when a partition heals
	resets      int           // counts connection cuts
	// cutNext is how many calls still to be cut after the backend applied
	// them: a reset cuts the calls in flight and those about to use the
	// pool's connections it cut, whose answers are lost.
	cutNext int
}

func newSimLink() *simLink { return &simLink{healed: make(chan struct{})} }

// serverTime is how long the simulated backend takes per call, so that a
// reset meets calls in flight.
const serverTime = 2 * time.Millisecond

// cross carries one message: it waits out a partition (until it heals or
// ctx ends), fails while the backend is down, and takes half the delay.
func (l *simLink) cross(ctx context.Context) error {
	for {
		l.mu.Lock()
		partitioned, down, healed, delay := l.partitioned, l.down, l.healed, l.delay
		l.mu.Unlock()
		if down {
			return runstate.Unavailable("connection refused: the backend is down", nil)
		}
		if !partitioned {
			if delay > 0 {
				select {
				case <-time.After(delay / 2):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
		select {
		case <-healed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *simLink) generation() int { l.mu.Lock(); defer l.mu.Unlock(); return l.resets }

func (l *simLink) set(change func()) { l.mu.Lock(); defer l.mu.Unlock(); change() }

// simCall makes f on the backend across the link.
func simCall[T any](l *simLink, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := l.cross(ctx); err != nil {
		return zero, err
	}
	gen := l.generation()
	// The backend works on, whatever the caller's context does meanwhile.
	time.Sleep(serverTime)
	out, err := f(context.WithoutCancel(ctx))
	l.mu.Lock()
	cut := l.resets != gen || l.cutNext > 0
	if l.resets == gen && l.cutNext > 0 {
		l.cutNext--
	}
	l.mu.Unlock()
	if cut {
		return zero, runstate.Unavailable("connection reset by peer", nil)
	}
	if lerr := l.cross(ctx); lerr != nil {
		return zero, lerr
	}
	return out, err
}

// simStore is a handle on the memory store across the link.
type simStore struct {
	m    *memory.Store
	link *simLink
}

var _ runstate.Store = simStore{}
var _ runstate.LeaseReader = simStore{}

func (s simStore) Features() runstate.Features { return runstate.FeaturesOf(s) }

func (s simStore) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.RunSnapshot, error) { return s.m.CreateRun(ctx, p) })
}

func (s simStore) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.RunSnapshot, error) { return s.m.UpdateRun(ctx, p) })
}

func (s simStore) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.RunSnapshot, error) { return s.m.GetRun(ctx, id) })
}

func (s simStore) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.RunPage, error) { return s.m.ListRuns(ctx, p) })
}

func (s simStore) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.AuditPage, error) { return s.m.ListAuditEvents(ctx, p) })
}

func (s simStore) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.Claim, error) { return s.m.ClaimRun(ctx, p) })
}

func (s simStore) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.Claim, error) { return s.m.ClaimNextRun(ctx, p) })
}

func (s simStore) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.Lease, error) { return s.m.RenewLease(ctx, p) })
}

func (s simStore) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	_, err := simCall(s.link, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.m.ReleaseLease(ctx, p) })
	return err
}

func (s simStore) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.RunPage, error) { return s.m.ListRunnableRuns(ctx, p) })
}

func (s simStore) GetLease(ctx context.Context, id string) (runstate.Lease, error) {
	return simCall(s.link, ctx, func(ctx context.Context) (runstate.Lease, error) { return s.m.GetLease(ctx, id) })
}

// simHarness declares every fault and causes it on the link.
type simHarness struct {
	store runstate.RunStateStore
	m     *memory.Store
	link  *simLink
	// needsEveryMember: the backend stops serving while any member is
	// down, as one that waits for every replica would (broken).
	needsEveryMember bool
}

// simElection is how long the simulated backend is down when its leader
// is lost.
const simElection = 200 * time.Millisecond

var _ conformance.FaultInjector = (*simHarness)(nil)

func (h *simHarness) Store() runstate.RunStateStore                              { return h.store }
func (h *simHarness) OpenHandle(context.Context) (runstate.RunStateStore, error) { return h.store, nil }
func (h *simHarness) Advance(time.Duration)                                      {}
func (h *simHarness) Close(context.Context) error                                { return h.m.Close() }

func (h *simHarness) StartFault(_ context.Context, p conformance.FaultParams) error {
	switch p.Fault {
	case conformance.FaultPartition:
		h.link.set(func() { h.link.partitioned = true })
	case conformance.FaultReset:
		h.link.set(func() { h.link.resets++; h.link.cutNext = 4 })
	case conformance.FaultDelay:
		h.link.set(func() { h.link.delay = p.Delay })
	case conformance.FaultRestart:
		// The backend's committed data outlives it: the memory store stays.
		h.link.set(func() { h.link.down = true; h.link.resets++ })
	case conformance.FaultMemberRestart, conformance.FaultLeaderRestart:
		// A replicated backend: a quorum serves on, after an election when
		// the leader was lost.
		if h.needsEveryMember || p.Fault == conformance.FaultLeaderRestart {
			h.link.set(func() { h.link.down = true; h.link.resets++ })
		}
		if !h.needsEveryMember && p.Fault == conformance.FaultLeaderRestart {
			time.AfterFunc(simElection, func() { h.link.set(func() { h.link.down = false }) })
		}
	case conformance.FaultFailover:
		// The standby holds every acknowledged write (the memory store
		// stays): the backend is down until it is promoted.
		h.link.set(func() { h.link.down = true; h.link.resets++ })
		time.AfterFunc(simElection, func() { h.link.set(func() { h.link.down = false }) })
	default:
		return errors.New("unknown fault " + string(p.Fault))
	}
	return nil
}

func (h *simHarness) EndFault(context.Context) error {
	h.link.set(func() {
		if h.link.partitioned {
			close(h.link.healed)
			h.link.healed = make(chan struct{})
		}
		h.link.partitioned, h.link.down, h.link.delay = false, false, 0
	})
	return nil
}

var allFaults = []conformance.Fault{conformance.FaultPartition, conformance.FaultReset, conformance.FaultDelay, conformance.FaultRestart,
	conformance.FaultMemberRestart, conformance.FaultLeaderRestart, conformance.FaultFailover}

// faultTarget serves a fresh memory store across a simulated link per
// check; wrap may break the handle the checks use.
func faultTarget(wrap func(s simStore) runstate.RunStateStore) conformance.Target {
	return conformance.Target{
		Name:         "simulated faults",
		Capabilities: conformance.Capabilities{Leases: true, Faults: allFaults},
		LeaseTTL:     300 * time.Millisecond,
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			m, err := memory.Open(ctx, memory.Options{})
			if err != nil {
				return nil, err
			}
			s := simStore{m: m, link: newSimLink()}
			return &simHarness{store: wrap(s), m: m, link: s.link}, nil
		},
	}
}

// The correct store across the simulated link passes every FAULT rule,
// under every fault, so the mutants' failures come from their faults.
func TestSimulatedFaultsPassTheFaultRules(t *testing.T) {
	rules, err := conformance.Select([]string{"FAULT"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	target := faultTarget(func(s simStore) runstate.RunStateStore { return s })
	for _, res := range conformance.RunRules(context.Background(), target, rules, nil) {
		if res.Outcome != conformance.Pass {
			t.Errorf("%s: %s %s %v", res.Rule.ID, res.Outcome, res.Detail, res.Failures)
			continue
		}
		t.Logf("%s %v: %s", res.Rule.ID, res.Duration.Round(time.Millisecond), res.Detail)
	}
}

// Without the capability the FAULT rules are skipped, naming it.
func TestFaultRulesNeedTheCapability(t *testing.T) {
	rules, _ := conformance.Select([]string{"FAULT"}, nil)
	target := faultTarget(func(s simStore) runstate.RunStateStore { return s })
	target.Capabilities.Faults = []conformance.Fault{conformance.FaultReset}
	for _, res := range conformance.RunRules(context.Background(), target, rules, nil) {
		needsReset := !slices.Contains([]string{"FAULT-001", "FAULT-002", "FAULT-007", "FAULT-008", "FAULT-009", "FAULT-010", "FAULT-011", "FAULT-012"}, res.Rule.ID)
		switch {
		case needsReset && res.Outcome != conformance.Pass:
			t.Errorf("%s with reset declared: %s %s", res.Rule.ID, res.Outcome, res.Detail)
		case !needsReset && (res.Outcome != conformance.Skip || res.Detail == ""):
			t.Errorf("%s without its fault: %s %q, want a skip naming the capability", res.Rule.ID, res.Outcome, res.Detail)
		}
	}
}

// ---- Broken across faults: each fails the FAULT rule that names its fault ----

// hangsPastDeadline waits for the backend however long the caller's
// deadline is.
type hangsPastDeadline struct{ simStore }

func (s hangsPastDeadline) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	return s.simStore.GetRun(context.WithoutCancel(ctx), id)
}

// acksBeforeCommit answers a write at once, from what it knows, and sends
// it to the backend afterwards: a write the fault stops is lost after
// being acknowledged.
type acksBeforeCommit struct{ simStore }

func (s acksBeforeCommit) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	cur, err := s.m.GetRun(ctx, p.RunID)
	st, perr := runstate.ParseRunStatus(p.Status)
	if err != nil || perr != nil || cur.Version != p.ExpectedVersion || !runstate.CanTransition(cur.Status, st) {
		return s.simStore.UpdateRun(ctx, p)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		s.simStore.UpdateRun(ctx, p)
	}()
	cur.Status, cur.Version = st, cur.Version+1
	return cur, nil
}

// retriesAndDoubles retries a write whose answer a reset lost by writing
// its audit event again: the write was applied, and now has two events.
type retriesAndDoubles struct {
	simStore
	doubled *overrides[[]runstate.AuditEvent]
}

func (s retriesAndDoubles) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	out, err := s.simStore.UpdateRun(ctx, p)
	if !errors.Is(err, runstate.ErrUnavailable) {
		return out, err
	}
	cur, gerr := s.m.GetRun(ctx, p.RunID)
	if gerr != nil || cur.Version != p.ExpectedVersion+1 {
		return out, err
	}
	page, _ := s.m.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: p.RunID, Limit: runstate.MaxPageLimit})
	again, _ := s.doubled.get(p.RunID)
	s.doubled.set(p.RunID, append(again, page.Events[len(page.Events)-1]))
	return cur, nil
}

func (s retriesAndDoubles) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.simStore.ListAuditEvents(ctx, p)
	again, _ := s.doubled.get(p.RunID)
	if err != nil || page.More || len(again) == 0 || len(page.Events) == 0 {
		return page, err
	}
	seq := page.Events[len(page.Events)-1].Seq
	for _, e := range again {
		seq++
		e.Seq = seq
		page.Events = append(page.Events, e)
	}
	return page, nil
}

// waitsOutRestarts retries a read while the backend is down, past the
// caller's deadline.
type waitsOutRestarts struct{ simStore }

func (s waitsOutRestarts) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	for {
		run, err := s.simStore.GetRun(context.WithoutCancel(ctx), id)
		if !errors.Is(err, runstate.ErrUnavailable) {
			return run, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replaysClaims answers the first claim-next after a connection was cut
// with the claim it made last, as a retry cache would, to another owner.
type replaysClaims struct {
	simStore
	mu   *sync.Mutex
	last *runstate.Claim
	seen *int // the link's generation at the last claim
}

func (s replaysClaims) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	s.mu.Lock()
	if gen := s.link.generation(); gen != *s.seen && s.last.Run.RunID != "" {
		*s.seen = gen
		replay := *s.last
		s.mu.Unlock()
		return replay, nil
	}
	s.mu.Unlock()
	cl, err := s.simStore.ClaimNextRun(ctx, p)
	if err == nil {
		s.mu.Lock()
		*s.last, *s.seen = cl, s.link.generation()
		s.mu.Unlock()
	}
	return cl, err
}

// brokenAfterReset keeps failing once a connection of its was cut, until
// it is reopened.
type brokenAfterReset struct{ simStore }

func (s brokenAfterReset) broken() error {
	if s.link.generation() > 0 {
		return runstate.Unavailable("the connection was reset: reopen the store", nil)
	}
	return nil
}

func (s brokenAfterReset) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	if err := s.broken(); err != nil {
		return runstate.RunSnapshot{}, err
	}
	return s.simStore.GetRun(ctx, id)
}

func (s brokenAfterReset) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if err := s.broken(); err != nil {
		return runstate.RunSnapshot{}, err
	}
	return s.simStore.UpdateRun(ctx, p)
}

// slowWriteIgnoresDeadline finishes a write however long the link takes.
type slowWriteIgnoresDeadline struct{ simStore }

func (s slowWriteIgnoresDeadline) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return s.simStore.UpdateRun(context.WithoutCancel(ctx), p)
}

// conflictsOnCutOff answers every other write cut off by a fault
// VERSION_CONFLICT, as if an earlier write had moved the run, though none
// did.
type conflictsOnCutOff struct {
	simStore
	n *atomic.Int64
}

func (s conflictsOnCutOff) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.simStore.UpdateRun(ctx, p)
	cutOff := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runstate.ErrUnavailable)
	if cutOff && s.n.Add(1)%2 == 0 {
		return run, &runstate.Error{Code: runstate.CodeVersionConflict, RunID: p.RunID, Message: "the run has moved on"}
	}
	return run, err
}

// answersFromCache keeps every run it has read and answers a read from
// that copy when the backend cannot be reached: a cache that serves
// stale state through an outage instead of saying the store is down.
type answersFromCache struct {
	simStore
	cache *overrides[runstate.RunSnapshot]
}

func (s answersFromCache) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.simStore.GetRun(ctx, id)
	if err == nil {
		s.cache.set(id, run)
		return run, nil
	}
	if cached, ok := s.cache.get(id); ok {
		return cached, nil
	}
	return run, err
}

func faultMutants() []targetMutant {
	return []targetMutant{
		{"FAULT-001", "a read answered from a cache during a partition", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore {
				return answersFromCache{s, &overrides[runstate.RunSnapshot]{}}
			})
		}},
		{"FAULT-001", "a read that waits out a partition past its deadline", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return hangsPastDeadline{s} })
		}},
		{"FAULT-002", "a read that waits for a restarting backend past its deadline", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return waitsOutRestarts{s} })
		}},
		{"FAULT-005", "a claim replayed to another owner after a reset", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore {
				return replaysClaims{simStore: s, mu: &sync.Mutex{}, last: &runstate.Claim{}, seen: new(int)}
			})
		}},
		{"FAULT-006", "a handle that stays broken after a reset until reopened", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return brokenAfterReset{s} })
		}},
		{"FAULT-008", "a backend that serves only with every member up", func() conformance.Target {
			t := faultTarget(func(s simStore) runstate.RunStateStore { return s })
			newHarness := t.NewHarness
			t.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
				h, err := newHarness(ctx)
				if err == nil {
					h.(*simHarness).needsEveryMember = true
				}
				return h, err
			}
			return t
		}},
		{"FAULT-007", "a write over a slow link that ignores its deadline", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return slowWriteIgnoresDeadline{s} })
		}},
		{"FAULT-003", "a write acknowledged before it reaches the backend", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return acksBeforeCommit{s} })
		}},
		{"FAULT-004", "a write cut off answered VERSION_CONFLICT, applied or not", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return conflictsOnCutOff{s, new(atomic.Int64)} })
		}},
		{"FAULT-004", "a write retried after a reset, its audit event written twice", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore {
				return retriesAndDoubles{s, &overrides[[]runstate.AuditEvent]{}}
			})
		}},
		{"FAULT-009", "a write acknowledged before it reaches the backend", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return acksBeforeCommit{s} })
		}},
		{"FAULT-010", "a write cut off answered VERSION_CONFLICT, applied or not", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return conflictsOnCutOff{s, new(atomic.Int64)} })
		}},
		{"FAULT-011", "a claim replayed to another owner after a failover", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore {
				return replaysClaims{simStore: s, mu: &sync.Mutex{}, last: &runstate.Claim{}, seen: new(int)}
			})
		}},
		{"FAULT-012", "a handle that stays broken after a failover until reopened", func() conformance.Target {
			return faultTarget(func(s simStore) runstate.RunStateStore { return brokenAfterReset{s} })
		}},
	}
}
