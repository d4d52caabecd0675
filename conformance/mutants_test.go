package conformance_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
)

// The mutant catalogue: single-fault stores, each the correct memory
// adapter with one mistake a careful integrator could make, and the rule
// that must catch it. TestEveryMutantIsCaughtByItsRule runs them.

// mutant is one single-fault store, or a single-fault target.
type mutant struct {
	rule string // the rule that must catch it
	name string // the fault
	wrap func(m *memory.Store, clock *conformance.ManualClock) runstate.RunStateStore
}

// targetMutant is a single-fault target: a harness that declares what it
// does not do.
type targetMutant struct {
	rule, name string
	target     func() conformance.Target
}

func targetMutants() []targetMutant {
	return []targetMutant{
		{"CAP-001", "leases implemented but not declared", targetWith(conformance.Capabilities{SecondHandle: true, ControlledClock: true},
			func(w *wrapped) conformance.Harness { return w })},
		{"CAP-002", "a second handle that shares nothing", targetWith(conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
			func(w *wrapped) conformance.Harness { return separateHandles{w} })},
		{"CAP-003", "a controlled clock that does not move", targetWith(conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
			func(w *wrapped) conformance.Harness { return frozenClock{w} })},
	}
}

// separateHandles declares a second handle but opens a fresh, empty store.
type separateHandles struct{ *wrapped }

func (h separateHandles) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	return memory.Open(ctx, memory.Options{})
}

// frozenClock declares a controlled clock that Advance does not move.
type frozenClock struct{ *wrapped }

func (h frozenClock) Advance(time.Duration) {}

// targetWith declares every capability and wraps each harness with wrap.
func targetWith(declare conformance.Capabilities, wrap func(*wrapped) conformance.Harness) func() conformance.Target {
	return func() conformance.Target {
		t := mutantTarget(func(m *memory.Store, _ *conformance.ManualClock) runstate.RunStateStore { return m })
		inner := t.NewHarness
		t.Capabilities = declare
		t.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
			h, err := inner(ctx)
			if err != nil {
				return nil, err
			}
			return wrap(h.(*wrapped)), nil
		}
		return t
	}
}

// base embeds the correct store; each mutant overrides one behaviour.
type base struct{ *memory.Store }

func isForbidden(cur runstate.RunSnapshot, to string) bool {
	st, err := runstate.ParseRunStatus(to)
	return to != "" && err == nil && (cur.Status.Terminal() || !runstate.CanTransition(cur.Status, st))
}

// overrides keeps per-run replacement values a mutant reports instead of
// the stored ones.
type overrides[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

func (o *overrides[T]) set(id string, v T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]T{}
	}
	o.m[id] = v
}

func (o *overrides[T]) get(id string) (T, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.m[id]
	return v, ok
}

// ---- FSM ----

type forbidsWaitingToCanceled struct{ base }

func (s forbidsWaitingToCanceled) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if cur, err := s.GetRun(ctx, p.RunID); err == nil && cur.Status == runstate.StatusWaiting && p.Status == "canceled" {
		return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeInvalidTransition, RunID: p.RunID, From: string(cur.Status), To: string(runstate.StatusCanceled)}
	}
	return s.Store.UpdateRun(ctx, p)
}

type bareTransitionErrors struct{ base }

func (s bareTransitionErrors) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if errors.Is(err, runstate.ErrInvalidTransition) && p.Status != "" {
		return run, &runstate.Error{Code: runstate.CodeInvalidTransition, Message: "transition not allowed"}
	}
	return run, err
}

type touchesTerminalRuns struct {
	base
	touched overrides[time.Time]
}

func (s *touchesTerminalRuns) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if errors.Is(err, runstate.ErrInvalidTransition) {
		if cur, gerr := s.Store.GetRun(ctx, p.RunID); gerr == nil && cur.Status.Terminal() && cur.FinishedAt.Before(cur.UpdatedAt.Add(time.Hour)) {
			s.touched.set(p.RunID, cur.UpdatedAt.Add(time.Microsecond)) // "records when the attempt happened"
		}
	}
	return run, err
}

func (s *touchesTerminalRuns) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	if t, ok := s.touched.get(id); ok && err == nil {
		run.UpdatedAt = t
	}
	return run, err
}

type forcedFailureKeepsPatch struct {
	base
	message overrides[string]
}

func (s *forcedFailureKeepsPatch) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	cur, _ := s.Store.GetRun(ctx, p.RunID)
	run, err := s.Store.UpdateRun(ctx, p)
	if errors.Is(err, runstate.ErrInvalidTransition) && !cur.Status.Terminal() && p.Message != nil {
		s.message.set(p.RunID, *p.Message)
	}
	return run, err
}

func (s *forcedFailureKeepsPatch) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	if m, ok := s.message.get(id); ok && err == nil {
		run.Message = m
	}
	return run, err
}

type rejectedEventAtNewVersion struct{ base }

func (s rejectedEventAtNewVersion) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	for i, e := range page.Events {
		if e.Kind == runstate.AuditRejected && i+1 < len(page.Events) {
			page.Events[i].Version = page.Events[i+1].Version
		}
	}
	return page, err
}

type aliasesUnknownInFilters struct{ base }

func (s aliasesUnknownInFilters) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	if slices.Contains(p.Statuses, "created") || slices.Contains(p.Statuses, "pending") {
		return runstate.RunPage{}, nil
	}
	return s.Store.ListRuns(ctx, p)
}

// stepsSkipRunning lets a step (or, with hosts, a host) go from queued
// straight to success by walking it through running itself.
type stepsSkipRunning struct {
	base
	hosts bool
}

func (s stepsSkipRunning) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if !errors.Is(err, runstate.ErrInvalidTransition) || len(p.Steps) != 1 || p.Status != "" {
		return run, err
	}
	sp := p.Steps[0]
	via := p
	if s.hosts && len(sp.Hosts) == 1 && sp.Hosts[0].Status != "" {
		via.Steps = []runstate.StepPatch{{Name: sp.Name, Hosts: []runstate.HostPatch{{Host: sp.Hosts[0].Host, Status: "running"}}}}
	} else if !s.hosts && sp.Status != "" && len(sp.Hosts) == 0 {
		via.Steps = []runstate.StepPatch{{Name: sp.Name, Status: "running"}}
	} else {
		return run, err
	}
	mid, verr := s.Store.UpdateRun(ctx, via)
	if verr != nil {
		return run, err
	}
	p.ExpectedVersion = mid.Version
	if done, derr := s.Store.UpdateRun(ctx, p); derr == nil {
		return done, nil
	}
	return run, err
}

type startedResetOnResume struct{ base }

func (s startedResetOnResume) fix(run runstate.RunSnapshot) runstate.RunSnapshot {
	if run.Status == runstate.StatusRunning {
		run.StartedAt = run.UpdatedAt
	}
	return run
}

func (s startedResetOnResume) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	return s.fix(run), err
}

func (s startedResetOnResume) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	return s.fix(run), err
}

type terminalAcceptsMessages struct {
	base
	message overrides[string]
}

func (s *terminalAcceptsMessages) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil && cur.Status.Terminal() && p.Status == "" && p.Message != nil && p.ExpectedVersion == cur.Version {
		s.message.set(p.RunID, *p.Message)
		cur.Message = *p.Message
		return cur, nil
	}
	return s.Store.UpdateRun(ctx, p)
}

func (s *terminalAcceptsMessages) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	if m, ok := s.message.get(id); ok && err == nil {
		run.Message = m
	}
	return run, err
}

type diagnosticBeforeTable struct{ base }

func (s diagnosticBeforeTable) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if runstate.RunStatus(p.Status).RequiresDiagnostic() && p.Diagnostic == nil {
		return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeMissingDiagnostic, RunID: p.RunID, Field: "diagnostic", Message: "a diagnostic is required"}
	}
	return s.Store.UpdateRun(ctx, p)
}

