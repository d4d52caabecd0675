package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/runstate/runstate/spec"
)

func init() {
	register("FSM-001", "Every transition the table allows succeeds and moves the run to the requested status.", none, checkAllowedPairs)
	register("FSM-002", "Every transition the table forbids fails with INVALID_STATE_TRANSITION naming from and to.", none, checkForbiddenPairsError)
	register("FSM-003", "A forbidden transition leaves a terminal run exactly as it was.", none, checkForbiddenFromTerminal)
	register("FSM-004", "A forbidden transition moves a non-terminal run to failed with diagnostic error_code INVALID_STATE_TRANSITION.", none, checkForbiddenFromNonTerminal)
	register("FSM-005", "A forbidden transition records exactly one rejected audit event (plus, for a non-terminal run, the event of its move to failed).", none, checkForbiddenAudit)
	register("FSM-006", "Input aliases created and pending mean queued; stored and returned status is queued.", none, checkAliases)
	register("FSM-007", "Step statuses follow the step table; a forbidden step transition fails with INVALID_STATE_TRANSITION and changes nothing.", none, checkStepPairs(false))
	register("FSM-008", "Host statuses follow the step table; a forbidden host transition fails with INVALID_STATE_TRANSITION and changes nothing.", none, checkStepPairs(true))
	register("FSM-009", "started_at is set when a run, step or host first enters running; finished_at when it enters a terminal status.", none, checkTimestamps)
	register("FSM-010", "A terminal run accepts no further write of any kind.", none, checkTerminalFrozen)
}

// pair is the observed outcome of one (from, to) update on a fresh run.
type pair struct {
	from, to      spec.RunStatus
	before, after runState
	err           error
}

func (p pair) String() string { return fmt.Sprintf("%s -> %s", p.from, p.to) }

// newEvents returns the audit events the update added.
func (p pair) newEvents() []spec.AuditEvent {
	return p.after.events[min(len(p.before.events), len(p.after.events)):]
}

// eachPair tries all 81 (from, to) pairs on fresh runs, in table order.
func (c *C) eachPair(filter func(from, to spec.RunStatus) bool, fn func(pair)) {
	for _, from := range spec.RunStatuses() {
		for _, to := range spec.RunStatuses() {
			if !filter(from, to) {
				continue
			}
			run := c.runIn(from, spec.CreateRunParams{})
			p := pair{from: from, to: to, before: c.state(run.RunID)}
			_, p.err = c.store.UpdateRun(c.ctx, transition(run, to))
			p.after = c.state(run.RunID)
			fn(p)
		}
	}
}

func allowed(from, to spec.RunStatus) bool   { return spec.CanTransition(from, to) }
func forbidden(from, to spec.RunStatus) bool { return !spec.CanTransition(from, to) }

func checkAllowedPairs(c *C) {
	c.eachPair(allowed, func(p pair) {
		if p.err != nil {
			c.Errorf(p.String()+" to succeed", "%s", describeErr(p.err))
			return
		}
		if p.after.snap.Status != p.to || p.after.snap.Version != p.before.snap.Version+1 {
			c.Errorf(p.String()+" to leave the run in "+string(p.to)+" at version+1",
				"status %s version %d (was %d)", p.after.snap.Status, p.after.snap.Version, p.before.snap.Version)
		}
	})
}

func checkForbiddenPairsError(c *C) {
	c.eachPair(forbidden, func(p pair) {
		if !c.expectErr(p.err, spec.ErrInvalidTransition, p.String()) {
			return
		}
		var e *spec.Error
		if !errors.As(p.err, &e) || e.From != string(p.from) || e.To != string(p.to) {
			c.Errorf(p.String()+": the error to carry From and To", "%+v", e)
		}
	})
}

func checkForbiddenFromTerminal(c *C) {
	c.eachPair(func(from, to spec.RunStatus) bool { return from.Terminal() && forbidden(from, to) }, func(p pair) {
		if a, b := jsonOf(p.before.snap), jsonOf(p.after.snap); a != b {
			c.Errorf(p.String()+" to leave the terminal run unchanged", "%s became %s", a, b)
		}
	})
}

