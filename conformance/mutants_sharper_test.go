package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
)

// Single-fault stores for the classes of mistake a check once exercised
// too thinly (a filter field that every run matched, a clock that never
// moved since the run's last write, a limit never used at its maximum),
// and for the recovery rules.

// ---- filters ----

type runnableIgnoresWorkflow struct{ base }

func (s runnableIgnoresWorkflow) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	p.Filter.WorkflowName = ""
	return s.Store.ListRunnableRuns(ctx, p)
}

type claimNextIgnoresWorkflow struct{ base }

func (s claimNextIgnoresWorkflow) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	p.Filter.WorkflowName = ""
	return s.Store.ClaimNextRun(ctx, p)
}

type claimNextIgnoresLabels struct{ base }

func (s claimNextIgnoresLabels) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	p.Filter.Labels = nil
	return s.Store.ClaimNextRun(ctx, p)
}

type claimRunsIgnoresFilter struct{ base }

func (s claimRunsIgnoresFilter) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	p.Filter.WorkflowName, p.Filter.Labels = "", nil
	return s.Store.ClaimRuns(ctx, p)
}

// ---- times taken from the run's last write, not the clock ----

// claimsTimedByLastWrite reports a lease as acquired at the run's
// updated_at, as a store that takes "now" from the row it reads would.
type claimsTimedByLastWrite struct{ base }

func (s claimsTimedByLastWrite) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if err == nil {
		cl.Lease.AcquiredAt, cl.Lease.ExpiresAt = cl.Run.UpdatedAt, cl.Run.UpdatedAt.Add(p.TTL)
	}
	return cl, err
}

// rejectedEventsTimedByLastWrite stamps a rejected event with the time of
// the event before it: the run's last accepted write.
type rejectedEventsTimedByLastWrite struct{ base }

func (s rejectedEventsTimedByLastWrite) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	for i := 1; i < len(page.Events); i++ {
		if page.Events[i].Kind == runstate.AuditRejected {
			page.Events[i].Time = page.Events[i-1].Time
		}
	}
	return page, err
}

// ---- leases ----

// releasedTokensFenceLate accepts a write with a released token until the
// run is claimed again, as a store that marks a release only by the next
// claim's token would.
type releasedTokensFenceLate struct {
	base
	released overrides[int64]
}

func (s *releasedTokensFenceLate) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	err := s.Store.ReleaseLease(ctx, p)
	if err == nil {
		s.released.set(p.RunID, p.Token)
	}
	return err
}

func (s *releasedTokensFenceLate) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if err == nil {
		s.released.set(p.RunID, 0)
	}
	return cl, err
}

func (s *releasedTokensFenceLate) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if tok, ok := s.released.get(p.RunID); ok && tok != 0 && tok == p.LeaseToken {
		p.LeaseToken = 0
	}
	return s.Store.UpdateRun(ctx, p)
}

// ---- limits ----

// largestPageRefused refuses a page size of exactly MaxPageLimit in the
// audit and runnable listings, as a check with >= instead of > would.
type largestPageRefused struct{ base }

func (s largestPageRefused) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	if p.Limit == runstate.MaxPageLimit {
		return runstate.AuditPage{}, runstate.InvalidArgument("limit", "must be below %d", runstate.MaxPageLimit)
	}
	return s.Store.ListAuditEvents(ctx, p)
}

func (s largestPageRefused) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	if p.Limit == runstate.MaxPageLimit {
		return runstate.RunPage{}, runstate.InvalidArgument("limit", "must be below %d", runstate.MaxPageLimit)
	}
	return s.Store.ListRunnableRuns(ctx, p)
}

// ---- steps ----

// newStepsStartAnywhere adds a step or host the run does not have yet in
// whatever status the patch names, walking it through running itself;
// steps and hosts it has follow the table.
type newStepsStartAnywhere struct{ base }

