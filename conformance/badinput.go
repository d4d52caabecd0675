package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate/spec"
)

func init() {
	register("BAD-001", "A malformed run_id is INVALID_ARGUMENT wherever it is given, and nothing is stored.", none, checkBadIDs)
	register("BAD-002", "An unknown status is INVALID_ARGUMENT in create, update, list and claim, and nothing changes.", none, checkBadStatuses)
	register("BAD-003", "An empty or blank workflow name is INVALID_ARGUMENT and nothing is stored.", none, checkBadWorkflow)
	register("BAD-004", "A zero, negative or over-limit lease TTL, an empty owner or a non-positive token is INVALID_ARGUMENT.", leases, checkBadLeaseInput)
	register("BAD-005", "A field over its size limit is INVALID_ARGUMENT naming the field; nothing is stored or changed.", none, checkOversize)
	register("BAD-006", "Text that is not valid UTF-8 or contains NUL is INVALID_ARGUMENT; nothing is stored.", none, checkBadText)
	register("BAD-007", "A meaningless update (no expected version, nothing to change, priority out of range, interrupted_reason without interrupted, a step named twice, an unknown actor kind) is INVALID_ARGUMENT and changes nothing.", none, checkBadUpdates)
}

func long(n int) string { return strings.Repeat("x", n) }

// expectNothingStored fails when the store holds any run besides keep.
func (c *C) expectNothingStored(after string, keep ...string) {
	page, err := c.store.ListRuns(c.ctx, spec.ListRunsParams{Limit: spec.MaxPageLimit})
	if err != nil {
		c.Fatalf("ListRuns to succeed", "%s", describeErr(err))
	}
	for _, r := range page.Runs {
		if !slices.Contains(keep, r.RunID) {
			c.Errorf("nothing stored "+after, "run %s", jsonOf(r))
		}
	}
}

func checkBadIDs(c *C) {
	bad := map[string]string{
		"a space": "run 1", "a slash": "a/b", "non-ASCII": "rün", "129 characters": long(spec.MaxRunIDLen + 1),
		"a newline": "a\nb", "a quote": "a'b", "a percent": "100%",
	}
	kept := c.runIn(spec.StatusRunning, spec.CreateRunParams{RunID: "kept"})
	for name, id := range bad {
		_, err := c.store.CreateRun(c.ctx, spec.CreateRunParams{RunID: id, WorkflowName: workflow})
		c.expectInvalid(err, "creating a run whose id has "+name)
		_, err = c.store.GetRun(c.ctx, id)
		c.expectInvalid(err, "reading a run whose id has "+name)
		_, err = c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: id, ExpectedVersion: 1, Status: "running"})
		c.expectInvalid(err, "updating a run whose id has "+name)
		_, err = c.store.ListAuditEvents(c.ctx, spec.ListAuditParams{RunID: id})
		c.expectInvalid(err, "auditing a run whose id has "+name)
		_, err = c.store.CreateRun(c.ctx, spec.CreateRunParams{WorkflowName: workflow, RetryOf: id})
		c.expectInvalid(err, "retrying a run whose id has "+name)
		if ls, ok := c.store.(spec.LeaseStore); ok {
			_, err = ls.ClaimRun(c.ctx, spec.ClaimRunParams{RunID: id, Owner: owner("w1"), TTL: c.ttl()})
			c.expectInvalid(err, "claiming a run whose id has "+name)
		}
	}
	c.expectNothingStored("after malformed ids", kept.RunID)
}

func checkBadStatuses(c *C) {
	run := c.runIn(spec.StatusRunning, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build"}}})
	before := c.state(run.RunID)
	for _, st := range []string{"exploded", "RUNNING", "Succeeded", " running"} {
		_, err := c.store.CreateRun(c.ctx, spec.CreateRunParams{WorkflowName: workflow, Status: st})
		c.expectInvalid(err, "creating a run in status "+st)
		_, err = c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: st})
		c.expectInvalid(err, "updating to status "+st)
		_, err = c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{{Name: "build", Status: st}}})
		c.expectInvalid(err, "moving a step to status "+st)
		_, err = c.store.ListRuns(c.ctx, spec.ListRunsParams{Statuses: []string{"queued", st}})
		c.expectInvalid(err, "listing status "+st)
		if ls, ok := c.store.(spec.LeaseStore); ok {
			_, err = ls.ClaimNextRun(c.ctx, spec.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(), Filter: spec.RunnableFilter{Statuses: []string{st}}})
			c.expectInvalid(err, "claim-next with status "+st)
		}
	}
	c.expectUnchanged(before, "after unknown statuses")
	c.expectNothingStored("after unknown statuses", run.RunID)
}