func checkForbiddenFromNonTerminal(c *C) {
	c.eachPair(func(from, to spec.RunStatus) bool { return !from.Terminal() && forbidden(from, to) }, func(p pair) {
		s := p.after.snap
		if s.Status != spec.StatusFailed || s.Diagnostic == nil || s.Diagnostic.ErrorCode != string(spec.CodeInvalidTransition) {
			c.Errorf(p.String()+" to move the run to failed with diagnostic INVALID_STATE_TRANSITION",
				"status %s diagnostic %s", s.Status, jsonOf(s.Diagnostic))
			return
		}
		if s.Version != p.before.snap.Version+1 || s.FinishedAt.IsZero() {
			c.Errorf(p.String()+" to bump the version once and set finished_at", "version %d (was %d), finished_at %v",
				s.Version, p.before.snap.Version, s.FinishedAt)
		}
	})
}

func checkForbiddenAudit(c *C) {
	c.eachPair(forbidden, func(p pair) {
		evs := p.newEvents()
		want := 1
		if !p.from.Terminal() {
			want = 2
		}
		if len(evs) != want {
			c.Errorf(fmt.Sprintf("%s to add %d audit events", p, want), "%d: %s", len(evs), jsonOf(evs))
			return
		}
		rej := evs[0]
		if rej.Kind != spec.AuditRejected || rej.From != p.from || rej.To != p.to || rej.ErrorCode != string(spec.CodeInvalidTransition) {
			c.Errorf(p.String()+": a rejected event from "+string(p.from)+" to "+string(p.to)+" with error_code INVALID_STATE_TRANSITION", "%s", jsonOf(rej))
		}
		if want == 2 {
			ev := evs[1]
			if ev.Kind != spec.AuditTransition || ev.From != p.from || ev.To != spec.StatusFailed ||
				ev.ErrorCode != string(spec.CodeInvalidTransition) || ev.Version != p.after.snap.Version {
				c.Errorf(p.String()+": then a transition event to failed at the new version", "%s", jsonOf(ev))
			}
		}
	})
}

func checkAliases(c *C) {
	for _, alias := range []string{"created", "pending"} {
		run := c.create(spec.CreateRunParams{Status: alias})
		if run.Status != spec.StatusQueued || c.get(run.RunID).Status != spec.StatusQueued {
			c.Errorf("a run created as "+alias+" to be queued", "%s", run.Status)
		}
		page, err := c.store.ListRuns(c.ctx, spec.ListRunsParams{Statuses: []string{alias}})
		if err != nil || len(page.Runs) == 0 {
			c.Errorf("listing by status "+alias+" to find queued runs", "%d runs, %s", len(page.Runs), describeErr(err))
		}
	}
}

// checkStepPairs tries every (from, to) pair of the step table on a step,
// or on a host within a step.
func checkStepPairs(host bool) func(*C) {
	patch := func(run spec.RunSnapshot, to spec.StepStatus) spec.UpdateRunParams {
		sp := spec.StepPatch{Name: "build"}
		if host {
			sp.Hosts = []spec.HostPatch{{Host: "web-1", Status: string(to)}}
		} else {
			sp.Status = string(to)
		}
		return spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{sp}, Actor: worker}
	}
	status := func(s spec.RunSnapshot) spec.StepStatus {
		st, ok := s.Step("build")
		if !ok {
			return ""
		}
		if !host {
			return st.Status
		}
		h, ok := st.Host("web-1")
		if !ok {
			return ""
		}
		return h.Status
	}
	level := "step"
	if host {
		level = "host"
	}
	return func(c *C) {
		for _, from := range spec.StepStatuses() {
			for _, to := range spec.StepStatuses() {
				run := c.runIn(spec.StatusRunning, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build", Hosts: []string{"web-1"}}}})
				for _, st := range stepPathTo(from) {
					run = c.update(patch(run, st))
				}
				before := c.state(run.RunID)
				_, err := c.store.UpdateRun(c.ctx, patch(run, to))
				what := fmt.Sprintf("%s %s -> %s", level, from, to)
				if spec.CanStepTransition(from, to) {
					if err != nil {
						c.Errorf(what+" to succeed", "%s", describeErr(err))
					} else if got := status(c.get(run.RunID)); got != to {
						c.Errorf(what+" to leave it "+string(to), "%s", got)
					}
					continue
				}
				if c.expectErr(err, spec.ErrInvalidTransition, what) {
					var e *spec.Error
					if errors.As(err, &e) && (e.Step != "build" || e.From != string(from) || e.To != string(to) || (host && e.Host != "web-1")) {
						c.Errorf(what+": the error to name step, host, from and to", "%+v", e)
					}
				}
				c.expectUnchanged(before, "after "+what+" is refused")
			}
		}
	}
}