func (s newStepsStartAnywhere) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if !errors.Is(err, runstate.ErrInvalidTransition) || len(p.Steps) != 1 || p.Status != "" {
		return run, err
	}
	cur, gerr := s.Store.GetRun(ctx, p.RunID)
	if gerr != nil {
		return run, err
	}
	sp := p.Steps[0]
	via := runstate.StepPatch{Name: sp.Name}
	step, known := cur.Step(sp.Name)
	switch {
	case !known && sp.Status != "":
		via.Status = "running"
	case known && len(sp.Hosts) == 1 && sp.Hosts[0].Status != "":
		if _, hostKnown := step.Host(sp.Hosts[0].Host); hostKnown {
			return run, err
		}
		via.Hosts = []runstate.HostPatch{{Host: sp.Hosts[0].Host, Status: "running"}}
	default:
		return run, err
	}
	mid, verr := s.Store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: p.RunID, ExpectedVersion: p.ExpectedVersion, Steps: []runstate.StepPatch{via}})
	if verr != nil {
		return run, err
	}
	p.ExpectedVersion = mid.Version
	return s.Store.UpdateRun(ctx, p)
}

// ---- diagnostics and reasons ----

// incompleteDiagnosticsDropped checks a diagnostic only where the status
// requires one; elsewhere an incomplete one is dropped from the write.
type incompleteDiagnosticsDropped struct{ base }

func (s incompleteDiagnosticsDropped) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	d := p.Diagnostic
	if d == nil || runstate.RunStatus(p.Status).RequiresDiagnostic() || (strings.TrimSpace(d.ErrorCode) != "" && strings.TrimSpace(d.Message) != "") {
		return s.Store.UpdateRun(ctx, p)
	}
	p.Diagnostic = nil
	if p.Status == "" && p.Message == nil && p.Priority == nil && p.Labels == nil && len(p.Steps) == 0 {
		return s.Store.GetRun(ctx, p.RunID)
	}
	return s.Store.UpdateRun(ctx, p)
}

// reasonsDroppedBesideOtherFields refuses an interrupted_reason given
// alone, but drops one given beside another status or field.
type reasonsDroppedBesideOtherFields struct{ base }

func (s reasonsDroppedBesideOtherFields) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	alone := p.Status == "" && p.Message == nil && p.Priority == nil && p.Diagnostic == nil && p.Labels == nil && len(p.Steps) == 0
	if p.InterruptedReason != "" && p.Status != "interrupted" && !alone {
		p.InterruptedReason = ""
	}
	return s.Store.UpdateRun(ctx, p)
}

// ---- listing ----

// cursorSkipsEqualCreated resumes a page after the last run's created_at
// alone, skipping the runs that share it.
type cursorSkipsEqualCreated struct{ base }

const createdCursor = "after-created-"

func (s cursorSkipsEqualCreated) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	if rest, ok := strings.CutPrefix(p.Cursor, createdCursor); ok {
		var us int64
		if _, err := fmt.Sscan(rest, &us); err != nil {
			return runstate.RunPage{}, runstate.InvalidArgument("cursor", "not a cursor of this store")
		}
		from := time.UnixMicro(us + 1).UTC()
		if from.After(p.CreatedFrom) {
			p.CreatedFrom = from
		}
		p.Cursor = ""
	}
	page, err := s.Store.ListRuns(ctx, p)
	if err == nil && page.NextCursor != "" {
		page.NextCursor = fmt.Sprintf("%s%d", createdCursor, page.Runs[len(page.Runs)-1].CreatedAt.UnixMicro())
	}
	return page, err
}

// ---- recovery ----

// diagnosticsNotRetryable stores every diagnostic as not retryable.
type diagnosticsNotRetryable struct{ base }

func notRetryable(p runstate.UpdateRunParams) runstate.UpdateRunParams {
	if p.Diagnostic != nil {
		d := *p.Diagnostic
		d.Retryable = false
		p.Diagnostic = &d
	}
	return p
}

func (s diagnosticsNotRetryable) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return s.Store.UpdateRun(ctx, notRetryable(p))
}

func (s diagnosticsNotRetryable) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	updates := slices.Clone(p.Updates)
	for i := range updates {
		updates[i] = notRetryable(updates[i])
	}
	return s.Store.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: updates})
}

// batchesApplyTheFirstItemOnly applies a batch's first update and reports
// the others applied, as a driver whose batch loop returns early would.
type batchesApplyTheFirstItemOnly struct{ base }

