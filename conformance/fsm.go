package conformance

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("FSM-001", "Every transition the table allows succeeds and moves the run to the requested status.", none, checkAllowedPairs)
	register("FSM-002", "Every transition the table forbids fails with INVALID_STATE_TRANSITION naming from and to.", none, checkForbiddenPairsError)
	register("FSM-003", "A forbidden transition leaves a terminal run exactly as it was.", none, checkForbiddenFromTerminal)
	register("FSM-004", "A forbidden transition moves a non-terminal run to failed with diagnostic error_code INVALID_STATE_TRANSITION; the rest of the patch is not applied and running steps and hosts fail with it.", none, checkForbiddenFromNonTerminal)
	register("FSM-005", "A forbidden transition records exactly one rejected audit event at the version it was refused at (plus, for a non-terminal run, the event of its move to failed at the new version), with the write's actor, reason and token.", none, checkForbiddenAudit)
	register("FSM-006", "Input aliases created and pending (lower case) mean queued wherever a run, step or host status is input (create, update, step and host patches, listing and claim statuses); stored and returned status is queued.", none, checkAliases)
	register("FSM-007", "Step statuses follow the step table; a forbidden step transition fails with INVALID_STATE_TRANSITION and changes nothing.", none, checkStepPairs(false))
	register("FSM-008", "Host statuses follow the step table; a forbidden host transition fails with INVALID_STATE_TRANSITION and changes nothing.", none, checkStepPairs(true))
	register("FSM-009", "Every time a write sets is that write's updated_at: created_at on create, started_at when first running, finished_at when terminal, for the run, its steps and hosts.", none, checkTimestamps)
	register("FSM-010", "A terminal run accepts no further write of any kind; each refused write records one rejected event.", none, checkTerminalFrozen)
	register("FSM-011", "UpdateRun decides in the order of the spec: token, version, terminal run, table, diagnostic, steps; the earlier check's error wins.", none, checkOrderOfChecks)
}

// pair is the observed outcome of one (from, to) update on a fresh run.
type pair struct {
	from, to      runstate.RunStatus
	before, after runState
	err           error
}

func (p pair) String() string { return fmt.Sprintf("%s -> %s", p.from, p.to) }

// newEvents returns the audit events the update added.
func (p pair) newEvents() []runstate.AuditEvent {
	return p.after.events[min(len(p.before.events), len(p.after.events)):]
}

// eachPair tries all 81 (from, to) pairs on fresh runs, in table order.
func (c *checkState) eachPair(filter func(from, to runstate.RunStatus) bool, fn func(pair)) {
	for _, from := range runstate.RunStatuses() {
		for _, to := range runstate.RunStatuses() {
			if !filter(from, to) {
				continue
			}
			run := c.runIn(from, runstate.CreateRunParams{})
			p := pair{from: from, to: to, before: c.state(run.RunID)}
			// The clock moves between the run's last write and this one, so
			// that a time copied from the run is told from the write's own.
			c.pass(time.Millisecond)
			_, p.err = c.store.UpdateRun(c.ctx, transition(run, to))
			p.after = c.state(run.RunID)
			fn(p)
		}
	}
}

func allowed(from, to runstate.RunStatus) bool   { return runstate.CanTransition(from, to) }
func forbidden(from, to runstate.RunStatus) bool { return !runstate.CanTransition(from, to) }