// ---- CAS ----

// versionsStepByTwo shows version 2v-1 for stored version v, so every
// write seems to add two.
type versionsStepByTwo struct{ base }

func out(v int64) int64 { return 2*v - 1 }

func (s versionsStepByTwo) outRun(r runstate.RunSnapshot) runstate.RunSnapshot {
	if r.Version > 0 {
		r.Version = out(r.Version)
	}
	return r
}

func (s versionsStepByTwo) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	r, err := s.Store.CreateRun(ctx, p)
	return s.outRun(r), err
}

func (s versionsStepByTwo) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	p.ExpectedVersion = (p.ExpectedVersion + 1) / 2
	r, err := s.Store.UpdateRun(ctx, p)
	return s.outRun(r), err
}

func (s versionsStepByTwo) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	r, err := s.Store.GetRun(ctx, id)
	return s.outRun(r), err
}

type conflictsWithoutCurrent struct{ base }

func (s conflictsWithoutCurrent) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	r, err := s.Store.UpdateRun(ctx, p)
	var e *runstate.Error
	if errors.As(err, &e) && e.Code == runstate.CodeVersionConflict {
		return r, &runstate.Error{Code: runstate.CodeVersionConflict, RunID: p.RunID, Message: "version conflict"}
	}
	return r, err
}

// racyCAS checks the version, then writes unconditionally: a lost update.
// pause widens the window between the check and the write; zero leaves it
// as narrow as the code makes it.
type racyCAS struct {
	base
	pause time.Duration
}

func (s racyCAS) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	cur, err := s.Store.GetRun(ctx, p.RunID)
	if err == nil && cur.Version != p.ExpectedVersion {
		return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeVersionConflict, RunID: p.RunID, ExpectedVersion: p.ExpectedVersion, CurrentVersion: cur.Version}
	}
	pause(s.pause)
	if now, err := s.Store.GetRun(ctx, p.RunID); err == nil {
		p.ExpectedVersion = now.Version
	}
	return s.Store.UpdateRun(ctx, p)
}

type tableBeforeVersion struct{ base }

func (s tableBeforeVersion) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil && isForbidden(cur, p.Status) && !cur.Status.Terminal() {
		p.ExpectedVersion = cur.Version
	}
	return s.Store.UpdateRun(ctx, p)
}

// noOpWritesTouchRuns stamps updated_at with the store's time on writes
// that change nothing: a lease's claim, renewal or release, and an update
// refused for having nothing to change.
type noOpWritesTouchRuns struct {
	base
	clock   runstate.Clock
	touched overrides[time.Time]
}

func (s *noOpWritesTouchRuns) touch(id string) {
	s.touched.set(id, driver.Timestamp(s.clock.Now()))
}

// stamped is run with the time of its last touch, where that is later than
// its last change.
func (s *noOpWritesTouchRuns) stamped(run runstate.RunSnapshot) runstate.RunSnapshot {
	if t, ok := s.touched.get(run.RunID); ok && t.After(run.UpdatedAt) {
		run.UpdatedAt = t
	}
	return run
}

func (s *noOpWritesTouchRuns) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if errors.Is(err, runstate.ErrInvalidArgument) && changesNothing(p) {
		s.touch(p.RunID)
	}
	return run, err
}

func (s *noOpWritesTouchRuns) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	run, err := s.Store.GetRun(ctx, id)
	return s.stamped(run), err
}

func (s *noOpWritesTouchRuns) claimed(cl runstate.Claim, err error) (runstate.Claim, error) {
	if err == nil {
		s.touch(cl.Run.RunID)
		cl.Run = s.stamped(cl.Run)
	}
	return cl, err
}

func (s *noOpWritesTouchRuns) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	return s.claimed(s.Store.ClaimRun(ctx, p))
}

func (s *noOpWritesTouchRuns) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	return s.claimed(s.Store.ClaimNextRun(ctx, p))
}

func (s *noOpWritesTouchRuns) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	l, err := s.Store.RenewLease(ctx, p)
	if err == nil {
		s.touch(p.RunID)
	}
	return l, err
}

func (s *noOpWritesTouchRuns) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	err := s.Store.ReleaseLease(ctx, p)
	if err == nil {
		s.touch(p.RunID)
	}
	return err
}

// ---- DIAG ----

type blankDiagnosticsRepaired struct{ base }

func (s blankDiagnosticsRepaired) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if d := p.Diagnostic; d != nil {
		c := *d
		if strings.TrimSpace(c.ErrorCode) == "" {
			c.ErrorCode = "E_UNKNOWN"
		}
		if strings.TrimSpace(c.Message) == "" {
			c.Message = "no message"
		}
		p.Diagnostic = &c
	}
	return s.Store.UpdateRun(ctx, p)
}

type reasonsInvented struct{ base }

func (s reasonsInvented) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.Status == "interrupted" && strings.TrimSpace(p.InterruptedReason) == "" {
		p.InterruptedReason = "UNKNOWN"
	}
	return s.Store.UpdateRun(ctx, p)
}

type diagnosticDetailsDropped struct{ base }

func (s diagnosticDetailsDropped) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	r, err := s.Store.GetRun(ctx, id)
	if r.Diagnostic != nil {
		r.Diagnostic.Details = nil
	}
	return r, err
}

// ---- AUD ----

type createdEventWithoutReason struct{ base }

func (s createdEventWithoutReason) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	for i := range page.Events {
		if page.Events[i].Kind == runstate.AuditCreated {
			page.Events[i].Reason = ""
		}
	}
	return page, err
}

type eventTimesOff struct{ base }

func (s eventTimesOff) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	for i := range page.Events {
		if page.Events[i].Kind == runstate.AuditTransition {
			page.Events[i].Time = page.Events[i].Time.Add(time.Millisecond) // stamped after the write
		}
	}
	return page, err
}

// extraEvents adds an audit event for writes the contract records none
// for: status-less writes (messages), or refused ones (conflicts).
type extraEvents struct {
	base
	onConflict bool
	mu         sync.Mutex
	extra      map[string][]runstate.AuditEvent // appended after the stored ones
}

func (s *extraEvents) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	cur, _ := s.Store.GetRun(ctx, p.RunID)
	r, err := s.Store.UpdateRun(ctx, p)
	record := (!s.onConflict && err == nil && p.Status == "") || (s.onConflict && errors.Is(err, runstate.ErrVersionConflict))
	if record {
		s.mu.Lock()
		s.extra[p.RunID] = append(s.extra[p.RunID], runstate.AuditEvent{RunID: p.RunID, Kind: runstate.AuditTransition, From: cur.Status, To: cur.Status,
			Time: cur.UpdatedAt, Actor: p.Actor, Reason: p.Reason, Version: cur.Version})
		s.mu.Unlock()
	}
	return r, err
}

func (s *extraEvents) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: p.RunID, Limit: runstate.MaxPageLimit})
	if err != nil {
		return page, err
	}
	s.mu.Lock()
	all := append(slices.Clone(page.Events), s.extra[p.RunID]...)
	s.mu.Unlock()
	var evs []runstate.AuditEvent
	for i, e := range all {
		e.Seq = int64(i + 1)
		if e.Seq > p.AfterSeq {
			evs = append(evs, e)
		}
	}
	limit := p.Limit
	if limit == 0 {
		limit = runstate.DefaultPageLimit
	}
	more := len(evs) > limit
	if more {
		evs = evs[:limit]
	}
	return runstate.AuditPage{Events: evs, More: more}, nil
}

// losesConcurrentEvents loses the event of a write that raced another
// write of the same run, as a store that appends events outside the
// transaction, to a list it read before, would.
type losesConcurrentEvents struct {
	base
	pause    time.Duration
	mu       sync.Mutex
	inFlight map[string]int
	lost     map[string]map[int64]bool // run -> versions whose event is lost
}

