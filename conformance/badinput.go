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
func (c *checkState) expectNothingStored(after string, keep ...string) {
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

func checkBadIDs(c *checkState) {
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

func checkBadStatuses(c *checkState) {
	run := c.runIn(spec.StatusRunning, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build"}}})
	before := c.state(run.RunID)
	for _, st := range []string{"exploded", "RUNNING", "Running", "Succeeded", " running", "running ", "PENDING", "Created", "Queued"} {
		_, err := c.store.CreateRun(c.ctx, spec.CreateRunParams{WorkflowName: workflow, Status: st})
		c.expectInvalid(err, "creating a run in status "+st)
		_, err = c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: st})
		c.expectInvalid(err, "updating to status "+st)
		_, err = c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{{Name: "build", Status: st}}})
		c.expectInvalid(err, "moving a step to status "+st)
		_, err = c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", Status: st}}}}})
		c.expectInvalid(err, "moving a host to status "+st)
		_, err = c.store.ListRuns(c.ctx, spec.ListRunsParams{Statuses: []string{"queued", st}})
		c.expectInvalid(err, "listing status "+st)
		if c.target.Capabilities.Leases {
			_, err = c.leases().ClaimNextRun(c.ctx, spec.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(), Filter: spec.RunnableFilter{Statuses: []string{st}}})
			c.expectInvalid(err, "claim-next with status "+st)
			_, err = c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: c.ttl(), Statuses: []string{st}})
			c.expectInvalid(err, "claiming with status "+st)
			_, err = c.leases().ListRunnableRuns(c.ctx, spec.ListRunnableParams{Filter: spec.RunnableFilter{Statuses: []string{st}}})
			c.expectInvalid(err, "the runnable listing of status "+st)
		}
	}
	c.expectUnchanged(before, "after unknown statuses")
	c.expectNothingStored("after unknown statuses", run.RunID)
}

func checkBadWorkflow(c *checkState) {
	for _, wf := range []string{"", "   ", "\t\n"} {
		_, err := c.store.CreateRun(c.ctx, spec.CreateRunParams{WorkflowName: wf})
		c.expectInvalid(err, "creating a run with workflow name "+jsonOf(wf))
	}
	c.expectNothingStored("after empty workflow names")
}

func checkBadLeaseInput(c *checkState) {
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
	// At the limit a TTL is accepted.
	atLimit, err := c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: spec.MaxLeaseTTL})
	if err != nil {
		c.Errorf("a claim for the longest TTL, "+spec.MaxLeaseTTL.String(), "%s", describeErr(err))
	} else if err := c.leases().ReleaseLease(c.ctx, spec.ReleaseLeaseParams{RunID: run.RunID, Token: atLimit.Lease.Token}); err != nil {
		c.Fatalf("release to succeed", "%s", describeErr(err))
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
	_, err = c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl()})
	c.expectErr(err, spec.ErrLeaseHeld, "claiming after refused renewals (w1's lease must stand)")
	c.expectUnchanged(before, "after bad lease input")
}