func checkTimestamps(c *C) {
	tick := func() { c.pass(2 * time.Millisecond) } // distinct microsecond timestamps
	run := c.create(spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build", Hosts: []string{"web-1"}}}})
	if !run.StartedAt.IsZero() || !run.FinishedAt.IsZero() || run.CreatedAt.IsZero() || !run.UpdatedAt.Equal(run.CreatedAt) {
		c.Errorf("a new run with created_at = updated_at and no started_at or finished_at", "%s", jsonOf(run))
	}
	tick()
	run = c.move(run, spec.StatusRunning)
	started := run.StartedAt
	if !started.After(run.CreatedAt) || !run.FinishedAt.IsZero() || !run.UpdatedAt.Equal(started) {
		c.Errorf("started_at set (after created_at) when the run enters running", "%s", jsonOf(run))
	}
	tick()
	run = c.move(c.move(run, spec.StatusWaiting), spec.StatusRunning)
	if !run.StartedAt.Equal(started) {
		c.Errorf("started_at kept when the run returns from waiting", "%v became %v", started, run.StartedAt)
	}
	tick()
	run = c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{
		{Name: "build", Status: "running", Hosts: []spec.HostPatch{{Host: "web-1", Status: "running"}}}}})
	st, _ := run.Step("build")
	h, _ := st.Host("web-1")
	if !st.StartedAt.After(started) || !h.StartedAt.Equal(st.StartedAt) || !st.FinishedAt.IsZero() {
		c.Errorf("step and host started_at set when they enter running", "%s", jsonOf(st))
	}
	tick()
	run = c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: "success", Steps: []spec.StepPatch{
		{Name: "build", Status: "success", Hosts: []spec.HostPatch{{Host: "web-1", Status: "success"}}}}})
	st, _ = run.Step("build")
	h, _ = st.Host("web-1")
	if !run.FinishedAt.After(st.StartedAt) || !st.FinishedAt.Equal(run.FinishedAt) || !h.FinishedAt.Equal(run.FinishedAt) {
		c.Errorf("finished_at set on the run, step and host as they finish", "%s", jsonOf(run))
	}
	if got := c.get(run.RunID); jsonOf(got) != jsonOf(run) {
		c.Errorf("GetRun to return what UpdateRun returned", "%s vs %s", jsonOf(got), jsonOf(run))
	}
}

func checkTerminalFrozen(c *C) {
	for _, st := range spec.RunStatuses() {
		if !st.Terminal() {
			continue
		}
		run := c.runIn(st, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build"}}})
		for name, p := range map[string]spec.UpdateRunParams{
			"a message":  {Message: ptr("late")},
			"a priority": {Priority: ptr(9)},
			"a step":     {Steps: []spec.StepPatch{{Name: "build", Status: "running"}}},
			"labels":     {Labels: map[string]string{"late": "yes"}},
		} {
			p.RunID, p.ExpectedVersion = run.RunID, run.Version
			before := c.state(run.RunID)
			_, err := c.store.UpdateRun(c.ctx, p)
			c.expectErr(err, spec.ErrInvalidTransition, "writing "+name+" to a "+string(st)+" run")
			if after := c.get(run.RunID); jsonOf(after) != jsonOf(before.snap) {
				c.Errorf("the "+string(st)+" run unchanged after "+name+" was refused", "%s", jsonOf(after))
			}
		}
	}
}