// pause sleeps for d, or, for zero, only yields: the narrowest window a
// goroutine switch can open.
func pause(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
		return
	}
	runtime.Gosched()
}

func (s *losesConcurrentEvents) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	s.mu.Lock()
	s.inFlight[p.RunID]++
	raced := s.inFlight[p.RunID] > 1
	s.mu.Unlock()
	pause(s.pause)
	r, err := s.Store.UpdateRun(ctx, p)
	s.mu.Lock()
	s.inFlight[p.RunID]--
	if raced && err == nil && p.Status != "" {
		if s.lost[p.RunID] == nil {
			s.lost[p.RunID] = map[int64]bool{}
		}
		s.lost[p.RunID][r.Version] = true
	}
	s.mu.Unlock()
	return r, err
}

func (s *losesConcurrentEvents) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	page.Events = slices.DeleteFunc(page.Events, func(e runstate.AuditEvent) bool {
		return e.Kind == runstate.AuditTransition && s.lost[p.RunID][e.Version]
	})
	return page, err
}

type moreOnAFullLastPage struct{ base }

func (s moreOnAFullLastPage) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	limit := p.Limit
	if limit == 0 {
		limit = runstate.DefaultPageLimit
	}
	page.More = len(page.Events) >= limit
	return page, err
}

type tokensNotAudited struct{ base }

func (s tokensNotAudited) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	for i := range page.Events {
		page.Events[i].LeaseToken = 0
	}
	return page, err
}

type unnamedWritersAreWorkers struct{ base }

func (s unnamedWritersAreWorkers) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if p.Actor.Kind == "" {
		p.Actor.Kind = runstate.ActorWorker
	}
	return s.Store.CreateRun(ctx, p)
}

func (s unnamedWritersAreWorkers) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.Actor.Kind == "" {
		p.Actor.Kind = runstate.ActorWorker
	}
	return s.Store.UpdateRun(ctx, p)
}

// principalsDropped forgets who wrote, keeping whom for: the fault of a
// store that records the actor's kind and id in columns of their own.
type principalsDropped struct{ base }

func (s principalsDropped) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	p.Actor.Principal = ""
	return s.Store.CreateRun(ctx, p)
}

func (s principalsDropped) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	p.Actor.Principal = ""
	return s.Store.UpdateRun(ctx, p)
}

// ---- RUN ----

type sequentialIDs struct {
	base
	n atomic.Int64
}

func (s *sequentialIDs) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if p.RunID == "" {
		p.RunID = fmt.Sprintf("run-%d", s.n.Add(1))
	}
	return s.Store.CreateRun(ctx, p)
}

type idsLowercased struct{ base }

func (s idsLowercased) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	p.RunID = strings.ToLower(p.RunID)
	return s.Store.CreateRun(ctx, p)
}

type createIsIdempotent struct{ base }

func (s createIsIdempotent) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	r, err := s.Store.CreateRun(ctx, p)
	if errors.Is(err, runstate.ErrAlreadyExists) {
		return s.Store.GetRun(ctx, p.RunID)
	}
	return r, err
}

type releasingUnknownRunsSucceeds struct{ base }

func (s releasingUnknownRunsSucceeds) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	if err := s.Store.ReleaseLease(ctx, p); !errors.Is(err, runstate.ErrNotFound) {
		return err
	}
	return nil
}

type createDropsLabels struct{ base }

func (s createDropsLabels) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	r, err := s.Store.CreateRun(ctx, p)
	r.Labels = nil
	return r, err
}

type retriesStartAtOne struct {
	base
	attempts overrides[int]
}

func (s *retriesStartAtOne) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	r, err := s.Store.CreateRun(ctx, p)
	if err == nil && p.RetryOf != "" {
		s.attempts.set(r.RunID, 1)
		r.Attempt = 1
	}
	return r, err
}

func (s *retriesStartAtOne) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	r, err := s.Store.GetRun(ctx, id)
	if a, ok := s.attempts.get(id); ok && err == nil {
		r.Attempt = a
	}
	return r, err
}

type createsInAnyStatus struct{ base }

func (s createsInAnyStatus) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	st := p.Status
	p.Status = ""
	r, err := s.Store.CreateRun(ctx, p)
	if err != nil || st == "" || st == "queued" || st == "created" || st == "pending" {
		return r, err
	}
	for _, step := range []string{"running", st} {
		if step == "running" && st == "running" {
			continue
		}
		if r, err = s.Store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: step,
			Diagnostic: &runstate.Diagnostic{ErrorCode: "E", Message: "m"}, InterruptedReason: map[bool]string{true: "R"}[step == "interrupted"]}); err != nil {
			return r, err
		}
	}
	if st == "running" {
		return s.Store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: "running"})
	}
	return r, nil
}

type labelsMerged struct{ base }

func (s labelsMerged) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.Labels != nil {
		if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil {
			merged := maps.Clone(cur.Labels)
			if merged == nil {
				merged = map[string]string{}
			}
			maps.Copy(merged, p.Labels)
			p.Labels = merged
		}
	}
	return s.Store.UpdateRun(ctx, p)
}

// ---- LIST ----

type onlyFirstStatus struct{ base }

func (s onlyFirstStatus) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	if len(p.Statuses) > 1 {
		p.Statuses = p.Statuses[:1]
	}
	return s.Store.ListRuns(ctx, p)
}

type workflowPrefixMatch struct{ base }

func (s workflowPrefixMatch) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	wf := p.WorkflowName
	p.WorkflowName = ""
	page, err := s.Store.ListRuns(ctx, p)
	if wf != "" {
		page.Runs = slices.DeleteFunc(page.Runs, func(r runstate.RunSnapshot) bool { return !strings.HasPrefix(r.WorkflowName, wf) })
	}
	return page, err
}

type labelsMatchAny struct{ base }

func (s labelsMatchAny) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	want := p.Labels
	p.Labels = nil
	page, err := s.Store.ListRuns(ctx, p)
	if len(want) > 0 {
		page.Runs = slices.DeleteFunc(page.Runs, func(r runstate.RunSnapshot) bool {
			for k, v := range want {
				if r.Labels[k] == v {
					return false
				}
			}
			return true
		})
	}
	return page, err
}

type createdBeforeInclusive struct{ base }

func (s createdBeforeInclusive) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	if !p.CreatedBefore.IsZero() {
		p.CreatedBefore = p.CreatedBefore.Add(time.Microsecond)
	}
	return s.Store.ListRuns(ctx, p)
}

// offsetCursor pages by position: runs created meanwhile shift the pages.
type offsetCursor struct{ base }

func (s offsetCursor) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	offset := 0
	if p.Cursor != "" {
		if _, err := fmt.Sscanf(p.Cursor, "offset-%d", &offset); err != nil {
			return runstate.RunPage{}, runstate.InvalidArgument("cursor", "not a cursor of this store")
		}
	}
	limit := p.Limit
	if limit == 0 {
		limit = runstate.DefaultPageLimit
	}
	q := p
	q.Cursor, q.Limit = "", runstate.MaxPageLimit
	var all []runstate.RunSnapshot
	for {
		page, err := s.Store.ListRuns(ctx, q)
		if err != nil {
			return page, err
		}
		all = append(all, page.Runs...)
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	// Newest first, as a careless store might order an offset listing.
	slices.Reverse(all)
	end := min(offset+limit, len(all))
	out := runstate.RunPage{Runs: all[min(offset, len(all)):end]}
	slices.Reverse(out.Runs)
	if end < len(all) {
		out.NextCursor = fmt.Sprintf("offset-%d", end)
	}
	return out, nil
}

type foreignCursorsIgnored struct{ base }

func (s foreignCursorsIgnored) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	page, err := s.Store.ListRuns(ctx, p)
	if runstate.CodeOf(err) == runstate.CodeInvalidArgument && p.Cursor != "" {
		p.Cursor = ""
		return s.Store.ListRuns(ctx, p)
	}
	return page, err
}

