package driver

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/runstate/runstate"
)

// newRun builds the first snapshot of a run and its created audit event from
// params that passed prepareCreate. retried is the run named by p.RetryOf
// (nil when p.RetryOf is empty or names no run); the kit reads it before
// the insert, which decides as well as reading it within, since a retried
// run is terminal and never changes. now is the store's clock.
func newRun(p runstate.CreateRunParams, retried *runstate.RunSnapshot, now time.Time) (runstate.RunSnapshot, runstate.AuditEvent, error) {
	now = Timestamp(now)
	attempt := 1
	// A retry names a terminal run and is its next attempt (RUN-006).
	if p.RetryOf != "" {
		if retried == nil {
			return runstate.RunSnapshot{}, runstate.AuditEvent{}, runstate.InvalidArgument("retry_of", "run %s does not exist", p.RetryOf)
		}
		if !retried.Status.Terminal() {
			return runstate.RunSnapshot{}, runstate.AuditEvent{}, runstate.InvalidArgument("retry_of",
				"run %s is %s; only a terminal run can be retried", p.RetryOf, retried.Status)
		}
		attempt = retried.Attempt + 1
	}
	// Queued at version 1, attempt 1, with every field given; one time for
	// created_at and updated_at (RUN-005, CAS-001, FSM-009).
	s := runstate.RunSnapshot{
		RunID: p.RunID, WorkflowName: p.WorkflowName, Status: runstate.StatusQueued, Message: p.Message,
		Priority: p.Priority, Labels: maps.Clone(p.Labels), CreatedAt: now, UpdatedAt: now,
		Version: 1, RetryOf: p.RetryOf, Attempt: attempt,
	}
	for _, st := range p.Steps {
		step := runstate.Step{Name: st.Name, Status: runstate.StepQueued}
		for _, h := range st.Hosts {
			step.Hosts = append(step.Hosts, runstate.HostState{Host: h, Status: runstate.StepQueued})
		}
		s.Steps = append(s.Steps, step)
	}
	// The created event: seq 1, to queued, version 1 (AUD-001).
	ev := runstate.AuditEvent{RunID: s.RunID, Seq: 1, Kind: runstate.AuditCreated, To: runstate.StatusQueued, Time: now,
		Actor: p.Actor, Reason: p.Reason, Version: 1}
	return s, ev, nil
}

// updateOutcome is the decision applyUpdate takes. The kit has the store
// persist it in the Modify that read the run: when Write is set the
// snapshot is replaced, and Events are appended, numbered after the run's
// last Seq (AUD-002, AUD-005); then Snapshot and Err are the result of UpdateRun.
type updateOutcome struct {
	// Snapshot is the run after the update (the unchanged run when nothing is written).
	Snapshot runstate.RunSnapshot
	// Write says the snapshot changed and must be stored.
	Write bool
	// Events are the audit events to append, Seq left 0 for the store to number.
	Events []runstate.AuditEvent
	// Err is the error UpdateRun returns, after persisting the rest.
	Err error
}

// Result is what UpdateRun returns for this outcome.
func (o updateOutcome) Result() (runstate.RunSnapshot, error) {
	if o.Err != nil {
		return runstate.RunSnapshot{}, o.Err
	}
	return o.Snapshot, nil
}

// applyUpdate decides the outcome of p (which passed prepareUpdate) against
// the run's current snapshot and lease at the store's time now. It
// implements the fencing, compare-and-set, transition, diagnostic and audit
// rules; the store only loads and persists atomically.
// The checks run in the order of spec §1.6 and the first that fails
// decides (FSM-011): fence, version, terminal run, table, diagnostic, steps.
func applyUpdate(cur runstate.RunSnapshot, lease LeaseState, p runstate.UpdateRunParams, now time.Time) updateOutcome {
	u := pendingUpdate{cur: cur, p: p, to: runstate.RunStatus(p.Status),
		now: Timestamp(now)} // one time for everything this write sets (FSM-009)
	// A stale token is LEASE_LOST; no token is governed by the version alone
	// (LEASE-006, LEASE-019).
	if err := lease.checkFence(cur.RunID, p.LeaseToken); err != nil {
		return u.refused(err)
	}
	// A stale version is a conflict, even for a forbidden transition or a
	// terminal run (CAS-002, CAS-004).
	if cur.Version != p.ExpectedVersion {
		return u.refused(versionConflict(cur.RunID, p.ExpectedVersion, cur.Version))
	}
	if cur.Status.Terminal() {
		return u.rejectOnTerminal()
	}
	if u.to != "" && !runstate.CanTransition(cur.Status, u.to) {
		return u.failOnForbiddenTransition()
	}
	if err := u.checkDiagnostic(); err != nil {
		return u.refused(err)
	}
	if err := u.checkWake(lease); err != nil {
		return u.refused(err)
	}
	return u.accept()
}