func checkOversize(c *checkState) {
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
		"total of host states":     {Steps: manyHosts},
		"workflow_name":            {WorkflowName: long(spec.MaxWorkflowNameLen + 1)},
		"message":                  {Message: long(spec.MaxMessageLen + 1)},
		"label key":                {Labels: map[string]string{long(spec.MaxLabelKeyLen + 1): "v"}},
		"label value":              {Labels: map[string]string{"k": long(spec.MaxLabelValueLen + 1)}},
		"label count":              {Labels: labels},
		"step name":                {Steps: []spec.StepSpec{{Name: long(spec.MaxStepNameLen + 1)}}},
		"blank step name":          {Steps: []spec.StepSpec{{Name: " "}}},
		"host name":                {Steps: []spec.StepSpec{{Name: "s", Hosts: []string{long(spec.MaxHostNameLen + 1)}}}},
		"blank host name":          {Steps: []spec.StepSpec{{Name: "s", Hosts: []string{""}}}},
		"steps":                    {Steps: manySteps(spec.MaxSteps + 1)},
		"hosts of a step":          {Steps: []spec.StepSpec{{Name: "s", Hosts: manyNames("h", spec.MaxHostsPerStep+1)}}},
		"reason":                   {Reason: long(spec.MaxReasonLen + 1)},
		"actor id":                 {Actor: spec.Actor{ID: long(spec.MaxActorIDLen + 1)}},
		"priority above the max":   {Priority: spec.MaxPriority + 1},
		"priority below the min":   {Priority: spec.MinPriority - 1},
		"a label key '='":          {Labels: map[string]string{"a=b": "v"}},
		"an empty label key":       {Labels: map[string]string{"": "v"}},
		"a step declared twice":    {Steps: []spec.StepSpec{{Name: "s"}, {Name: "s"}}},
		"a host declared twice":    {Steps: []spec.StepSpec{{Name: "s", Hosts: []string{"h", "h"}}}},
		"retry_of equal to run_id": {RunID: "self", RetryOf: "self"},
	}
	for name, p := range creates {
		if p.WorkflowName == "" {
			p.WorkflowName = workflow
		}
		_, err := c.store.CreateRun(c.ctx, p)
		c.expectInvalid(err, "creating a run with an oversize or malformed "+name)
		c.expectNothingStored("after a create with an oversize or malformed " + name)
	}
	c.checkCountLimits()
	// At the limits a create is accepted.
	c.create(spec.CreateRunParams{Priority: spec.MinPriority})
	c.create(spec.CreateRunParams{WorkflowName: long(spec.MaxWorkflowNameLen), Message: long(spec.MaxMessageLen), Reason: long(spec.MaxReasonLen),
		Priority: spec.MaxPriority, Actor: spec.Actor{ID: long(spec.MaxActorIDLen)}, Labels: map[string]string{long(spec.MaxLabelKeyLen): long(spec.MaxLabelValueLen)},
		Steps: []spec.StepSpec{{Name: long(spec.MaxStepNameLen), Hosts: []string{long(spec.MaxHostNameLen)}}}})

	run := c.runIn(spec.StatusRunning, spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "build", Hosts: []string{"h"}}}})
	diag := func(mod func(*spec.Diagnostic)) spec.UpdateRunParams {
		d := spec.Diagnostic{ErrorCode: "E", Message: "m"}
		mod(&d)
		return spec.UpdateRunParams{Status: "failed", Diagnostic: &d}
	}
	details := map[string]string{}
	for i := range spec.MaxDiagnosticDetails + 1 {
		details[fmt.Sprintf("k%d", i)] = "v"
	}
	updates := map[string]spec.UpdateRunParams{
		"message":            {Message: ptr(long(spec.MaxMessageLen + 1))},
		"host output":        {Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", OutputSummary: ptr(long(spec.MaxHostOutputBytes + 1))}}}}},
		"host error":         {Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", Error: ptr(long(spec.MaxHostErrorLen + 1))}}}}},
		"blank step name":    {Steps: []spec.StepPatch{{Name: "  ", Status: "running"}}},
		"blank host name":    {Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: " ", Status: "running"}}}}},
		"diagnostic code":    diag(func(d *spec.Diagnostic) { d.ErrorCode = long(spec.MaxErrorCodeLen + 1) }),
		"diagnostic message": diag(func(d *spec.Diagnostic) { d.Message = long(spec.MaxMessageLen + 1) }),
		"source_step":        diag(func(d *spec.Diagnostic) { d.SourceStep = long(spec.MaxStepNameLen + 1) }),
		"source_host":        diag(func(d *spec.Diagnostic) { d.SourceHost = long(spec.MaxHostNameLen + 1) }),
		"detail key":         diag(func(d *spec.Diagnostic) { d.Details = map[string]string{long(spec.MaxLabelKeyLen + 1): "v"} }),
		"blank detail key":   diag(func(d *spec.Diagnostic) { d.Details = map[string]string{" ": "v"} }),
		"detail value":       diag(func(d *spec.Diagnostic) { d.Details = map[string]string{"k": long(spec.MaxDetailValueLen + 1)} }),
		"detail count":       diag(func(d *spec.Diagnostic) { d.Details = details }),
		"interrupted_reason": {Status: "interrupted", InterruptedReason: long(spec.MaxReasonLen + 1)},
		"labels":             {Labels: labels},
		"reason":             {Status: "waiting", Reason: long(spec.MaxReasonLen + 1)},
		"actor id":           {Status: "waiting", Actor: spec.Actor{ID: long(spec.MaxActorIDLen + 1)}},
		"priority":           {Priority: ptr(spec.MaxPriority + 1)},
	}
	for name, p := range updates {
		before := c.state(run.RunID)
		p.RunID, p.ExpectedVersion = run.RunID, run.Version
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectInvalid(err, "an update with an oversize or malformed "+name)
		c.expectUnchanged(before, "after an update with an oversize or malformed "+name)
	}
	// At the limits an update is accepted: run, host, diagnostic and
	// interrupted_reason fields alike.
	c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr(long(spec.MaxMessageLen)),
		Steps: []spec.StepPatch{{Name: "build", Hosts: []spec.HostPatch{{Host: "h", OutputSummary: ptr(long(spec.MaxHostOutputBytes)),
			Error: ptr(long(spec.MaxHostErrorLen))}}}}})
	fullDetails := map[string]string{}
	for i := range spec.MaxDiagnosticDetails {
		key := fmt.Sprintf("k%d-", i)
		fullDetails[key+long(spec.MaxLabelKeyLen-len(key))] = long(spec.MaxDetailValueLen)
	}
	failing := c.runIn(spec.StatusRunning, spec.CreateRunParams{})
	c.update(spec.UpdateRunParams{RunID: failing.RunID, ExpectedVersion: failing.Version, Status: "failed", Diagnostic: &spec.Diagnostic{
		ErrorCode: long(spec.MaxErrorCodeLen), Message: long(spec.MaxMessageLen), SourceStep: long(spec.MaxStepNameLen),
		SourceHost: long(spec.MaxHostNameLen), Details: fullDetails}})
	interrupted := c.runIn(spec.StatusRunning, spec.CreateRunParams{})
	c.update(spec.UpdateRunParams{RunID: interrupted.RunID, ExpectedVersion: interrupted.Version, Status: "interrupted",
		InterruptedReason: long(spec.MaxReasonLen)})
	if c.target.Capabilities.Leases {
		for name, o := range map[string]spec.Owner{"owner.worker": {Worker: long(spec.MaxOwnerLen + 1)}, "owner.incarnation": {Worker: "w", Incarnation: long(spec.MaxOwnerLen + 1)}} {
			before := c.state(run.RunID)
			_, err := c.leases().ClaimRun(c.ctx, spec.ClaimRunParams{RunID: run.RunID, Owner: o, TTL: c.ttl(), Statuses: anyLive})
			c.expectInvalid(err, "claiming with an oversize "+name)
			c.expectUnchanged(before, "after a claim with an oversize "+name)
		}
		c.claim(run.RunID, spec.Owner{Worker: long(spec.MaxOwnerLen), Incarnation: long(spec.MaxOwnerLen)})
	}
}