// ---- LEASE ----

type claimNextIgnoresHolders struct {
	base
	pause time.Duration
}

func (s claimNextIgnoresHolders) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	page, err := s.Store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: p.Filter, Limit: 1})
	if err != nil || len(page.Runs) == 0 {
		return s.Store.ClaimNextRun(ctx, p)
	}
	pause(s.pause) // between the look and the claim
	cl, err := s.Store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: page.Runs[0].RunID, Owner: p.Owner, TTL: p.TTL, Statuses: p.Filter.Statuses})
	if errors.Is(err, runstate.ErrLeaseHeld) {
		return runstate.Claim{Lease: runstate.Lease{RunID: page.Runs[0].RunID, Owner: p.Owner, Token: 1}, Run: page.Runs[0]}, nil
	}
	return cl, err
}

type renewalsNotStored struct {
	base
	clock *conformance.ManualClock
}

func (s renewalsNotStored) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	l, err := s.Store.RenewLease(ctx, runstate.RenewLeaseParams{RunID: p.RunID, Token: p.Token, TTL: time.Nanosecond})
	if err == nil {
		l.ExpiresAt = driver.Timestamp(s.clock.Now().Add(p.TTL))
	}
	return l, err
}

// renewalsFromAcquisition extends a renewed lease from when it was
// acquired, not from now: expires_at = acquired_at + TTL.
type renewalsFromAcquisition struct {
	base
	clock runstate.Clock
}

func (s renewalsFromAcquisition) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	if held, err := s.Store.GetLease(ctx, p.RunID); err == nil && held.Token == p.Token {
		// The store adds the TTL to now: less what passed since the acquisition.
		p.TTL = max(p.TTL-driver.Timestamp(s.clock.Now()).Sub(held.AcquiredAt), time.Microsecond)
	}
	return s.Store.RenewLease(ctx, p)
}

type staleRenewalsAccepted struct{ base }

func (s staleRenewalsAccepted) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	l, err := s.Store.RenewLease(ctx, p)
	if errors.Is(err, runstate.ErrLeaseLost) {
		return runstate.Lease{RunID: p.RunID, Token: p.Token}, nil
	}
	return l, err
}

type releaseIsANoop struct{ base }

func (s releaseIsANoop) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	if _, err := s.Store.GetRun(ctx, p.RunID); err != nil {
		return err
	}
	if p.Token <= 0 {
		return runstate.InvalidArgument("token", "is %d; lease tokens are positive", p.Token)
	}
	return nil
}

type runnableListingIgnoresLeases struct{ base }

func (s runnableListingIgnoresLeases) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	statuses := p.Filter.Statuses
	if len(statuses) == 0 {
		statuses = []string{"queued", "waiting"}
	}
	for _, st := range statuses {
		if parsed, err := runstate.ParseRunStatus(st); err != nil || parsed.Terminal() {
			return s.Store.ListRunnableRuns(ctx, p) // let the store refuse it
		}
	}
	page, err := s.Store.ListRuns(ctx, runstate.ListRunsParams{Statuses: statuses, WorkflowName: p.Filter.WorkflowName, Labels: p.Filter.Labels, Limit: runstate.MaxPageLimit})
	slices.SortStableFunc(page.Runs, func(a, b runstate.RunSnapshot) int { // claim order
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.RunID, b.RunID))
	})
	return page, err
}

type claimsRunningByDefault struct{ base }

func (s claimsRunningByDefault) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	if len(p.Filter.Statuses) == 0 {
		p.Filter.Statuses = []string{"queued", "running", "waiting"}
	}
	return s.Store.ClaimNextRun(ctx, p)
}

type incarnationsBlockEachOther struct{ base }

func (s incarnationsBlockEachOther) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	page, _ := s.Store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running", "waiting"}}, Limit: runstate.MaxPageLimit})
	if !slices.ContainsFunc(page.Runs, func(r runstate.RunSnapshot) bool { return r.RunID == p.RunID }) {
		if _, err := s.Store.GetRun(ctx, p.RunID); err == nil {
			if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil && !cur.Status.Terminal() {
				return runstate.Claim{}, &runstate.Error{Code: runstate.CodeLeaseHeld, RunID: p.RunID} // any live lease blocks, an earlier incarnation's too
			}
		}
	}
	return s.Store.ClaimRun(ctx, p)
}

type emptyIsNotClaimable struct{ base }

func (s emptyIsNotClaimable) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimNextRun(ctx, p)
	if errors.Is(err, runstate.ErrNotFound) {
		return cl, &runstate.Error{Code: runstate.CodeNotClaimable, Message: "nothing to claim"}
	}
	return cl, err
}

type claimsBumpVersions struct{ base }

func (s claimsBumpVersions) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if err == nil {
		msg := cl.Run.Message // "touches" the run to record the claim
		if r, uerr := s.Store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: cl.Run.RunID, ExpectedVersion: cl.Run.Version, Message: &msg}); uerr == nil {
			cl.Run = r
		}
	}
	return cl, err
}

type expiredLeasesLost struct {
	base
	clock *conformance.ManualClock
}

func (s expiredLeasesLost) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	page, _ := s.Store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running", "waiting"}}, Limit: runstate.MaxPageLimit})
	if slices.ContainsFunc(page.Runs, func(r runstate.RunSnapshot) bool { return r.RunID == p.RunID }) {
		return runstate.Lease{}, &runstate.Error{Code: runstate.CodeLeaseLost, RunID: p.RunID, Message: "the lease expired"}
	}
	return s.Store.RenewLease(ctx, p)
}

type tokensRestartAfterRelease struct {
	base
	mu     sync.Mutex
	offset map[string]int64 // subtracted from the stored token after a release
}

func (s *tokensRestartAfterRelease) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	cl.Lease.Token -= s.offset[p.RunID]
	return cl, err
}

func (s *tokensRestartAfterRelease) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	s.mu.Lock()
	off := s.offset[p.RunID]
	s.mu.Unlock()
	err := s.Store.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: p.RunID, Token: p.Token + off})
	if err == nil {
		s.mu.Lock()
		s.offset[p.RunID] = p.Token + off // the next claim shows token 1 again
		s.mu.Unlock()
	}
	return err
}

func (s *tokensRestartAfterRelease) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	s.mu.Lock()
	off := s.offset[p.RunID]
	s.mu.Unlock()
	p.Token += off
	l, err := s.Store.RenewLease(ctx, p)
	l.Token -= off
	return l, err
}

func (s *tokensRestartAfterRelease) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	s.mu.Lock()
	if p.LeaseToken != 0 {
		p.LeaseToken += s.offset[p.RunID]
	}
	s.mu.Unlock()
	return s.Store.UpdateRun(ctx, p)
}

// emptyWhileAnotherClaims answers "nothing runnable" when another claim-next
// is in flight, as an in-memory reservation that is never waited for would.
type emptyWhileAnotherClaims struct {
	base
	pause    time.Duration
	inFlight atomic.Int32
}

func (s *emptyWhileAnotherClaims) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	if s.inFlight.Add(1) > 1 {
		s.inFlight.Add(-1)
		return runstate.Claim{}, &runstate.Error{Code: runstate.CodeNotFound, Message: "no runnable run matches the filter"}
	}
	defer s.inFlight.Add(-1)
	pause(s.pause)
	return s.Store.ClaimNextRun(ctx, p)
}

// liveAtExpiry treats a lease as live at exactly expires_at.
type liveAtExpiry struct {
	base
	clock  *conformance.ManualClock
	mu     sync.Mutex
	expiry map[string]time.Time
}

func (s *liveAtExpiry) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	s.mu.Lock()
	exp, ok := s.expiry[p.RunID]
	s.mu.Unlock()
	if ok && driver.Timestamp(s.clock.Now()).Equal(exp) {
		return runstate.Claim{}, &runstate.Error{Code: runstate.CodeLeaseHeld, RunID: p.RunID}
	}
	cl, err := s.Store.ClaimRun(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.expiry[p.RunID] = cl.Lease.ExpiresAt
		s.mu.Unlock()
	}
	return cl, err
}

