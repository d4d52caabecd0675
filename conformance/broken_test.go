package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
)

// Broken stores: each breaks one promise of the contract on top of the
// correct memory adapter. The catalogue in mutants_test.go names the rule
// that must catch each: a check that cannot fail proves nothing.

// terminalMoves lets a terminal run "move": it swallows the rejection and
// reports the requested status from then on.
type terminalMoves struct {
	*memory.Store
	mu       sync.Mutex
	override map[string]runstate.RunStatus
}

func (s *terminalMoves) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if errors.Is(err, runstate.ErrInvalidTransition) && p.Status != "" {
		cur, gerr := s.Store.GetRun(ctx, p.RunID)
		if gerr == nil && cur.Status.Terminal() {
			s.mu.Lock()
			s.override[p.RunID] = runstate.RunStatus(p.Status)
			s.mu.Unlock()
			cur.Status = runstate.RunStatus(p.Status)
			return cur, nil
		}
	}
	return run, err
}

func (s *terminalMoves) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.override[id]; ok && err == nil {
		run.Status = st
	}
	return run, err
}

// ignoresVersion writes whatever version the caller expected.
type ignoresVersion struct{ *memory.Store }

func (s ignoresVersion) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil {
		p.ExpectedVersion = cur.Version
	}
	return s.Store.UpdateRun(ctx, p)
}

// skipsAudit loses the audit events of transitions.
type skipsAudit struct{ *memory.Store }

func (s skipsAudit) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	page.Events = slices.DeleteFunc(page.Events, func(e runstate.AuditEvent) bool { return e.Kind == runstate.AuditTransition })
	return page, err
}

// sharedLeases hands out a lease even when another owner holds one.
type sharedLeases struct{ *memory.Store }

func (s sharedLeases) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if errors.Is(err, runstate.ErrLeaseHeld) {
		run, _ := s.Store.GetRun(ctx, p.RunID)
		return runstate.Claim{Lease: runstate.Lease{RunID: p.RunID, Owner: p.Owner, Token: 1, AcquiredAt: time.Now(), ExpiresAt: time.Now().Add(p.TTL)}, Run: run}, nil
	}
	return cl, err
}

// noFencing ignores lease tokens on writes.
type noFencing struct{ *memory.Store }

func (s noFencing) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	p.LeaseToken = 0
	return s.Store.UpdateRun(ctx, p)
}

// lenientInput repairs bad input instead of refusing it.
type lenientInput struct{ *memory.Store }

func (s lenientInput) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if len(p.WorkflowName) > runstate.MaxWorkflowNameLen {
		p.WorkflowName = p.WorkflowName[:runstate.MaxWorkflowNameLen]
	}
	if len(p.Message) > runstate.MaxMessageLen {
		p.Message = p.Message[:runstate.MaxMessageLen]
	}
	return s.Store.CreateRun(ctx, p)
}

// inventsDiagnostics fills in a diagnostic the caller left out.
type inventsDiagnostics struct{ *memory.Store }

func (s inventsDiagnostics) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if runstate.RunStatus(p.Status).RequiresDiagnostic() && p.Diagnostic == nil {
		p.Diagnostic = &runstate.Diagnostic{ErrorCode: "UNKNOWN", Message: "no diagnostic given"}
	}
	return s.Store.UpdateRun(ctx, p)
}

// reusesTokens reports token 1 for every claim.
type reusesTokens struct{ *memory.Store }

func (s reusesTokens) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	cl.Lease.Token = min(cl.Lease.Token, 1)
	return cl, err
}

// ignoresContext serves calls whose context has ended.
type ignoresContext struct{ *memory.Store }

func (s ignoresContext) CreateRun(_ context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	return s.Store.CreateRun(context.Background(), p)
}

// aliasesSnapshots hands out the same snapshot value each time, so callers
// who change a returned snapshot change what the next caller sees.
type aliasesSnapshots struct {
	*memory.Store
	mu    sync.Mutex
	cache map[string]runstate.RunSnapshot
}

func (s *aliasesSnapshots) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cached, ok := s.cache[id]; ok && err == nil && cached.Version == run.Version {
		return cached, nil
	}
	s.cache[id] = run
	return run, err
}

// lowestFirst claims the lowest priority first.
type lowestFirst struct{ *memory.Store }

func (s lowestFirst) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	page, err := s.Store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: p.Filter, Limit: runstate.MaxPageLimit})
	if err != nil || len(page.Runs) == 0 {
		return s.Store.ClaimNextRun(ctx, p)
	}
	last := page.Runs[len(page.Runs)-1]
	return s.Store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: last.RunID, Owner: p.Owner, TTL: p.TTL, Statuses: p.Filter.Statuses})
}

// largestIDOnTies breaks ties of priority and created_at by the largest
// run_id instead of the smallest.
type largestIDOnTies struct{ *memory.Store }