func manySteps(n int) []spec.StepSpec {
	out := make([]spec.StepSpec, n)
	for i := range out {
		out[i] = spec.StepSpec{Name: fmt.Sprintf("s%d", i)}
	}
	return out
}

func manyNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func checkBadText(c *checkState) {
	for name, p := range map[string]spec.CreateRunParams{
		"invalid UTF-8 workflow": {WorkflowName: "wf\xff"},
		"NUL in workflow":        {WorkflowName: "wf\x00x"},
		"NUL first in workflow":  {WorkflowName: "\x00wf"},
		"NUL last in message":    {WorkflowName: workflow, Message: "m\x00"},
		"invalid UTF-8 message":  {WorkflowName: workflow, Message: "\xc3\x28"},
		"invalid UTF-8 label":    {WorkflowName: workflow, Labels: map[string]string{"k": "\xff"}},
	} {
		_, err := c.store.CreateRun(c.ctx, p)
		c.expectInvalid(err, "creating a run with "+name)
	}
	c.expectNothingStored("after invalid text")
}

func checkBadUpdates(c *checkState) {
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

// checkCountLimits: every count limit of §1.7 is accepted at the limit and
// refused one past it, on create and when a patch adds to a run.
func (c *checkState) checkCountLimits() {
	atLimit := func(what string, p spec.CreateRunParams) spec.RunSnapshot {
		p.WorkflowName = workflow
		run, err := c.store.CreateRun(c.ctx, p)
		if err != nil {
			c.Fatalf("a create with "+what+", at the limit", "%s", describeErr(err))
		}
		return run
	}
	labels := map[string]string{}
	for i := range spec.MaxLabels {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	atLimit(fmt.Sprintf("%d labels", spec.MaxLabels), spec.CreateRunParams{Labels: labels})
	atLimit(fmt.Sprintf("%d steps", spec.MaxSteps), spec.CreateRunParams{Steps: manySteps(spec.MaxSteps)})
	full := spec.MaxHostStates / spec.MaxHostsPerStep
	hostsAll := make([]spec.StepSpec, full)
	for i := range hostsAll {
		hostsAll[i] = spec.StepSpec{Name: fmt.Sprintf("s%d", i), Hosts: manyNames("h", spec.MaxHostsPerStep)}
	}
	atLimit(fmt.Sprintf("%d host states in %d steps of %d hosts", spec.MaxHostStates, full, spec.MaxHostsPerStep), spec.CreateRunParams{Steps: hostsAll})

	// Patches that add steps, hosts and host states up to the limits, then one more.
	grow := func(what string, run spec.RunSnapshot, fits, over []spec.StepPatch) {
		run = c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: fits})
		before := c.state(run.RunID)
		_, err := c.store.UpdateRun(c.ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: over})
		c.expectInvalid(err, "a patch adding "+what+" past the limit")
		c.expectUnchanged(before, "after a patch adding "+what+" past the limit")
	}
	steps := atLimit("steps", spec.CreateRunParams{Steps: manySteps(spec.MaxSteps - 1)})
	grow("steps", steps, []spec.StepPatch{{Name: "last"}}, []spec.StepPatch{{Name: "one-too-many"}})
	hosts := atLimit("hosts", spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "s", Hosts: manyNames("h", spec.MaxHostsPerStep-1)}}})
	grow("hosts to a step", hosts, []spec.StepPatch{{Name: "s", Hosts: []spec.HostPatch{{Host: "last"}}}},
		[]spec.StepPatch{{Name: "s", Hosts: []spec.HostPatch{{Host: "one-too-many"}}}})
	almost := slices.Clone(hostsAll)
	almost[full-1].Hosts = almost[full-1].Hosts[1:]
	states := atLimit("host states", spec.CreateRunParams{Steps: almost})
	grow("host states", states, []spec.StepPatch{{Name: almost[full-1].Name, Hosts: []spec.HostPatch{{Host: "last"}}}},
		[]spec.StepPatch{{Name: "new", Hosts: []spec.HostPatch{{Host: "one-too-many"}}}})

	// A patch of the most steps, and of the most hosts in a step, at once.
	run := atLimit("steps", spec.CreateRunParams{Steps: manySteps(spec.MaxSteps)})
	patches := make([]spec.StepPatch, spec.MaxSteps)
	for i := range patches {
		patches[i] = spec.StepPatch{Name: fmt.Sprintf("s%d", i), Status: "skipped"}
	}
	run = c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: patches})
	run = atLimit("steps", spec.CreateRunParams{Steps: []spec.StepSpec{{Name: "s"}}})
	hostPatches := make([]spec.HostPatch, spec.MaxHostsPerStep)
	for i := range hostPatches {
		hostPatches[i] = spec.HostPatch{Host: fmt.Sprintf("h%d", i)}
	}
	c.update(spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []spec.StepPatch{{Name: "s", Hosts: hostPatches}}})
	d := spec.Diagnostic{ErrorCode: "E", Message: "m", Details: map[string]string{}}
	for i := range spec.MaxDiagnosticDetails {
		d.Details[fmt.Sprintf("k%d", i)] = "v"
	}
	failing := c.runIn(spec.StatusRunning, spec.CreateRunParams{})
	p := transition(failing, spec.StatusFailed)
	p.Diagnostic = &d
	c.update(p)
}