// wakeTimesDropped drops WakeAt, as a server older than the field would:
// a parked run is claimable at once.
type wakeTimesDropped struct{ base }

func (s wakeTimesDropped) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.WakeAt != nil && !p.WakeAt.IsZero() {
		p.WakeAt = nil
		if p.Status == "" && p.Message == nil {
			msg := "parked"
			p.Message = &msg // still a write, as the server would make it
		}
	}
	return s.Store.UpdateRun(ctx, p)
}

// parkedNeverWake takes a parked run for parked whatever the time:
// claim-next passes by every run with a wake time.
type parkedNeverWake struct{ base }

func (s parkedNeverWake) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimNextRun(ctx, p)
	if err != nil || cl.Run.WakeAt.IsZero() {
		return cl, err
	}
	// Passed by: released, and the search answered empty.
	if err := s.Store.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: cl.Run.RunID, Token: cl.Lease.Token}); err != nil {
		return runstate.Claim{}, err
	}
	return runstate.Claim{}, &runstate.Error{Code: runstate.CodeNotFound, Message: "nothing runnable"}
}

// wakeTimesToTheSecond stores wake times cut to whole seconds.
type wakeTimesToTheSecond struct{ base }

func (s wakeTimesToTheSecond) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.WakeAt != nil {
		cut := p.WakeAt.Truncate(time.Second)
		p.WakeAt = &cut
	}
	return s.Store.UpdateRun(ctx, p)
}

// parksByReleasing parks a leased run by releasing its lease first, when
// the write itself does not: the holder loses its run without a word.
type parksByReleasing struct{ base }

func (s parksByReleasing) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	run, err := s.Store.UpdateRun(ctx, p)
	if p.WakeAt == nil || !errors.Is(err, runstate.ErrInvalidArgument) {
		return run, err
	}
	if l, lerr := s.Store.GetLease(ctx, p.RunID); lerr == nil && l.Token > 0 {
		s.Store.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: p.RunID, Token: l.Token})
		return s.Store.UpdateRun(ctx, p)
	}
	return run, err
}

// releaseIgnored drops ReleaseLease: the update applies, the lease stays.
type releaseIgnored struct{ base }

func (s releaseIgnored) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	p.ReleaseLease = false
	return s.Store.UpdateRun(ctx, p)
}

type unfencedWritesRefusedWhileLeased struct{ base }

func (s unfencedWritesRefusedWhileLeased) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.LeaseToken == 0 {
		page, _ := s.Store.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running", "waiting"}}, Limit: runstate.MaxPageLimit})
		if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil && !cur.Status.Terminal() &&
			!slices.ContainsFunc(page.Runs, func(r runstate.RunSnapshot) bool { return r.RunID == p.RunID }) {
			return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeLeaseHeld, RunID: p.RunID}
		}
	}
	return s.Store.UpdateRun(ctx, p)
}

// ---- REC ----

type interruptedReasonsNotStored struct{ base }

func (s interruptedReasonsNotStored) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	r, err := s.Store.GetRun(ctx, id)
	r.InterruptedReason = ""
	return r, err
}

// stepsDroppedWithStatus applies the status of a write but not its steps.
type stepsDroppedWithStatus struct{ base }

func (s stepsDroppedWithStatus) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.Status != "" && runstate.RunStatus(p.Status).Terminal() {
		p.Steps = nil
	}
	return s.Store.UpdateRun(ctx, p)
}

// UpdateRuns drops the steps of batched writes alike, as recovery settles runs in batches.
func (s stepsDroppedWithStatus) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	updates := slices.Clone(p.Updates)
	for i, u := range updates {
		if u.Status != "" && runstate.RunStatus(u.Status).Terminal() {
			updates[i].Steps = nil
		}
	}
	return s.Store.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: updates})
}

// expiredLeasesListedAsHeld leaves runs that were ever leased and not
// released out of the runnable listing, expired leases included, as a
// listing that only looks at never-leased or released runs would.
type expiredLeasesListedAsHeld struct {
	base
	leased overrides[bool]
}

func (s *expiredLeasesListedAsHeld) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if err == nil {
		s.leased.set(p.RunID, true)
	}
	return cl, err
}

func (s *expiredLeasesListedAsHeld) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	err := s.Store.ReleaseLease(ctx, p)
	if err == nil {
		s.leased.set(p.RunID, false)
	}
	return err
}

func (s *expiredLeasesListedAsHeld) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	page, err := s.Store.ListRunnableRuns(ctx, p)
	page.Runs = slices.DeleteFunc(page.Runs, func(r runstate.RunSnapshot) bool { held, _ := s.leased.get(r.RunID); return held })
	return page, err
}

// claimsWithAllStatusesIgnoreLeases skips the lease check when a claim
// names every non-terminal status, as recovery's claims do.
type claimsWithAllStatusesIgnoreLeases struct{ base }

func (s claimsWithAllStatusesIgnoreLeases) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	cl, err := s.Store.ClaimRun(ctx, p)
	if errors.Is(err, runstate.ErrLeaseHeld) && len(p.Statuses) == 3 {
		run, _ := s.Store.GetRun(ctx, p.RunID)
		return runstate.Claim{Lease: runstate.Lease{RunID: p.RunID, Owner: p.Owner, Token: 1 << 40}, Run: run}, nil
	}
	return cl, err
}

// ---- LIN ----

// staleReads answers some reads from a copy taken at an earlier read, as
// a store reading from a lagging replica would.
type staleReads struct {
	base
	n     atomic.Int64
	cache overrides[runstate.RunSnapshot]
}

func (s *staleReads) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	if old, ok := s.cache.get(id); ok && s.n.Add(1)%3 == 0 {
		return old, nil
	}
	r, err := s.Store.GetRun(ctx, id)
	if err == nil {
		s.cache.set(id, r)
	}
	return r, err
}

// lateAudit leaves the newest event out of some listings, as a store that
// writes events after its snapshot, outside the transaction, would show.
type lateAudit struct {
	base
	n atomic.Int64
}

func (s *lateAudit) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := s.Store.ListAuditEvents(ctx, p)
	if len(page.Events) > 1 && !page.More && s.n.Add(1)%4 == 0 {
		page.Events = page.Events[:len(page.Events)-1]
	}
	return page, err
}

// sometimesEmpty answers some claim-next calls with "nothing runnable".
type sometimesEmpty struct {
	base
	n atomic.Int64
}

func (s *sometimesEmpty) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	if s.n.Add(1)%5 == 0 {
		return runstate.Claim{}, &runstate.Error{Code: runstate.CodeNotFound, Message: "no runnable run matches the filter"}
	}
	return s.Store.ClaimNextRun(ctx, p)
}

// ---- BAD ----

type slashesInIDsRepaired struct{ base }

func (s slashesInIDsRepaired) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	p.RunID = strings.ReplaceAll(p.RunID, "/", "-")
	return s.Store.CreateRun(ctx, p)
}

type statusesCaseInsensitive struct{ base }

func (s statusesCaseInsensitive) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	p.Status = strings.ToLower(strings.TrimSpace(p.Status))
	return s.Store.UpdateRun(ctx, p)
}

type blankWorkflowsNamed struct{ base }

func (s blankWorkflowsNamed) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if strings.TrimSpace(p.WorkflowName) == "" {
		p.WorkflowName = "unnamed"
	}
	return s.Store.CreateRun(ctx, p)
}

type longLeasesClamped struct{ base }

func (s longLeasesClamped) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	p.TTL = min(p.TTL, runstate.MaxLeaseTTL)
	return s.Store.ClaimRun(ctx, p)
}

type actorIDsTruncated struct{ base }

