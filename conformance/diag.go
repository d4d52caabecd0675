package conformance

import (
	"github.com/runstate/runstate"
)

func init() {
	register("DIAG-001", "Entering failed, denied or timeout without a diagnostic fails with MISSING_DIAGNOSTIC and writes nothing.", none, checkDiagnosticRequired)
	register("DIAG-002", "A diagnostic without error_code or message fails with MISSING_DIAGNOSTIC and writes nothing, wherever it is given.", none, checkDiagnosticComplete)
	register("DIAG-003", "Entering interrupted without a non-blank interrupted_reason fails with MISSING_DIAGNOSTIC and writes nothing.", none, checkInterruptedReason)
	register("DIAG-004", "A diagnostic and an interrupted_reason are stored and returned intact, and the transition's audit event carries the error_code.", none, checkDiagnosticStored)
}

func checkDiagnosticRequired(c *checkState) {
	for _, to := range []runstate.RunStatus{runstate.StatusFailed, runstate.StatusDenied, runstate.StatusTimeout} {
		run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
		before := c.state(run.RunID)
		p := transition(run, to)
		p.Diagnostic = nil
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectErr(err, runstate.ErrMissingDiagnostic, "entering "+string(to)+" without a diagnostic")
		c.expectUnchanged(before, "after entering "+string(to)+" without a diagnostic was refused")
	}
}

func checkDiagnosticComplete(c *checkState) {
	cases := map[string]runstate.Diagnostic{
		"no error_code": {Message: "boom", Retryable: true},
		"no message":    {ErrorCode: "E_BOOM"},
		"blank fields":  {ErrorCode: "  ", Message: " "},
	}
	for name, d := range cases {
		run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
		before := c.state(run.RunID)
		p := transition(run, runstate.StatusFailed)
		p.Diagnostic = &d
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectErr(err, runstate.ErrMissingDiagnostic, "entering failed with a diagnostic with "+name)
		c.expectUnchanged(before, "after a diagnostic with "+name+" was refused")
	}
	// Also where no status requires one: a diagnostic given is complete.
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	before := c.state(run.RunID)
	for name, p := range map[string]runstate.UpdateRunParams{
		"a write without a status": {Message: ptr("progress")},
		"a transition to canceled": {Status: "canceled"},
		"a transition to waiting":  {Status: "waiting"},
		"a diagnostic alone":       {},
	} {
		p.RunID, p.ExpectedVersion, p.Diagnostic = run.RunID, run.Version, &runstate.Diagnostic{Message: "no error_code"}
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectErr(err, runstate.ErrMissingDiagnostic, name+" with a diagnostic without error_code")
	}
	c.expectUnchanged(before, "after incomplete diagnostics were refused")
}

func checkInterruptedReason(c *checkState) {
	for _, reason := range []string{"", " ", "\t\n"} {
		run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
		before := c.state(run.RunID)
		p := transition(run, runstate.StatusInterrupted)
		p.InterruptedReason = reason
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectErr(err, runstate.ErrMissingDiagnostic, "entering interrupted with reason "+jsonOf(reason))
		c.expectUnchanged(before, "after entering interrupted with reason "+jsonOf(reason)+" was refused")
	}
}

func checkDiagnosticStored(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	d := runstate.Diagnostic{ErrorCode: "E_DISK_FULL", Message: "no space left on /var", Retryable: true,
		SourceStep: "build", SourceHost: "web-1", Details: map[string]string{"free_bytes": "0", "mount": "/var"}}
	p := transition(run, runstate.StatusFailed)
	p.Diagnostic = &d
	c.update(p)
	got := c.get(run.RunID)
	if jsonOf(got.Diagnostic) != jsonOf(d) {
		c.Errorf("the diagnostic returned intact", "%s, stored %s", jsonOf(d), jsonOf(got.Diagnostic))
	}
	evs := c.events(run.RunID)
	if last := evs[len(evs)-1]; last.To != runstate.StatusFailed || last.ErrorCode != d.ErrorCode {
		c.Errorf("the failed transition's audit event to carry error_code E_DISK_FULL", "%s", jsonOf(last))
	}

	run = c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	p = transition(run, runstate.StatusInterrupted)
	p.InterruptedReason = "HOST_REBOOTED: maintenance window"
	c.update(p)
	if got := c.get(run.RunID); got.InterruptedReason != p.InterruptedReason {
		c.Errorf("interrupted_reason returned intact", "%q", got.InterruptedReason)
	}
}