func (s batchesApplyTheFirstItemOnly) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	res, err := s.Store.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: p.Updates[:1]})
	if err != nil {
		return res, err
	}
	for _, u := range p.Updates[1:] {
		run, gerr := s.Store.GetRun(ctx, u.RunID)
		if gerr == nil {
			run.Version++
			if u.Status != "" {
				run.Status = runstate.RunStatus(u.Status)
			}
		}
		res.Items = append(res.Items, runstate.UpdateRunsItem{Run: run, Err: gerr})
	}
	return res, nil
}

// fencedWritesSkipCAS writes an update that carries a lease token at the
// run's current version, whatever version it was based on, as a store
// that takes the lease for a lock would.
type fencedWritesSkipCAS struct{ base }

func (s fencedWritesSkipCAS) atCurrentVersion(ctx context.Context, p runstate.UpdateRunParams) runstate.UpdateRunParams {
	if p.LeaseToken != 0 {
		if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil {
			p.ExpectedVersion = cur.Version
		}
	}
	return p
}

func (s fencedWritesSkipCAS) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return s.Store.UpdateRun(ctx, s.atCurrentVersion(ctx, p))
}

func (s fencedWritesSkipCAS) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	updates := slices.Clone(p.Updates)
	for i := range updates {
		updates[i] = s.atCurrentVersion(ctx, updates[i])
	}
	return s.Store.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: updates})
}

// batchesReturnTheRunBefore answers each batched update with the run as
// it was before the write.
type batchesReturnTheRunBefore struct{ base }

func (s batchesReturnTheRunBefore) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	var before []runstate.RunSnapshot
	for _, u := range p.Updates {
		run, _ := s.Store.GetRun(ctx, u.RunID)
		before = append(before, run)
	}
	res, err := s.Store.UpdateRuns(ctx, p)
	for i := range res.Items {
		if res.Items[i].Err == nil {
			res.Items[i].Run = before[i]
		}
	}
	return res, err
}

// recoveryClaimsTakeOver lets a claim that names every non-terminal
// status, as recovery's do, take over another owner's live lease, with a
// token of its own: two recoveries then take runs from each other.
type recoveryClaimsTakeOver struct{ base }

func (s recoveryClaimsTakeOver) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if !errors.Is(err, runstate.ErrLeaseHeld) || len(p.Statuses) != 3 {
		return cl, err
	}
	held, lerr := s.Store.GetLease(ctx, p.RunID)
	if lerr != nil {
		return cl, err
	}
	// Claimed as another incarnation of the holder's worker (LEASE-012),
	// which the correct store lets take over; reported as the caller's.
	as := p
	as.Owner = runstate.Owner{Worker: held.Owner.Worker, Incarnation: p.Owner.String()}
	taken, terr := s.Store.ClaimRun(ctx, as)
	if terr != nil {
		return cl, err
	}
	taken.Lease.Owner = p.Owner
	return taken, nil
}

// realClockTarget is mutantTarget on the system clock, as a store out of
// process (a plugin) is certified: the suite cannot make runs share a
// created_at by stopping the clock.
func realClockTarget(wrap func(base) runstate.RunStateStore) conformance.Target {
	return conformance.Target{
		Name:         "broken, real clock",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			inner, err := memory.Open(ctx, memory.Options{})
			if err != nil {
				return nil, err
			}
			return &wrapped{store: wrap(base{inner}), inner: inner}, nil
		},
	}
}