func (s actorIDsTruncated) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if len(p.Actor.ID) > runstate.MaxActorIDLen {
		p.Actor.ID = p.Actor.ID[:runstate.MaxActorIDLen]
	}
	return s.Store.CreateRun(ctx, p)
}

type diagnosticMessagesTruncated struct{ base }

func (s diagnosticMessagesTruncated) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if d := p.Diagnostic; d != nil && len(d.Message) > runstate.MaxMessageLen {
		c := *d
		c.Message = c.Message[:runstate.MaxMessageLen]
		p.Diagnostic = &c
	}
	return s.Store.UpdateRun(ctx, p)
}

// limitsOffByOne refuses diagnostic fields and an interrupted_reason of
// exactly their limit, as a store comparing with >= instead of > would.
type limitsOffByOne struct{ base }

func (s limitsOffByOne) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	atLimit := len(p.InterruptedReason) == runstate.MaxReasonLen
	if d := p.Diagnostic; d != nil {
		atLimit = atLimit || len(d.ErrorCode) == runstate.MaxErrorCodeLen || len(d.SourceStep) == runstate.MaxStepNameLen ||
			len(d.SourceHost) == runstate.MaxHostNameLen
	}
	if atLimit {
		return runstate.RunSnapshot{}, runstate.InvalidArgument("diagnostic", "too long")
	}
	return s.Store.UpdateRun(ctx, p)
}

type invalidTextRepaired struct{ base }

func (s invalidTextRepaired) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	p.WorkflowName = strings.ToValidUTF8(strings.ReplaceAll(p.WorkflowName, "\x00", ""), "?")
	p.Message = strings.ToValidUTF8(p.Message, "?")
	return s.Store.CreateRun(ctx, p)
}

// changesNothing reports an update that sets no field.
func changesNothing(p runstate.UpdateRunParams) bool {
	return p.Status == "" && p.Message == nil && p.Priority == nil && p.Diagnostic == nil && p.Labels == nil && len(p.Steps) == 0
}

type emptyUpdatesAccepted struct{ base }

func (s emptyUpdatesAccepted) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if changesNothing(p) && p.ExpectedVersion >= 1 {
		return s.Store.GetRun(ctx, p.RunID)
	}
	return s.Store.UpdateRun(ctx, p)
}

// ---- CTX ----

type auditIgnoresContext struct{ base }

func (s auditIgnoresContext) ListAuditEvents(_ context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	return s.Store.ListAuditEvents(context.Background(), p)
}

type releaseIgnoresContext struct{ base }

func (s releaseIgnoresContext) ReleaseLease(_ context.Context, p runstate.ReleaseLeaseParams) error {
	return s.Store.ReleaseLease(context.Background(), p)
}