func checkAllowedPairs(c *checkState) {
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

func checkForbiddenPairsError(c *checkState) {
	c.eachPair(forbidden, func(p pair) {
		if !c.expectErr(p.err, runstate.ErrInvalidTransition, p.String()) {
			return
		}
		var e *runstate.Error
		if !errors.As(p.err, &e) || e.From != string(p.from) || e.To != string(p.to) {
			c.Errorf(p.String()+": the error to carry From and To", "%+v", e)
		}
	})
}

func checkForbiddenFromTerminal(c *checkState) {
	c.eachPair(func(from, to runstate.RunStatus) bool { return from.Terminal() && forbidden(from, to) }, func(p pair) {
		if a, b := jsonOf(p.before.snap), jsonOf(p.after.snap); a != b {
			c.Errorf(p.String()+" to leave the terminal run unchanged", "%s became %s", a, b)
		}
	})
}

func checkForbiddenFromNonTerminal(c *checkState) {
	c.eachPair(func(from, to runstate.RunStatus) bool { return !from.Terminal() && forbidden(from, to) }, func(p pair) {
		s := p.after.snap
		if s.Status != runstate.StatusFailed || s.Diagnostic == nil || s.Diagnostic.ErrorCode != string(runstate.CodeInvalidTransition) || s.Diagnostic.Retryable {
			c.Errorf(p.String()+" to move the run to failed with a non-retryable diagnostic INVALID_STATE_TRANSITION",
				"status %s diagnostic %s", s.Status, jsonOf(s.Diagnostic))
			return
		}
		if s.Version != p.before.snap.Version+1 || s.FinishedAt.IsZero() || !s.FinishedAt.Equal(s.UpdatedAt) {
			c.Errorf(p.String()+" to bump the version once and set finished_at to the write's time", "version %d (was %d), finished_at %v, updated_at %v",
				s.Version, p.before.snap.Version, s.FinishedAt, s.UpdatedAt)
		}
	})
	// The rest of the patch is not applied; running steps and hosts fail
	// with the run, the others keep their state.
	for _, from := range []runstate.RunStatus{runstate.StatusQueued, runstate.StatusRunning, runstate.StatusWaiting} {
		run := c.runIn(from, runstate.CreateRunParams{Message: "before", Priority: 3, Labels: map[string]string{"k": "v"},
			Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2"}}, {Name: "later", Hosts: []string{"h1"}}}})
		if from != runstate.StatusQueued {
			run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{
				{Name: "build", Status: "running", Hosts: []runstate.HostPatch{{Host: "h1", Status: "running"}}}}})
		}
		to := runstate.StatusSuccess
		if from == runstate.StatusRunning {
			to = runstate.StatusQueued
		}
		p := transition(run, to)
		p.Message, p.Priority, p.Labels = ptr("after"), ptr(9), map[string]string{"k": "changed"}
		p.Steps = []runstate.StepPatch{{Name: "later", Status: "skipped"}}
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectErr(err, runstate.ErrInvalidTransition, fmt.Sprintf("%s -> %s with a patch", from, to))
		got := c.get(run.RunID)
		if got.Message != "before" || got.Priority != 3 || got.Labels["k"] != "v" {
			c.Errorf(fmt.Sprintf("%s -> %s: the rest of the patch (message, priority, labels) not applied", from, to),
				"message %q priority %d labels %v", got.Message, got.Priority, got.Labels)
		}
		build, _ := got.Step("build")
		later, _ := got.Step("later")
		want := map[string]runstate.StepStatus{"build": runstate.StepQueued, "build/h1": runstate.StepQueued, "build/h2": runstate.StepQueued, "later": runstate.StepQueued}
		if from != runstate.StatusQueued {
			want["build"], want["build/h1"] = runstate.StepFailed, runstate.StepFailed
		}
		have := map[string]runstate.StepStatus{"build": build.Status, "build/h1": build.Hosts[0].Status, "build/h2": build.Hosts[1].Status, "later": later.Status}
		if fmt.Sprint(have) != fmt.Sprint(want) || (from != runstate.StatusQueued && (!build.FinishedAt.Equal(got.FinishedAt) || !build.Hosts[0].FinishedAt.Equal(got.FinishedAt))) {
			c.Errorf(fmt.Sprintf("%s -> %s: running steps and hosts failed with the run at its finished_at, the others unchanged (%v)", from, to, want),
				"%v, %s", have, jsonOf(got.Steps))
		}
	}
}

func checkForbiddenAudit(c *checkState) {
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
		if rej.Kind != runstate.AuditRejected || rej.From != p.from || rej.To != p.to || rej.ErrorCode != string(runstate.CodeInvalidTransition) ||
			rej.Version != p.before.snap.Version || !c.sameWriter(rej) {
			c.Errorf(p.String()+": a rejected event from "+string(p.from)+" to "+string(p.to)+
				" with error_code INVALID_STATE_TRANSITION, the version refused at and the write's actor and reason", "%s", jsonOf(rej))
		}
		if last := p.before.events[len(p.before.events)-1]; !rej.Time.After(last.Time) || (want == 2 && !rej.Time.Equal(p.after.snap.UpdatedAt)) {
			c.Errorf(p.String()+": the rejected event at the time of the refusal (for a non-terminal run, the updated_at of its move to failed), after the run's last write at "+last.Time.String(),
				"%s, updated_at %v", jsonOf(rej), p.after.snap.UpdatedAt)
		}
		if want == 2 {
			ev := evs[1]
			if ev.Kind != runstate.AuditTransition || ev.From != p.from || ev.To != runstate.StatusFailed ||
				ev.ErrorCode != string(runstate.CodeInvalidTransition) || ev.Version != p.after.snap.Version || !c.sameWriter(ev) {
				c.Errorf(p.String()+": then a transition event to failed at the new version, with the write's actor and reason", "%s", jsonOf(ev))
			}
		}
	})
}