// pendingUpdate is one update that applyUpdate decides: the run as read,
// the params, the status they ask for ("" for none) and the write's time.
type pendingUpdate struct {
	cur runstate.RunSnapshot
	p   runstate.UpdateRunParams
	to  runstate.RunStatus
	now time.Time
}

// refused is a refused write: nothing written and no event (AUD-004).
func (u pendingUpdate) refused(err error) updateOutcome {
	return updateOutcome{Snapshot: u.cur, Err: err}
}

// event is an audit event of this write from the run's current status.
// Every event carries the write's actor, reason and lease token (FSM-005, AUD-007).
func (u pendingUpdate) event(kind runstate.AuditKind, to runstate.RunStatus, code string, version int64) runstate.AuditEvent {
	return runstate.AuditEvent{RunID: u.cur.RunID, Kind: kind, From: u.cur.Status, To: to, Time: u.now,
		Actor: u.p.Actor, Reason: u.p.Reason, ErrorCode: code, Version: version, LeaseToken: u.p.LeaseToken}
}

// rejectOnTerminal: a terminal run never changes, so any write to it is a
// rejected transition, recorded at the run's version (FSM-003, FSM-010,
// FSM-005); nothing else is written.
func (u pendingUpdate) rejectOnTerminal() updateOutcome {
	to := u.to
	if to == "" {
		to = u.cur.Status
	}
	out := u.refused(invalidTransition(u.cur.RunID, u.cur.Status, to))
	out.Events = []runstate.AuditEvent{u.event(runstate.AuditRejected, to, string(runstate.CodeInvalidTransition), u.cur.Version)}
	return out
}

// failOnForbiddenTransition: a forbidden transition is refused (FSM-002)
// with a rejected event and the event of the run's move to failed (FSM-005).
// The rest of the patch is not applied: the run fails for the attempt, and
// what it was executing fails with it (FSM-004).
func (u pendingUpdate) failOnForbiddenTransition() updateOutcome {
	failedRun := u.cur.Clone()
	failedRun.Status = runstate.StatusFailed
	failedRun.FinishedAt = u.now
	failedRun.WakeAt = time.Time{}
	failedRun.UpdatedAt = u.now
	failedRun.Version++
	failedRun.Diagnostic = &runstate.Diagnostic{ErrorCode: string(runstate.CodeInvalidTransition), Retryable: false,
		Message: fmt.Sprintf("invalid transition %s -> %s was attempted", u.cur.Status, u.to)}
	if err := applySteps(&failedRun, runstate.StepsFollowingRun(u.cur, runstate.StepFailed), u.now); err != nil {
		return u.refused(err) // cannot happen: running steps may always fail
	}
	return updateOutcome{
		Snapshot: failedRun, Write: true,
		Events: []runstate.AuditEvent{
			u.event(runstate.AuditRejected, u.to, string(runstate.CodeInvalidTransition), u.cur.Version),
			u.event(runstate.AuditTransition, runstate.StatusFailed, string(runstate.CodeInvalidTransition), failedRun.Version),
		},
		Err: invalidTransition(u.cur.RunID, u.cur.Status, u.to),
	}
}