// mutants is the catalogue.
func mutants() []mutant {
	b := func(f func(base) runstate.RunStateStore) func(*memory.Store, *conformance.ManualClock) runstate.RunStateStore {
		return func(m *memory.Store, _ *conformance.ManualClock) runstate.RunStateStore { return f(base{m}) }
	}
	return []mutant{
		{"FSM-001", "waiting -> canceled forgotten in the table", b(func(s base) runstate.RunStateStore { return forbidsWaitingToCanceled{s} })},
		{"FSM-002", "transition errors without from and to", b(func(s base) runstate.RunStateStore { return bareTransitionErrors{s} })},
		{"FSM-003", "a terminal run moves", b(func(s base) runstate.RunStateStore {
			return &terminalMoves{Store: s.Store, override: map[string]runstate.RunStatus{}}
		})},
		{"FSM-003", "a refused write touches the terminal run's updated_at", b(func(s base) runstate.RunStateStore { return &touchesTerminalRuns{base: s} })},
		{"FSM-004", "a forced failure keeps the rest of the patch", b(func(s base) runstate.RunStateStore { return &forcedFailureKeepsPatch{base: s} })},
		{"FSM-005", "the rejected event carries the new version", b(func(s base) runstate.RunStateStore { return rejectedEventAtNewVersion{s} })},
		{"FSM-006", "aliases unknown to status filters", b(func(s base) runstate.RunStateStore { return aliasesUnknownInFilters{s} })},
		{"FSM-007", "steps go from queued to success", b(func(s base) runstate.RunStateStore { return stepsSkipRunning{base: s} })},
		{"FSM-008", "hosts go from queued to success", b(func(s base) runstate.RunStateStore { return stepsSkipRunning{base: s, hosts: true} })},
		{"FSM-009", "started_at reset on every return to running", b(func(s base) runstate.RunStateStore { return startedResetOnResume{s} })},
		{"FSM-010", "a terminal run takes a new message", b(func(s base) runstate.RunStateStore { return &terminalAcceptsMessages{base: s} })},
		{"FSM-011", "the diagnostic is checked before the table", b(func(s base) runstate.RunStateStore { return diagnosticBeforeTable{s} })},
		{"CAS-001", "versions step by two", b(func(s base) runstate.RunStateStore { return versionsStepByTwo{s} })},
		{"CAS-002", "conflicts without the current version", b(func(s base) runstate.RunStateStore { return conflictsWithoutCurrent{s} })},
		{"CAS-003", "check-then-write compare-and-set", b(func(s base) runstate.RunStateStore { return racyCAS{s, 50 * time.Microsecond} })},
		{"CAS-003", "check-then-write compare-and-set, narrow window", b(func(s base) runstate.RunStateStore { return racyCAS{s, 0} })},
		{"CAS-004", "the table is checked before the version", b(func(s base) runstate.RunStateStore { return tableBeforeVersion{s} })},
		{"CAS-005", "updated_at stamped by lease operations and updates with nothing to change", func(m *memory.Store, c *conformance.ManualClock) runstate.RunStateStore {
			return &noOpWritesTouchRuns{base: base{m}, clock: c}
		}},
		{"DIAG-001", "missing diagnostics invented", b(func(s base) runstate.RunStateStore { return inventsDiagnostics{s.Store} })},
		{"DIAG-002", "blank diagnostic fields repaired", b(func(s base) runstate.RunStateStore { return blankDiagnosticsRepaired{s} })},
		{"DIAG-003", "missing interrupted reasons invented", b(func(s base) runstate.RunStateStore { return reasonsInvented{s} })},
		{"DIAG-004", "diagnostic details not kept", b(func(s base) runstate.RunStateStore { return diagnosticDetailsDropped{s} })},
		{"AUD-001", "the created event loses its reason", b(func(s base) runstate.RunStateStore { return createdEventWithoutReason{s} })},
		{"AUD-002", "transition events skipped", b(func(s base) runstate.RunStateStore { return skipsAudit{s.Store} })},
		{"AUD-002", "event times taken after the write", b(func(s base) runstate.RunStateStore { return eventTimesOff{s} })},
		{"AUD-003", "events for writes that change no status", b(func(s base) runstate.RunStateStore {
			return &extraEvents{base: s, extra: map[string][]runstate.AuditEvent{}}
		})},
		{"AUD-004", "events for version conflicts", b(func(s base) runstate.RunStateStore {
			return &extraEvents{base: s, onConflict: true, extra: map[string][]runstate.AuditEvent{}}
		})},
		{"AUD-005", "concurrent writes lose an event", b(func(s base) runstate.RunStateStore {
			return &losesConcurrentEvents{base: s, pause: 20 * time.Microsecond, inFlight: map[string]int{}, lost: map[string]map[int64]bool{}}
		})},
		{"AUD-005", "concurrent writes lose an event, narrow window", b(func(s base) runstate.RunStateStore {
			return &losesConcurrentEvents{base: s, inFlight: map[string]int{}, lost: map[string]map[int64]bool{}}
		})},
		{"AUD-006", "more reported on a full last page", b(func(s base) runstate.RunStateStore { return moreOnAFullLastPage{s} })},
		{"AUD-007", "lease tokens not recorded", b(func(s base) runstate.RunStateStore { return tokensNotAudited{s} })},
		{"AUD-008", "unnamed writers recorded as workers", b(func(s base) runstate.RunStateStore { return unnamedWritersAreWorkers{s} })},
		{"AUD-010", "principals dropped", b(func(s base) runstate.RunStateStore { return principalsDropped{s} })},
		{"RUN-001", "sequential run ids", b(func(s base) runstate.RunStateStore { return &sequentialIDs{base: s} })},
		{"RUN-002", "run ids lowercased", b(func(s base) runstate.RunStateStore { return idsLowercased{s} })},
		{"RUN-003", "creating an existing id returns it", b(func(s base) runstate.RunStateStore { return createIsIdempotent{s} })},
		{"RUN-004", "releasing an unknown run succeeds", b(func(s base) runstate.RunStateStore { return releasingUnknownRunsSucceeds{s} })},
		{"RUN-005", "create returns no labels", b(func(s base) runstate.RunStateStore { return createDropsLabels{s} })},
		{"RUN-006", "retries start at attempt 1", b(func(s base) runstate.RunStateStore { return &retriesStartAtOne{base: s} })},
		{"RUN-007", "runs created in any status", b(func(s base) runstate.RunStateStore { return createsInAnyStatus{s} })},
		{"RUN-008", "snapshots shared between callers", b(func(s base) runstate.RunStateStore {
			return &aliasesSnapshots{Store: s.Store, cache: map[string]runstate.RunSnapshot{}}
		})},
		{"RUN-009", "labels merged instead of replaced", b(func(s base) runstate.RunStateStore { return labelsMerged{s} })},
		{"LIST-001", "only the first status filtered", b(func(s base) runstate.RunStateStore { return onlyFirstStatus{s} })},
		{"LIST-002", "workflow names matched by prefix", b(func(s base) runstate.RunStateStore { return workflowPrefixMatch{s} })},
		{"LIST-003", "labels matched by any pair", b(func(s base) runstate.RunStateStore { return labelsMatchAny{s} })},
		{"LIST-004", "created_before inclusive", b(func(s base) runstate.RunStateStore { return createdBeforeInclusive{s} })},
		{"LIST-005", "pages skip a run", b(func(s base) runstate.RunStateStore { return pageSkipper{s.Store} })},
		{"LIST-006", "offset cursors, newest first", b(func(s base) runstate.RunStateStore { return offsetCursor{s} })},
		{"LIST-007", "foreign cursors ignored", b(func(s base) runstate.RunStateStore { return foreignCursorsIgnored{s} })},
		{"LEASE-001", "leases handed out twice", b(func(s base) runstate.RunStateStore { return sharedLeases{s.Store} })},
		{"LEASE-002", "claim-next looks, then claims without checking", b(func(s base) runstate.RunStateStore { return claimNextIgnoresHolders{s, 100 * time.Microsecond} })},
		{"LEASE-002", "claim-next looks, then claims without checking, narrow window", b(func(s base) runstate.RunStateStore { return claimNextIgnoresHolders{s, 0} })},
		{"LEASE-003", "lowest priority first", b(func(s base) runstate.RunStateStore { return lowestFirst{s.Store} })},
		{"LEASE-003", "ties broken by the largest run_id", b(func(s base) runstate.RunStateStore { return largestIDOnTies{s.Store} })},
		{"LEASE-004", "renewals not stored", func(m *memory.Store, c *conformance.ManualClock) runstate.RunStateStore {
			return renewalsNotStored{base{m}, c}
		}},
		{"LEASE-004", "renewals extended from the acquisition, not from now", func(m *memory.Store, c *conformance.ManualClock) runstate.RunStateStore {
			return renewalsFromAcquisition{base{m}, c}
		}},
		{"LEASE-005", "tokens reused", b(func(s base) runstate.RunStateStore { return reusesTokens{s.Store} })},
		{"LEASE-006", "writes not fenced", b(func(s base) runstate.RunStateStore { return noFencing{s.Store} })},
		{"LEASE-007", "stale renewals accepted", b(func(s base) runstate.RunStateStore { return staleRenewalsAccepted{s} })},
		{"LEASE-008", "terminal runs claimable", b(func(s base) runstate.RunStateStore { return interruptsAll{s.Store} })},
		{"LEASE-009", "release does nothing", b(func(s base) runstate.RunStateStore { return releaseIsANoop{s} })},
		{"LEASE-010", "the runnable listing ignores leases", b(func(s base) runstate.RunStateStore { return runnableListingIgnoresLeases{s} })},
		{"LEASE-011", "running runs claimed by default", b(func(s base) runstate.RunStateStore { return claimsRunningByDefault{s} })},
		{"LEASE-012", "an earlier incarnation's lease blocks a later one", b(func(s base) runstate.RunStateStore { return incarnationsBlockEachOther{s} })},
		{"LEASE-013", "nothing runnable reported as not claimable", b(func(s base) runstate.RunStateStore { return emptyIsNotClaimable{s} })},
		{"LEASE-014", "claims bump the version", b(func(s base) runstate.RunStateStore { return claimsBumpVersions{s} })},
		{"LEASE-015", "expired leases lost without a claim", func(m *memory.Store, c *conformance.ManualClock) runstate.RunStateStore {
			return expiredLeasesLost{base{m}, c}
		}},
		{"LEASE-016", "tokens restart after a release", b(func(s base) runstate.RunStateStore {
			return &tokensRestartAfterRelease{base: s, offset: map[string]int64{}}
		})},
		{"LEASE-017", "empty while another claim-next is in flight", b(func(s base) runstate.RunStateStore {
			return &emptyWhileAnotherClaims{base: s, pause: 20 * time.Microsecond}
		})},
		{"LEASE-017", "empty while another claim-next is in flight, narrow window", b(func(s base) runstate.RunStateStore { return &emptyWhileAnotherClaims{base: s} })},
		{"LEASE-018", "leases live at exactly expires_at", func(m *memory.Store, c *conformance.ManualClock) runstate.RunStateStore {
			return &liveAtExpiry{base: base{m}, clock: c, expiry: map[string]time.Time{}}
		}},
		{"LEASE-019", "unfenced writes refused while leased", b(func(s base) runstate.RunStateStore { return unfencedWritesRefusedWhileLeased{s} })},
		{"LEASE-022", "ReleaseLease ignored", b(func(s base) runstate.RunStateStore { return releaseIgnored{s} })},
		{"REC-001", "interrupted reasons not stored", b(func(s base) runstate.RunStateStore { return interruptedReasonsNotStored{s} })},
		{"REC-003", "steps dropped from a write that ends the run", b(func(s base) runstate.RunStateStore { return stepsDroppedWithStatus{s} })},
		{"REC-004", "runs with an expired lease left out of the runnable listing", b(func(s base) runstate.RunStateStore { return &expiredLeasesListedAsHeld{base: s} })},
		{"REC-005", "claims naming every status ignore leases", b(func(s base) runstate.RunStateStore { return claimsWithAllStatusesIgnoreLeases{s} })},
		{"REC-006", "an earlier incarnation's lease blocks recovery", b(func(s base) runstate.RunStateStore { return incarnationsBlockEachOther{s} })},
		{"REC-008", "terminal runs listed and claimable", b(func(s base) runstate.RunStateStore { return interruptsAll{s.Store} })},
		{"REC-011", "running runs claimed by default", b(func(s base) runstate.RunStateStore { return claimsRunningByDefault{s} })},
		{"LIN-001", "stale reads", b(func(s base) runstate.RunStateStore { return &staleReads{base: s} })},
		{"LIN-001", "compare-and-set ignored", b(func(s base) runstate.RunStateStore { return ignoresVersion{s.Store} })},
		{"LIN-001", "the audit lags its run", b(func(s base) runstate.RunStateStore { return &lateAudit{base: s} })},
		{"LIN-002", "fencing ignored", b(func(s base) runstate.RunStateStore { return noFencing{s.Store} })},
		{"LIN-002", "claim-next answers empty", b(func(s base) runstate.RunStateStore { return &sometimesEmpty{base: s} })},
		{"BAD-001", "slashes in run ids repaired", b(func(s base) runstate.RunStateStore { return slashesInIDsRepaired{s} })},
		{"BAD-002", "statuses matched in any case", b(func(s base) runstate.RunStateStore { return statusesCaseInsensitive{s} })},
		{"BAD-003", "blank workflow names named", b(func(s base) runstate.RunStateStore { return blankWorkflowsNamed{s} })},
		{"BAD-004", "over-long leases clamped", b(func(s base) runstate.RunStateStore { return longLeasesClamped{s} })},
		{"BAD-005", "over-long input repaired", b(func(s base) runstate.RunStateStore { return lenientInput{s.Store} })},
		{"BAD-005", "over-long actor ids truncated", b(func(s base) runstate.RunStateStore { return actorIDsTruncated{s} })},
		{"BAD-005", "over-long diagnostic messages truncated", b(func(s base) runstate.RunStateStore { return diagnosticMessagesTruncated{s} })},
		{"BAD-005", "diagnostic fields refused at their limit", b(func(s base) runstate.RunStateStore { return limitsOffByOne{s} })},
		{"BAD-006", "invalid text repaired", b(func(s base) runstate.RunStateStore { return invalidTextRepaired{s} })},
		{"BAD-007", "updates that change nothing accepted", b(func(s base) runstate.RunStateStore { return emptyUpdatesAccepted{s} })},
		{"CTX-001", "create ignores its context", b(func(s base) runstate.RunStateStore { return ignoresContext{s.Store} })},
		{"CTX-001", "the audit listing ignores its context", b(func(s base) runstate.RunStateStore { return auditIgnoresContext{s} })},
		{"CTX-001", "release ignores its context", b(func(s base) runstate.RunStateStore { return releaseIgnoresContext{s} })},
		{"BATCH-001", "a batch created one run at a time", b(func(s base) runstate.RunStateStore { return partialCreates{s.Store} })},
		{"BATCH-003", "bad items dropped from a batch", b(func(s base) runstate.RunStateStore { return skipsBadItems{s.Store} })},
		{"BATCH-002", "a batch's runs returned in an order of their own", b(func(s base) runstate.RunStateStore { return reordersCreates{s.Store} })},
		{"BATCH-009", "an empty batch accepted, an oversized one cut to the limit", b(func(s base) runstate.RunStateStore { return trimsBatches{s.Store} })},
		{"BATCH-005", "a run updated twice in one batch", b(func(s base) runstate.RunStateStore { return updatesTwice{s.Store} })},
		{"BATCH-004", "one refused update blocks the batch", b(func(s base) runstate.RunStateStore { return blockingUpdates{s.Store} })},
		{"BATCH-006", "a batch claim handed out again", b(func(s base) runstate.RunStateStore { return &reissuesBatchClaims{Store: s.Store} })},
		{"BATCH-008", "Start ignored", b(func(s base) runstate.RunStateStore { return claimsWithoutStart{s.Store} })},
		{"WATCH-001", "a malformed run id watched", b(func(s base) runstate.RunStateStore { return watchesAnyID{s} })},
		{"WATCH-002", "a watch outlives its context", b(func(s base) runstate.RunStateStore { return watchOutlivesContext{s} })},
		{"WAKE-001", "wake times dropped", b(func(s base) runstate.RunStateStore { return wakeTimesDropped{s} })},
		{"WAKE-001", "parked runs never wake", b(func(s base) runstate.RunStateStore { return parkedNeverWake{s} })},
		{"WAKE-002", "wake times stored to the second", b(func(s base) runstate.RunStateStore { return wakeTimesToTheSecond{s} })},
		{"WAKE-002", "a leased run parked by releasing its lease", b(func(s base) runstate.RunStateStore { return parksByReleasing{s} })},
	}
}