// sameWriter reports whether e carries the actor and reason transition() writes with.
func (c *checkState) sameWriter(e runstate.AuditEvent) bool {
	return e.Actor == c.recorded(worker) && e.Reason == "conformance check"
}

func checkAliases(c *checkState) {
	for _, alias := range []string{"created", "pending"} {
		run := c.create(runstate.CreateRunParams{Status: alias})
		if run.Status != runstate.StatusQueued || c.get(run.RunID).Status != runstate.StatusQueued {
			c.Errorf("a run created as "+alias+" to be queued", "%s", run.Status)
		}
		page, err := c.store.ListRuns(c.ctx, runstate.ListRunsParams{Statuses: []string{alias}})
		if err != nil || len(page.Runs) == 0 {
			c.Errorf("listing by status "+alias+" to find queued runs", "%d runs, %s", len(page.Runs), describeErr(err))
		}
	}
}

// checkStepPairs tries every (from, to) pair of the step table on a step,
// or on a host within a step.
func checkStepPairs(host bool) func(*checkState) {
	patch := func(run runstate.RunSnapshot, to runstate.StepStatus) runstate.UpdateRunParams {
		sp := runstate.StepPatch{Name: "build"}
		if host {
			sp.Hosts = []runstate.HostPatch{{Host: "web-1", Status: string(to)}}
		} else {
			sp.Status = string(to)
		}
		return runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{sp}, Actor: worker}
	}
	status := func(s runstate.RunSnapshot) runstate.StepStatus {
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
	return func(c *checkState) {
		for _, from := range runstate.StepStatuses() {
			for _, to := range runstate.StepStatuses() {
				run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"web-1"}}}})
				for _, st := range stepPathTo(from) {
					run = c.update(patch(run, st))
				}
				before := c.state(run.RunID)
				_, err := c.store.UpdateRun(c.ctx, patch(run, to))
				what := fmt.Sprintf("%s %s -> %s", level, from, to)
				if runstate.CanStepTransition(from, to) {
					if err != nil {
						c.Errorf(what+" to succeed", "%s", describeErr(err))
					} else if got := status(c.get(run.RunID)); got != to {
						c.Errorf(what+" to leave it "+string(to), "%s", got)
					}
					continue
				}
				if c.expectErr(err, runstate.ErrInvalidTransition, what) {
					var e *runstate.Error
					if errors.As(err, &e) && (e.Step != "build" || e.From != string(from) || e.To != string(to) || (host && e.Host != "web-1")) {
						c.Errorf(what+": the error to name step, host, from and to", "%+v", e)
					}
					if host && !strings.Contains(err.Error(), "web-1") {
						c.Errorf(what+": the error's message to name the host", "%q", err.Error())
					}
				}
				c.expectUnchanged(before, "after "+what+" is refused")
			}
		}
		// A step or host the patch names first is added as queued, then
		// moved: it may start only in a status queued may move to.
		for _, to := range runstate.StepStatuses() {
			if to == runstate.StepQueued {
				continue
			}
			run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"web-1"}}}})
			sp := runstate.StepPatch{Name: "fresh", Status: string(to)}
			if host {
				sp = runstate.StepPatch{Name: "build", Hosts: []runstate.HostPatch{{Host: "web-2", Status: string(to)}}}
			}
			before := c.state(run.RunID)
			_, err := c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{sp}})
			what := fmt.Sprintf("a new %s that starts in %s", level, to)
			if runstate.CanStepTransition(runstate.StepQueued, to) {
				if err != nil {
					c.Errorf(what+" to be added", "%s", describeErr(err))
				}
				continue
			}
			c.expectErr(err, runstate.ErrInvalidTransition, what+" (queued -> "+string(to)+")")
			c.expectUnchanged(before, "after "+what+" is refused")
		}
	}
}