func checkBadWorkflow(c *C) {
	for _, wf := range []string{"", "   ", "\t\n"} {
		_, err := c.store.CreateRun(c.ctx, spec.CreateRunParams{WorkflowName: wf})
		c.expectInvalid(err, "creating a run with workflow name "+jsonOf(wf))
	}
	c.expectNothingStored("after empty workflow names")
}

func checkBadLeaseInput(c *C) {
	run := c.newRun()
	before := c.state(run.RunID)
	for _, ttl := range []time.Duration{0, -time.Second, spec.MaxLeaseTTL + time.Second} {
		_, err := c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: ttl})
		c.expectInvalid(err, "claiming with TTL "+ttl.String())
		_, err = c.leases().ClaimNextRun(c.ctx, spec.ClaimNextParams{Owner: owner("w1"), TTL: ttl})
		c.expectInvalid(err, "claim-next with TTL "+ttl.String())
	}
	for _, o := range []spec.Owner{{}, {Worker: "  ", Incarnation: "i"}, {Worker: long(spec.MaxOwnerLen + 1)}} {
		_, err := c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: o, TTL: c.ttl()})
		c.expectInvalid(err, "claiming for owner "+jsonOf(o))
	}
	cl := c.claim(run.RunID, owner("w1"))
	for _, ttl := range []time.Duration{0, -time.Second} {
		_, err := c.leases().RenewLease(c.ctx, spec.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: ttl})
		c.expectInvalid(err, "renewing with TTL "+ttl.String())
	}
	for _, tok := range []int64{0, -1} {
		_, err := c.leases().RenewLease(c.ctx, spec.RenewLeaseParams{RunID: run.RunID, Token: tok, TTL: c.ttl()})
		c.expectInvalid(err, "renewing with token "+jsonOf(tok))
		err = c.leases().ReleaseLease(c.ctx, spec.ReleaseLeaseParams{RunID: run.RunID, Token: tok})
		c.expectInvalid(err, "releasing with token "+jsonOf(tok))
	}
	_, err := c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl()})
	c.expectErr(err, spec.ErrLeaseHeld, "claiming after refused renewals (w1's lease must stand)")
	c.expectUnchanged(before, "after bad lease input")
}