// sharperMutants is the catalogue's part for the sharpened checks and the
// recovery rules.
func sharperMutants() []targetMutant {
	b := func(f func(base) runstate.RunStateStore) func() conformance.Target {
		return func() conformance.Target {
			return mutantTarget(func(m *memory.Store, _ *conformance.ManualClock) runstate.RunStateStore { return f(base{m}) })
		}
	}
	return []targetMutant{
		{"LEASE-010", "the runnable listing ignores the workflow name", b(func(s base) runstate.RunStateStore { return runnableIgnoresWorkflow{s} })},
		{"LEASE-003", "claim-next ignores the workflow name", b(func(s base) runstate.RunStateStore { return claimNextIgnoresWorkflow{s} })},
		{"LEASE-003", "claim-next ignores labels", b(func(s base) runstate.RunStateStore { return claimNextIgnoresLabels{s} })},
		{"BATCH-007", "ClaimRuns ignores its filter's workflow and labels", b(func(s base) runstate.RunStateStore { return claimRunsIgnoresFilter{s} })},
		{"LEASE-023", "ClaimRuns ignores its filter's workflow and labels", b(func(s base) runstate.RunStateStore { return claimRunsIgnoresFilter{s} })},
		{"LEASE-001", "leases timed from the run's last write", b(func(s base) runstate.RunStateStore { return claimsTimedByLastWrite{s} })},
		{"FSM-005", "rejected events timed by the run's last write", b(func(s base) runstate.RunStateStore { return rejectedEventsTimedByLastWrite{s} })},
		{"LEASE-009", "a released token fences only after the next claim", b(func(s base) runstate.RunStateStore { return &releasedTokensFenceLate{base: s} })},
		{"LIST-007", "the largest page size refused by the audit and runnable listings", b(func(s base) runstate.RunStateStore { return largestPageRefused{s} })},
		{"FSM-007", "a new step starts in any status", b(func(s base) runstate.RunStateStore { return newStepsStartAnywhere{s} })},
		{"FSM-008", "a new host starts in any status", b(func(s base) runstate.RunStateStore { return newStepsStartAnywhere{s} })},
		{"DIAG-002", "incomplete diagnostics refused only where a status requires one", b(func(s base) runstate.RunStateStore { return incompleteDiagnosticsDropped{s} })},
		{"BAD-007", "an interrupted_reason beside another status or field dropped", b(func(s base) runstate.RunStateStore { return reasonsDroppedBesideOtherFields{s} })},
		{"LIST-005", "a page cursor that skips runs sharing the last run's created_at, real clock", func() conformance.Target {
			return realClockTarget(func(s base) runstate.RunStateStore { return cursorSkipsEqualCreated{s} })
		}},
		{"LEASE-004", "renewals extended from the acquisition, not from now, real clock", func() conformance.Target {
			return realClockTarget(func(s base) runstate.RunStateStore { return renewalsFromAcquisition{s, driver.SystemClock{}} })
		}},
		{"CAS-005", "updated_at stamped by lease operations and updates with nothing to change, real clock", func() conformance.Target {
			return realClockTarget(func(s base) runstate.RunStateStore { return &noOpWritesTouchRuns{base: s, clock: driver.SystemClock{}} })
		}},
		{"REC-002", "diagnostics stored as not retryable", b(func(s base) runstate.RunStateStore { return diagnosticsNotRetryable{s} })},
		{"REC-007", "a batch applies its first update and reports all applied", b(func(s base) runstate.RunStateStore { return batchesApplyTheFirstItemOnly{s} })},
		{"REC-009", "recovery's claims take over each other's leases", b(func(s base) runstate.RunStateStore { return recoveryClaimsTakeOver{s} })},
		{"REC-010", "fenced writes skip compare-and-set", b(func(s base) runstate.RunStateStore { return fencedWritesSkipCAS{s} })},
		{"REC-012", "batched updates answered with the run before the write", b(func(s base) runstate.RunStateStore { return batchesReturnTheRunBefore{s} })},
	}
}

// slowToLook is the correct store whose runnable listing and claim-next
// each take a second before they look, as on a loaded machine: longer
// than the lease of LEASE-024's check lasts.
type slowToLook struct{ base }

func (s slowToLook) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	time.Sleep(time.Second)
	return s.Store.ListRunnableRuns(ctx, p)
}

func (s slowToLook) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	time.Sleep(time.Second)
	return s.Store.ClaimNextRun(ctx, p)
}

// On a real clock the lease of LEASE-024's check may lapse before the
// store looks; a correct store then lists and claims the run it held,
// and the check must not count that against it.
func TestLeaseAboutToExpireOnASlowMachine(t *testing.T) {
	rules, err := conformance.Select([]string{"LEASE-024"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := conformance.RunRule(context.Background(), realClockTarget(func(s base) runstate.RunStateStore { return slowToLook{s} }), rules[0])
	if res.Outcome != conformance.Pass || !strings.Contains(res.Detail, "lapsed") {
		t.Errorf("a correct store whose lease lapsed before it looked: %s %q %v, want pass, saying the lease lapsed", res.Outcome, res.Detail, res.Failures)
	}
}