// checkDiagnostic refuses an update without the diagnostic its status needs.
func (u pendingUpdate) checkDiagnostic() error {
	// Failed, denied and timeout need a complete diagnostic (DIAG-001, DIAG-002).
	if u.p.Diagnostic != nil || u.to.RequiresDiagnostic() {
		if missing := diagnosticMissing(u.p.Diagnostic); missing != "" {
			return &runstate.Error{Code: runstate.CodeMissingDiagnostic, RunID: u.cur.RunID, Field: "diagnostic",
				Message: fmt.Sprintf("run %s: %s is required%s", u.cur.RunID, missing, enteringWhat(u.to))}
		}
	}
	// Interrupted needs a non-blank interrupted_reason (DIAG-003).
	if u.to == runstate.StatusInterrupted && strings.TrimSpace(u.p.InterruptedReason) == "" {
		return &runstate.Error{Code: runstate.CodeMissingDiagnostic, RunID: u.cur.RunID, Field: "interrupted_reason",
			Message: fmt.Sprintf("run %s: interrupted_reason is required when entering interrupted", u.cur.RunID)}
	}
	return nil
}

// checkWake refuses to park a run that cannot be parked (WAKE-002): one
// that is not queued or waiting after the write, or one a lease holds
// that the write does not release. A parked run holds nothing: a lease
// kept over it would keep it from every other worker however early it
// woke, and the lease's holder would have to renew it for the whole wait.
// Waking a run (a zero WakeAt) is always allowed.
func (u pendingUpdate) checkWake(lease LeaseState) error {
	if u.p.WakeAt == nil || u.p.WakeAt.IsZero() {
		return nil
	}
	after := u.to
	if after == "" {
		after = u.cur.Status
	}
	if !parkable(after) {
		return &runstate.Error{Code: runstate.CodeInvalidArgument, RunID: u.cur.RunID, Field: "wake_at",
			Message: fmt.Sprintf("run %s would be %s: only a queued or waiting run can be parked", u.cur.RunID, after)}
	}
	if lease.Held() && !u.p.ReleaseLease {
		holder := "an operator's write"
		if u.p.LeaseToken != 0 {
			holder = "this write"
		}
		return &runstate.Error{Code: runstate.CodeInvalidArgument, RunID: u.cur.RunID, Field: "wake_at",
			Message: fmt.Sprintf("run %s is leased (token %d) and %s does not release the lease: a parked run holds no lease, so its holder parks it with release_lease",
				u.cur.RunID, lease.Token, holder)}
	}
	return nil
}

// parkable reports whether a run of status st may be parked: one that
// has not begun or waits.
func parkable(st runstate.RunStatus) bool {
	return st == runstate.StatusQueued || st == runstate.StatusWaiting
}

// accept applies the patch once every earlier check passed. Step and host
// moves are checked last (FSM-007, FSM-008); the update changes only the
// fields it sets (RUN-009).
func (u pendingUpdate) accept() updateOutcome {
	next := u.cur.Clone()
	if err := applySteps(&next, u.p.Steps, u.now); err != nil {
		return u.refused(err)
	}
	patchRunFields(&next, u.p)
	next.Version++ // exactly one per accepted write (CAS-001)
	next.UpdatedAt = u.now
	// A write without a status change records no event (AUD-003).
	if u.to == "" {
		return updateOutcome{Snapshot: next, Write: true}
	}
	u.enterStatus(&next)
	code := ""
	if u.p.Diagnostic != nil {
		code = u.p.Diagnostic.ErrorCode
	}
	return updateOutcome{Snapshot: next, Write: true,
		Events: []runstate.AuditEvent{u.event(runstate.AuditTransition, u.to, code, next.Version)}}
}

// patchRunFields sets the run's own fields that p gives (RUN-009).
func patchRunFields(next *runstate.RunSnapshot, p runstate.UpdateRunParams) {
	if p.Message != nil {
		next.Message = *p.Message
	}
	if p.Priority != nil {
		next.Priority = *p.Priority
	}
	if p.Labels != nil { // given labels replace the run's (RUN-009)
		next.Labels = maps.Clone(p.Labels)
		if len(next.Labels) == 0 {
			next.Labels = nil
		}
	}
	if p.Diagnostic != nil { // stored as written (DIAG-004)
		d := *p.Diagnostic
		d.Details = maps.Clone(p.Diagnostic.Details)
		next.Diagnostic = &d
	}
	if p.WakeAt != nil { // zero wakes the run
		next.WakeAt = *p.WakeAt
	}
}