func checkOversize(c *C) {
	labels := map[string]string{}
	for i := range spec.MaxLabels + 1 {
		labels[long(i+1)] = "v"
	}
	var manyHosts []spec.StepSpec // over MaxHostStates in all, within every per-step limit
	for i := 0; len(manyHosts)*spec.MaxHostsPerStep <= spec.MaxHostStates; i++ {
		st := spec.StepSpec{Name: fmt.Sprintf("step-%d", i)}
		for h := range spec.MaxHostsPerStep {
			st.Hosts = append(st.Hosts, fmt.Sprintf("h%d", h))
		}
		manyHosts = append(manyHosts, st)
	}
	creates := map[string]spec.CreateRunParams{
		"total of host states": {Steps: manyHosts},
		"workflow_name":        {WorkflowName: long(spec.MaxWorkflowNameLen + 1)},
		"message":              {Message: long(spec.MaxMessageLen + 1)},
		"label key":            {Labels: map[string]string{long(spec.MaxLabelKeyLen + 1): "v"}},
		"label value":          {Labels: map[string]string{"k": long(spec.MaxLabelValueLen + 1)}},
		"label count":          {Labels: labels},
		"step name":            {Steps: []spec.StepSpec{{Name: long(spec.MaxStepNameLen + 1)}}},
		"host name":            {Steps: []spec.StepSpec{{Name: "s", Hosts: []string{long(spec.MaxHostNameLen + 1)}}}},
		"reason":               {Reason: long(spec.MaxReasonLen + 1)},
		"actor id":             {Actor: spec.Actor{ID: long(spec.MaxActorIDLen + 1)}},
		"priority":             {Priority: spec.MaxPriority + 1},
		"a label key '='":      {Labels: map[string]string{"a=b": "v"}},
	}
	for name, p := range creates {
		if p.WorkflowName == "" {
			p.WorkflowName = workflow
		}
		_, err := c.store.CreateRun(c.ctx, p)
		c.expectInvalid(err, "creating a run with an oversize or malformed "+name)
	}
	c.expectNothingStored("after oversize creates")

	run := c.runIn(spec.StatusRunning, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build", Hosts: []string{"h"}}}})
	before := c.state(run.RunID)
	updates := map[string]spec.UpdateRunParams{
		"message":            {Message: ptr(long(spec.MaxMessageLen + 1))},
		"host output":        {Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", OutputSummary: ptr(long(spec.MaxHostOutputBytes + 1))}}}}},
		"host error":         {Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", Error: ptr(long(spec.MaxHostErrorLen + 1))}}}}},
		"diagnostic code":    {Status: "failed", Diagnostic: &spec.Diagnostic{ErrorCode: long(spec.MaxErrorCodeLen + 1), Message: "m"}},
		"diagnostic message": {Status: "failed", Diagnostic: &spec.Diagnostic{ErrorCode: "E", Message: long(spec.MaxMessageLen + 1)}},
		"diagnostic detail":  {Status: "failed", Diagnostic: &spec.Diagnostic{ErrorCode: "E", Message: "m", Details: map[string]string{"k": long(spec.MaxDetailValueLen + 1)}}},
		"interrupted_reason": {Status: "interrupted", InterruptedReason: long(spec.MaxReasonLen + 1)},
		"labels":             {Labels: labels},
	}
	for name, p := range updates {
		p.RunID, p.ExpectedVersion = run.RunID, run.Version
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectInvalid(err, "an update with an oversize "+name)
	}
	c.expectUnchanged(before, "after oversize updates")
	// At the limit is fine.
	c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr(long(spec.MaxMessageLen)),
		Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", OutputSummary: ptr(spec.TruncateOutput(long(3 * spec.MaxHostOutputBytes)))}}}}})
}

func checkBadText(c *C) {
	for name, p := range map[string]spec.CreateRunParams{
		"invalid UTF-8 workflow": {WorkflowName: "wf\xff"},
		"NUL in workflow":        {WorkflowName: "wf\x00x"},
		"invalid UTF-8 message":  {WorkflowName: workflow, Message: "\xc3\x28"},
		"invalid UTF-8 label":    {WorkflowName: workflow, Labels: map[string]string{"k": "\xff"}},
	} {
		_, err := c.store.CreateRun(c.ctx, p)
		c.expectInvalid(err, "creating a run with "+name)
	}
	c.expectNothingStored("after invalid text")
}

func checkBadUpdates(c *C) {
	run := c.runIn(spec.StatusRunning, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build"}}})
	before := c.state(run.RunID)
	for name, p := range map[string]spec.UpdateRunParams{
		"no expected version":               {RunID: run.RunID, Status: "waiting"},
		"a negative expected version":       {RunID: run.RunID, ExpectedVersion: -1, Status: "waiting"},
		"nothing to change":                 {RunID: run.RunID, ExpectedVersion: run.Version},
		"priority out of range":             {RunID: run.RunID, ExpectedVersion: run.Version, Priority: ptr(spec.MinPriority - 1)},
		"interrupted_reason without status": {RunID: run.RunID, ExpectedVersion: run.Version, InterruptedReason: "why"},
		"a step named twice":                {RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{{Name: "build", Status: "running"}, {Name: "build", Status: "success"}}},
		"an unknown actor kind":             {RunID: run.RunID, ExpectedVersion: run.Version, Status: "waiting", Actor: spec.Actor{Kind: "robot"}},
		"a negative lease token":            {RunID: run.RunID, ExpectedVersion: run.Version, Status: "waiting", LeaseToken: -5},
		"a host named twice":                {RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h"}, {Host: "h"}}}}},
	} {
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectInvalid(err, "an update with "+name)
	}
	c.expectUnchanged(before, "after meaningless updates")
}