func (s largestIDOnTies) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	page, err := s.Store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: p.Filter, Limit: runstate.MaxPageLimit})
	if err != nil || len(page.Runs) == 0 {
		return s.Store.ClaimNextRun(ctx, p)
	}
	pick := page.Runs[0]
	for _, r := range page.Runs[1:] {
		if r.Priority == pick.Priority && r.CreatedAt.Equal(pick.CreatedAt) && r.RunID > pick.RunID {
			pick = r
		}
	}
	return s.Store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: pick.RunID, Owner: p.Owner, TTL: p.TTL, Statuses: p.Filter.Statuses})
}

// pageSkipper drops the first run of every page after the first.
type pageSkipper struct{ *memory.Store }

func (s pageSkipper) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	page, err := s.Store.ListRuns(ctx, p)
	if p.Cursor != "" && len(page.Runs) > 0 {
		page.Runs = page.Runs[1:]
	}
	return page, err
}

// interruptsAll lists terminal runs as non-terminal and lets them be
// claimed, so recovery acts on runs it must never touch.
type interruptsAll struct{ *memory.Store }

func (s interruptsAll) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	p.Statuses = nil // sees terminal runs too
	return s.Store.ListRuns(ctx, p)
}

func (s interruptsAll) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	run, err := s.Store.GetRun(ctx, p.RunID)
	if err == nil && run.Status.Terminal() {
		// Pretends terminal runs can be claimed, so recovery acts on them.
		return runstate.Claim{Lease: runstate.Lease{RunID: p.RunID, Owner: p.Owner, Token: 99}, Run: run}, nil
	}
	return s.Store.ClaimRun(ctx, p)
}

// brokenTarget wraps a fresh memory store per check.
func brokenTarget(wrap func(*memory.Store) runstate.RunStateStore) conformance.Target {
	return mutantTarget(func(m *memory.Store, _ *conformance.ManualClock) runstate.RunStateStore { return wrap(m) })
}

// mutantTarget wraps a fresh memory store per check; wrap also gets the
// store's clock.
func mutantTarget(wrap func(*memory.Store, *conformance.ManualClock) runstate.RunStateStore) conformance.Target {
	return conformance.Target{
		Name:         "broken",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			inner, err := memory.Open(ctx, memory.Options{Clock: clock})
			if err != nil {
				return nil, err
			}
			return &wrapped{store: wrap(inner, clock), inner: inner, clock: clock}, nil
		},
	}
}

type wrapped struct {
	store runstate.RunStateStore
	inner *memory.Store
	clock *conformance.ManualClock
}

func (w *wrapped) Store() runstate.RunStateStore                              { return w.store }
func (w *wrapped) OpenHandle(context.Context) (runstate.RunStateStore, error) { return w.store, nil }
func (w *wrapped) Advance(d time.Duration)                                    { w.clock.Advance(d) }
func (w *wrapped) Close(context.Context) error                                { return w.inner.Close() }

// The correct adapter passes every rule these wrappers break, so the
// failures above come from the wrappers, not from the checks.
func TestUnbrokenStorePassesTheSameRules(t *testing.T) {
	// The FAULT rules have a target of their own: faultsim_test.go.
	rules, err := conformance.Select(nil, []string{"FAULT"})
	if err != nil {
		t.Fatal(err)
	}
	results := conformance.RunRules(context.Background(), brokenTarget(func(m *memory.Store) runstate.RunStateStore { return m }), rules, nil)
	for _, res := range results {
		if res.Outcome != conformance.Pass {
			t.Errorf("%s: %s %s %v", res.Rule.ID, res.Outcome, res.Detail, res.Failures)
		}
	}
}