// TestEveryMutantIsCaughtByItsRule runs each mutant against the rule that
// must catch it, and fails for every mutant that rule lets through.
func TestEveryMutantIsCaughtByItsRule(t *testing.T) {
	all := slices.Concat(targetMutants(), faultMutants(), driverMutants(), sharperMutants())
	for _, m := range mutants() {
		all = append(all, targetMutant{m.rule, m.name, func() conformance.Target { return mutantTarget(m.wrap) }})
	}
	caught := 0
	for _, m := range all {
		t.Run(m.rule+"/"+m.name, func(t *testing.T) {
			rules, err := conformance.Select([]string{m.rule}, nil)
			if err != nil {
				t.Fatal(err)
			}
			res := conformance.RunRule(context.Background(), m.target(), rules[0])
			if res.Outcome != conformance.Fail {
				t.Errorf("mutant %q: %s %s, want fail", m.name, res.Outcome, res.Detail)
				return
			}
			for _, f := range res.Failures {
				if f.Rule != m.rule || f.Expected == "" || f.Seen == "" {
					t.Errorf("failure %+v does not name the rule, the expectation and what was seen", f)
				}
			}
			caught++
			t.Logf("caught: %s", res.Failures[0])
		})
	}
	t.Logf("%d of %d mutants caught by their own rule", caught, len(all))
	covered := map[string]bool{}
	for _, m := range all {
		covered[m.rule] = true
	}
	var uncovered []string
	for _, r := range conformance.Rules() {
		if !covered[r.ID] {
			uncovered = append(uncovered, r.ID)
		}
	}
	t.Logf("rules without a mutant of their own: %v", uncovered)
}

// flaky answers some calls UNAVAILABLE: after doing them, or without.
type flaky struct {
	base
	after bool
	n     atomic.Int64
}

func (s *flaky) fail() bool { return s.n.Add(1)%20 == 0 }

func (s *flaky) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if !s.after && s.fail() {
		return runstate.RunSnapshot{}, runstate.Unavailable("connection lost", nil)
	}
	r, err := s.Store.UpdateRun(ctx, p)
	if s.after && s.fail() {
		return runstate.RunSnapshot{}, runstate.Unavailable("connection lost after the write", nil)
	}
	return r, err
}

func (s *flaky) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	if !s.after && s.fail() {
		return runstate.Claim{}, runstate.Unavailable("connection lost", nil)
	}
	cl, err := s.Store.ClaimNextRun(ctx, p)
	if s.after && s.fail() {
		return runstate.Claim{}, runstate.Unavailable("connection lost after the claim", nil)
	}
	return cl, err
}

// An UNAVAILABLE answer may mean the call took effect or not: a store that
// answers so, either way, is still linearizable.
func TestLinearizabilityAllowsUnavailableAnswers(t *testing.T) {
	rules, _ := conformance.Select([]string{"LIN"}, nil)
	for _, after := range []bool{false, true} {
		target := mutantTarget(func(m *memory.Store, _ *conformance.ManualClock) runstate.RunStateStore {
			return &flaky{base: base{m}, after: after}
		})
		for _, res := range conformance.RunRules(context.Background(), target, rules, nil) {
			if res.Outcome != conformance.Pass {
				t.Errorf("flaky (after=%v): %s %s %v", after, res.Rule.ID, res.Outcome, res.Failures)
			}
		}
	}
}

// watchesAnyID watches a malformed run id as if it were one.
type watchesAnyID struct{ base }

func (s watchesAnyID) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	if strings.ContainsAny(p.RunID, " !") {
		p.RunID = "stand-in"
	}
	return s.Store.WatchRun(ctx, p)
}

// watchOutlivesContext wakes as the store's watch does but never closes
// the channel.
type watchOutlivesContext struct{ base }

func (s watchOutlivesContext) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	inner, err := s.Store.WatchRun(context.WithoutCancel(ctx), p)
	return inner, err
}