func checkTimestamps(c *checkState) {
	tick := func() { c.pass(2 * time.Millisecond) } // distinct microsecond timestamps
	run := c.create(runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"web-1"}}}})
	if !run.StartedAt.IsZero() || !run.FinishedAt.IsZero() || run.CreatedAt.IsZero() || !run.UpdatedAt.Equal(run.CreatedAt) {
		c.Errorf("a new run with created_at = updated_at and no started_at or finished_at", "%s", jsonOf(run))
	}
	tick()
	run = c.move(run, runstate.StatusRunning)
	started := run.StartedAt
	if !started.After(run.CreatedAt) || !run.FinishedAt.IsZero() || !run.UpdatedAt.Equal(started) {
		c.Errorf("started_at set (after created_at) when the run enters running", "%s", jsonOf(run))
	}
	tick()
	run = c.move(c.move(run, runstate.StatusWaiting), runstate.StatusRunning)
	if !run.StartedAt.Equal(started) {
		c.Errorf("started_at kept when the run returns from waiting", "%v became %v", started, run.StartedAt)
	}
	tick()
	run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{
		{Name: "build", Status: "running", Hosts: []runstate.HostPatch{{Host: "web-1", Status: "running"}}}}})
	st, _ := run.Step("build")
	h, _ := st.Host("web-1")
	if !st.StartedAt.After(started) || !st.StartedAt.Equal(run.UpdatedAt) || !h.StartedAt.Equal(st.StartedAt) || !st.FinishedAt.IsZero() {
		c.Errorf("step and host started_at = the updated_at of the write that made them running", "%s, updated_at %v", jsonOf(st), run.UpdatedAt)
	}
	tick()
	run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: "success", Steps: []runstate.StepPatch{
		{Name: "build", Status: "success", Hosts: []runstate.HostPatch{{Host: "web-1", Status: "success"}}}}})
	st, _ = run.Step("build")
	h, _ = st.Host("web-1")
	if !run.FinishedAt.After(st.StartedAt) || !run.FinishedAt.Equal(run.UpdatedAt) || !st.FinishedAt.Equal(run.FinishedAt) || !h.FinishedAt.Equal(run.FinishedAt) {
		c.Errorf("finished_at of the run, step and host = the updated_at of the write that finished them", "%s", jsonOf(run))
	}
	if got := c.get(run.RunID); jsonOf(got) != jsonOf(run) {
		c.Errorf("GetRun to return what UpdateRun returned", "%s vs %s", jsonOf(got), jsonOf(run))
	}
}