// enterStatus moves next to the allowed status asked for (FSM-001), whose
// one transition event carries the diagnostic's error_code (AUD-002,
// DIAG-004). started_at is set once, finished_at on a terminal status (FSM-009).
func (u pendingUpdate) enterStatus(next *runstate.RunSnapshot) {
	next.Status = u.to
	if !parkable(u.to) { // a run that begins or ends is parked no more (WAKE-002)
		next.WakeAt = time.Time{}
	}
	if u.to == runstate.StatusRunning && next.StartedAt.IsZero() {
		next.StartedAt = u.now
	}
	if u.to.Terminal() {
		next.FinishedAt = u.now
	}
	if u.to == runstate.StatusInterrupted {
		next.InterruptedReason = u.p.InterruptedReason
	}
}

func enteringWhat(to runstate.RunStatus) string {
	if to.RequiresDiagnostic() {
		return " when entering " + string(to)
	}
	return " in a diagnostic"
}

// applySteps applies step and host patches to s, enforcing the step table
// (FSM-007, FSM-008). Unknown steps and hosts are added as queued first, and
// host output and errors are stored (RUN-009).
func applySteps(s *runstate.RunSnapshot, patches []runstate.StepPatch, now time.Time) error {
	hostStates := 0
	for _, st := range s.Steps {
		hostStates += len(st.Hosts)
	}
	for _, sp := range patches {
		step, ok := s.Step(sp.Name)
		if !ok {
			if len(s.Steps) >= runstate.MaxSteps {
				return runstate.InvalidArgument("steps", "run %s already has %d steps, the limit", s.RunID, runstate.MaxSteps)
			}
			s.Steps = append(s.Steps, runstate.Step{Name: sp.Name, Status: runstate.StepQueued})
			step = &s.Steps[len(s.Steps)-1]
		}
		if sp.Status != "" {
			if err := moveStep(s.RunID, sp.Name, "", &step.Status, &step.StartedAt, &step.FinishedAt, runstate.StepStatus(sp.Status), now); err != nil {
				return err
			}
		}
		for _, hp := range sp.Hosts {
			host, ok := step.Host(hp.Host)
			if !ok {
				if len(step.Hosts) >= runstate.MaxHostsPerStep {
					return runstate.InvalidArgument("hosts", "step %q already has %d hosts, the limit", sp.Name, runstate.MaxHostsPerStep)
				}
				if hostStates++; hostStates > runstate.MaxHostStates {
					return runstate.InvalidArgument("hosts", "run %s would have more than %d host states", s.RunID, runstate.MaxHostStates)
				}
				step.Hosts = append(step.Hosts, runstate.HostState{Host: hp.Host, Status: runstate.StepQueued})
				host = &step.Hosts[len(step.Hosts)-1]
			}
			if hp.Status != "" {
				if err := moveStep(s.RunID, sp.Name, hp.Host, &host.Status, &host.StartedAt, &host.FinishedAt, runstate.StepStatus(hp.Status), now); err != nil {
					return err
				}
			}
			if hp.OutputSummary != nil {
				host.OutputSummary = *hp.OutputSummary
			}
			if hp.Error != nil {
				host.Error = *hp.Error
			}
		}
	}
	return nil
}

// moveStep moves one step or host by the step table; a refusal names the
// step, host, from and to (FSM-007, FSM-008). It sets the times of FSM-009.
func moveStep(runID, step, host string, status *runstate.StepStatus, started, finished *time.Time, to runstate.StepStatus, now time.Time) error {
	if !runstate.CanStepTransition(*status, to) {
		where := fmt.Sprintf("step %q", step)
		if host != "" {
			where += fmt.Sprintf(" host %q", host)
		}
		return &runstate.Error{Code: runstate.CodeInvalidTransition, RunID: runID, Step: step, Host: host, From: string(*status), To: string(to),
			Message: fmt.Sprintf("run %s %s: transition %s -> %s is not allowed", runID, where, *status, to)}
	}
	*status = to
	if to == runstate.StepRunning && started.IsZero() {
		*started = now
	}
	if to.Terminal() {
		*finished = now
	}
	return nil
}