func TestCapabilities(t *testing.T) {
	leaseRules, _ := conformance.Select([]string{"LEASE"}, nil)
	t.Run("undeclared capability skips, never passes", func(t *testing.T) {
		target := brokenTarget(func(m *memory.Store) runstate.RunStateStore { return featuretest.WithoutLeases(m) })
		target.Capabilities.Leases = false
		for _, res := range conformance.RunRules(context.Background(), target, leaseRules, nil) {
			if res.Outcome != conformance.Skip {
				t.Errorf("%s: outcome %s, want skip", res.Rule.ID, res.Outcome)
			}
		}
		// Rules that use leases only where present still run and pass.
		rec, _ := conformance.Select([]string{"REC-001", "REC-007", "REC-009", "REC-010", "RUN-004", "BAD-001", "CTX-001"}, nil)
		for _, res := range conformance.RunRules(context.Background(), target, rec, nil) {
			if res.Outcome != conformance.Pass {
				t.Errorf("%s without leases: %s %v", res.Rule.ID, res.Outcome, res.Failures)
			}
		}
	})
	t.Run("a store without the batch interfaces skips the batch rules", func(t *testing.T) {
		batchRules, _ := conformance.Select([]string{"BATCH"}, nil)
		target := brokenTarget(func(m *memory.Store) runstate.RunStateStore { return featuretest.WithoutBatches(m) })
		for _, res := range conformance.RunRules(context.Background(), target, batchRules, nil) {
			if res.Outcome != conformance.Skip || !strings.Contains(res.Detail, "runstate.Batch") {
				t.Errorf("%s: outcome %s (%s), want a skip naming the interface", res.Rule.ID, res.Outcome, res.Detail)
			}
		}
	})
	t.Run("declared but absent capability fails", func(t *testing.T) {
		target := brokenTarget(func(m *memory.Store) runstate.RunStateStore { return featuretest.WithoutLeases(m) })
		for _, res := range conformance.RunRules(context.Background(), target, leaseRules[:3], nil) {
			if res.Outcome != conformance.Fail {
				t.Errorf("%s: outcome %s, want fail", res.Rule.ID, res.Outcome)
			}
		}
	})
	t.Run("a harness that cannot make a store is an error, not a failure", func(t *testing.T) {
		target := brokenTarget(nil)
		target.NewHarness = func(context.Context) (conformance.Harness, error) { return nil, errors.New("database unreachable") }
		res := conformance.RunRule(context.Background(), target, conformance.Rules()[0])
		if res.Outcome != conformance.Error {
			t.Errorf("outcome %s, want error", res.Outcome)
		}
	})
}

// partialCreates creates a batch one run at a time, as runstate.CreateRuns
// does for a store without BatchCreator, yet claims to be one: the runs
// before a refused item stay.
type partialCreates struct{ *memory.Store }

func (s partialCreates) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return runstate.CreateRuns(ctx, featuretest.WithoutBatches(s.Store), p)
}

// reordersCreates returns a batch's runs by run id, not in item order.
type reordersCreates struct{ *memory.Store }

func (s reordersCreates) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	res, err := s.Store.CreateRuns(ctx, p)
	slices.SortFunc(res.Runs, func(a, b runstate.RunSnapshot) int { return strings.Compare(a.RunID, b.RunID) })
	return res, err
}

// trimsBatches takes an empty batch as nothing to do, and cuts a batch
// over the limit to its first MaxBatchItems runs instead of refusing it.
type trimsBatches struct{ *memory.Store }

func (s trimsBatches) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	if len(p.Runs) == 0 {
		return runstate.CreateRunsResult{}, nil
	}
	p.Runs = p.Runs[:min(len(p.Runs), runstate.MaxBatchItems)]
	return s.Store.CreateRuns(ctx, p)
}

// blockingUpdates applies a batch only when every item would apply, and
// otherwise refuses every item with the first refusal it foresees.
type blockingUpdates struct{ *memory.Store }

func (s blockingUpdates) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	for _, u := range p.Updates {
		cur, err := s.Store.GetRun(ctx, u.RunID)
		if err == nil && cur.Version != u.ExpectedVersion {
			err = runstate.ErrVersionConflict
		}
		if err != nil {
			out := runstate.UpdateRunsResult{Items: make([]runstate.UpdateRunsItem, len(p.Updates))}
			for i := range out.Items {
				out.Items[i].Err = err
			}
			return out, nil
		}
	}
	return s.Store.UpdateRuns(ctx, p)
}

// reissuesBatchClaims hands out, with each batch, the first claim of the batch
// before it again: a cached answer given to a second owner.
type reissuesBatchClaims struct {
	*memory.Store
	mu   sync.Mutex
	last *runstate.Claim
}

func (s *reissuesBatchClaims) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	res, err := s.Store.ClaimRuns(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(res.Claims) == 0 {
		return res, err
	}
	first := res.Claims[0]
	if s.last != nil {
		res.Claims = append(res.Claims, *s.last)
	}
	s.last = &first
	return res, err
}

// claimsWithoutStart checks a claim as asked but never starts its runs.
type claimsWithoutStart struct{ *memory.Store }

func (s claimsWithoutStart) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	if err := p.Validate(); err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	p.Start = false
	return s.Store.ClaimRuns(ctx, p)
}

// skipsBadItems creates the valid items of a batch and drops the others.
type skipsBadItems struct{ *memory.Store }

func (s skipsBadItems) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	var out runstate.CreateRunsResult
	for _, item := range p.Runs {
		if run, err := s.Store.CreateRun(ctx, item); err == nil {
			out.Runs = append(out.Runs, run)
		}
	}
	return out, nil
}

// updatesTwice applies a batch item by item without looking for a run
// named twice.
type updatesTwice struct{ *memory.Store }

func (s updatesTwice) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	out := runstate.UpdateRunsResult{Items: make([]runstate.UpdateRunsItem, len(p.Updates))}
	for i, u := range p.Updates {
		out.Items[i].Run, out.Items[i].Err = s.Store.UpdateRun(ctx, u)
	}
	return out, nil
}