func checkTerminalFrozen(c *checkState) {
	for _, st := range runstate.RunStatuses() {
		if !st.Terminal() {
			continue
		}
		run := c.runIn(st, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
		for name, p := range map[string]runstate.UpdateRunParams{
			"a message":  {Message: ptr("late")},
			"a priority": {Priority: ptr(9)},
			"a step":     {Steps: []runstate.StepPatch{{Name: "build", Status: "running"}}},
			"labels":     {Labels: map[string]string{"late": "yes"}},
		} {
			p.RunID, p.ExpectedVersion, p.Actor, p.Reason = run.RunID, run.Version, worker, "late write"
			before := c.state(run.RunID)
			_, err := c.store.UpdateRun(c.ctx, p)
			if c.expectErr(err, runstate.ErrInvalidTransition, "writing "+name+" to a "+string(st)+" run") {
				var e *runstate.Error
				if errors.As(err, &e) && (e.From != string(st) || e.To != string(st)) {
					c.Errorf("writing "+name+" to a "+string(st)+" run: the error from and to "+string(st), "%+v", e)
				}
			}
			after := c.state(run.RunID)
			if jsonOf(after.snap) != jsonOf(before.snap) {
				c.Errorf("the "+string(st)+" run unchanged after "+name+" was refused", "%s", jsonOf(after.snap))
			}
			added := after.events[min(len(before.events), len(after.events)):]
			if len(added) != 1 || added[0].Kind != runstate.AuditRejected || added[0].From != st || added[0].To != st ||
				added[0].Version != run.Version || added[0].Reason != "late write" {
				c.Errorf("one rejected event "+string(st)+" -> "+string(st)+" for "+name+" written to a "+string(st)+" run", "%s", jsonOf(added))
			}
		}
	}
}

// checkOrderOfChecks tries updates that fail two checks of §1.6 at once:
// the earlier check decides, and only its effect happens.
func checkOrderOfChecks(c *checkState) {
	type attempt struct {
		name  string
		setup func() (runstate.RunSnapshot, runstate.UpdateRunParams)
		want  error
		moved bool // the run is moved to failed (a forbidden transition decided)
	}
	stale := func(p runstate.UpdateRunParams) runstate.UpdateRunParams { p.ExpectedVersion--; return p }
	attempts := []attempt{
		{"a stale token and a stale version", func() (runstate.RunSnapshot, runstate.UpdateRunParams) {
			run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
			first := c.claim(run.RunID, owner("w1"))
			c.expire()
			c.claim(run.RunID, owner("w2"))
			run = c.get(run.RunID)
			p := stale(transition(run, runstate.StatusWaiting))
			p.LeaseToken = first.Lease.Token
			return run, p
		}, runstate.ErrLeaseLost, false},
		{"a stale version on a terminal run", func() (runstate.RunSnapshot, runstate.UpdateRunParams) {
			run := c.runIn(runstate.StatusSuccess, runstate.CreateRunParams{})
			return run, stale(transition(run, runstate.StatusRunning))
		}, runstate.ErrVersionConflict, false},
		{"a stale version and a forbidden transition", func() (runstate.RunSnapshot, runstate.UpdateRunParams) {
			run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
			return run, stale(transition(run, runstate.StatusQueued))
		}, runstate.ErrVersionConflict, false},
		{"a forbidden transition without the diagnostic it would need", func() (runstate.RunSnapshot, runstate.UpdateRunParams) {
			run := c.runIn(runstate.StatusQueued, runstate.CreateRunParams{})
			return run, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: "failed", Actor: worker}
		}, runstate.ErrInvalidTransition, true},
		{"a forbidden transition and a forbidden step move", func() (runstate.RunSnapshot, runstate.UpdateRunParams) {
			run := c.runIn(runstate.StatusWaiting, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
			p := transition(run, runstate.StatusSuccess)
			p.Steps = []runstate.StepPatch{{Name: "build", Status: "success"}} // queued -> success is forbidden too
			return run, p
		}, runstate.ErrInvalidTransition, true},
		{"a missing diagnostic and a forbidden step move", func() (runstate.RunSnapshot, runstate.UpdateRunParams) {
			run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
			return run, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: "failed", Actor: worker,
				Steps: []runstate.StepPatch{{Name: "build", Status: "success"}}}
		}, runstate.ErrMissingDiagnostic, false},
	}
	if !c.target.Capabilities.Leases {
		attempts = attempts[1:] // tokens need leases
	}
	for _, a := range attempts {
		run, p := a.setup()
		before := c.state(run.RunID)
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectErr(err, a.want, a.name)
		after := c.get(run.RunID)
		switch {
		case a.moved && after.Status != runstate.StatusFailed:
			c.Errorf(a.name+": the forbidden transition decides, moving the run to failed", "%s", after.Status)
		case !a.moved:
			c.expectUnchanged(before, "after "+a.name)
		}
	}
}
