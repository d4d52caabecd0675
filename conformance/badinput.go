package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("BAD-001", "A malformed run_id is INVALID_ARGUMENT wherever it is given, and nothing is stored.", none, checkBadIDs)
	register("BAD-002", "An unknown status is INVALID_ARGUMENT in create, update, list and claim, and nothing changes.", none, checkBadStatuses)
	register("BAD-003", "An empty or blank workflow name is INVALID_ARGUMENT and nothing is stored.", none, checkBadWorkflow)
	register("BAD-004", "A zero, negative or over-limit lease TTL, an empty owner or a non-positive token is INVALID_ARGUMENT.", leases, checkBadLeaseInput)
	register("BAD-005", "A field over its size limit is INVALID_ARGUMENT naming the field; nothing is stored or changed.", none, checkOversize)
	register("BAD-006", "Text that is not valid UTF-8 or contains NUL is INVALID_ARGUMENT; nothing is stored.", none, checkBadText)
	register("BAD-007", "A meaningless update (no expected version, nothing to change, priority out of range, interrupted_reason without interrupted, a step named twice, an unknown actor kind) is INVALID_ARGUMENT and changes nothing; WakeAt, zero included, is a change, ReleaseLease alone is not.", none, checkBadUpdates)
}

func long(n int) string { return strings.Repeat("x", n) }

// expectNothingStored fails when the store holds any run besides keep.
func (c *checkState) expectNothingStored(after string, keep ...string) {
	page, err := c.store.ListRuns(c.ctx, runstate.ListRunsParams{Limit: runstate.MaxPageLimit})
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
		"a space": "run 1", "a slash": "a/b", "non-ASCII": "rün", "129 characters": long(runstate.MaxRunIDLen + 1),
		"a newline": "a\nb", "a quote": "a'b", "a percent": "100%",
	}
	kept := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{RunID: "kept"})
	for name, id := range bad {
		_, err := c.store.CreateRun(c.ctx, runstate.CreateRunParams{RunID: id, WorkflowName: workflow})
		c.expectInvalid(err, "creating a run whose id has "+name)
		_, err = c.store.GetRun(c.ctx, id)
		c.expectInvalid(err, "reading a run whose id has "+name)
		_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: 1, Status: "running"})
		c.expectInvalid(err, "updating a run whose id has "+name)
		_, err = c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: id})
		c.expectInvalid(err, "auditing a run whose id has "+name)
		_, err = c.store.CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: workflow, RetryOf: id})
		c.expectInvalid(err, "retrying a run whose id has "+name)
		if ls, ok := runstate.As[runstate.LeaseStore](c.store); ok {
			_, err = ls.ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: id, Owner: owner("w1"), TTL: c.ttl()})
			c.expectInvalid(err, "claiming a run whose id has "+name)
		}
	}
	c.expectNothingStored("after malformed ids", kept.RunID)
}

func checkBadStatuses(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
	before := c.state(run.RunID)
	for _, st := range []string{"exploded", "RUNNING", "Running", "Succeeded", " running", "running ", "PENDING", "Created", "Queued"} {
		_, err := c.store.CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: workflow, Status: st})
		c.expectInvalid(err, "creating a run in status "+st)
		_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: st})
		c.expectInvalid(err, "updating to status "+st)
		_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{{Name: "build", Status: st}}})
		c.expectInvalid(err, "moving a step to status "+st)
		_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{{Name: "build", Hosts: []runstate.HostPatch{{Host: "h", Status: st}}}}})
		c.expectInvalid(err, "moving a host to status "+st)
		_, err = c.store.ListRuns(c.ctx, runstate.ListRunsParams{Statuses: []string{"queued", st}})
		c.expectInvalid(err, "listing status "+st)
		if c.target.Capabilities.Leases {
			_, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(), Filter: runstate.RunnableFilter{Statuses: []string{st}}})
			c.expectInvalid(err, "claim-next with status "+st)
			_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: c.ttl(), Statuses: []string{st}})
			c.expectInvalid(err, "claiming with status "+st)
			_, err = c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: []string{st}}})
			c.expectInvalid(err, "the runnable listing of status "+st)
		}
	}
	c.expectUnchanged(before, "after unknown statuses")
	c.expectNothingStored("after unknown statuses", run.RunID)
}

func checkBadWorkflow(c *checkState) {
	for _, wf := range []string{"", "   ", "\t\n"} {
		_, err := c.store.CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: wf})
		c.expectInvalid(err, "creating a run with workflow name "+jsonOf(wf))
	}
	c.expectNothingStored("after empty workflow names")
}

func checkBadLeaseInput(c *checkState) {
	run := c.newRun()
	before := c.state(run.RunID)
	for _, ttl := range []time.Duration{0, -time.Second, runstate.MaxLeaseTTL + time.Second} {
		_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: ttl})
		c.expectInvalid(err, "claiming with TTL "+ttl.String())
		_, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: ttl})
		c.expectInvalid(err, "claim-next with TTL "+ttl.String())
	}
	for _, o := range []runstate.Owner{{}, {Worker: "  ", Incarnation: "i"}, {Worker: long(runstate.MaxOwnerLen + 1)}} {
		_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: o, TTL: c.ttl()})
		c.expectInvalid(err, "claiming for owner "+jsonOf(o))
	}
	// At the limit a TTL is accepted.
	atLimit, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: runstate.MaxLeaseTTL})
	if err != nil {
		c.Errorf("a claim for the longest TTL, "+runstate.MaxLeaseTTL.String(), "%s", describeErr(err))
	} else if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: atLimit.Lease.Token}); err != nil {
		c.Fatalf("release to succeed", "%s", describeErr(err))
	}
	cl := c.hold(run.RunID, owner("w1"))
	for _, ttl := range []time.Duration{0, -time.Second} {
		_, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: ttl})
		c.expectInvalid(err, "renewing with TTL "+ttl.String())
	}
	for _, tok := range []int64{0, -1} {
		_, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: tok, TTL: c.ttl()})
		c.expectInvalid(err, "renewing with token "+jsonOf(tok))
		err = c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: tok})
		c.expectInvalid(err, "releasing with token "+jsonOf(tok))
	}
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming after refused renewals (w1's lease must stand)")
	c.expectUnchanged(before, "after bad lease input")
}

// checkOversize: BAD-005. A field over its limit is refused, in creates,
// updates and claims; at its limit it is accepted.
func checkOversize(c *checkState) {
	labels := tooManyLabels()
	c.expectOversizeCreatesRefused(labels)
	c.checkCountLimits()
	c.expectCreatesAtLimitsAccepted()

	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h"}}}})
	c.expectOversizeUpdatesRefused(run, labels)
	c.expectUpdatesAtLimitsAccepted(run)
	if c.target.Capabilities.Leases {
		c.expectOversizeOwnersRefused(run)
	}
}

// tooManyLabels is one label over MaxLabels.
func tooManyLabels() map[string]string {
	labels := map[string]string{}
	for i := range runstate.MaxLabels + 1 {
		labels[long(i+1)] = "v"
	}
	return labels
}

// tooManyHostStates are steps over MaxHostStates in all, within every per-step limit.
func tooManyHostStates() []runstate.StepSpec {
	var steps []runstate.StepSpec
	for i := 0; len(steps)*runstate.MaxHostsPerStep <= runstate.MaxHostStates; i++ {
		st := runstate.StepSpec{Name: fmt.Sprintf("step-%d", i)}
		for h := range runstate.MaxHostsPerStep {
			st.Hosts = append(st.Hosts, fmt.Sprintf("h%d", h))
		}
		steps = append(steps, st)
	}
	return steps
}

// oversizeCreates are creates with one field over its limit or malformed,
// by the field's name.
func oversizeCreates(labels map[string]string) map[string]runstate.CreateRunParams {
	return map[string]runstate.CreateRunParams{
		"total of host states":     {Steps: tooManyHostStates()},
		"workflow_name":            {WorkflowName: long(runstate.MaxWorkflowNameLen + 1)},
		"message":                  {Message: long(runstate.MaxMessageLen + 1)},
		"label key":                {Labels: map[string]string{long(runstate.MaxLabelKeyLen + 1): "v"}},
		"label value":              {Labels: map[string]string{"k": long(runstate.MaxLabelValueLen + 1)}},
		"label count":              {Labels: labels},
		"step name":                {Steps: []runstate.StepSpec{{Name: long(runstate.MaxStepNameLen + 1)}}},
		"blank step name":          {Steps: []runstate.StepSpec{{Name: " "}}},
		"host name":                {Steps: []runstate.StepSpec{{Name: "s", Hosts: []string{long(runstate.MaxHostNameLen + 1)}}}},
		"blank host name":          {Steps: []runstate.StepSpec{{Name: "s", Hosts: []string{""}}}},
		"steps":                    {Steps: manySteps(runstate.MaxSteps + 1)},
		"hosts of a step":          {Steps: []runstate.StepSpec{{Name: "s", Hosts: manyNames("h", runstate.MaxHostsPerStep+1)}}},
		"reason":                   {Reason: long(runstate.MaxReasonLen + 1)},
		"actor id":                 {Actor: runstate.Actor{ID: long(runstate.MaxActorIDLen + 1)}},
		"actor principal":          {Actor: runstate.Actor{Principal: long(runstate.MaxActorIDLen + 1)}},
		"priority above the max":   {Priority: runstate.MaxPriority + 1},
		"priority below the min":   {Priority: runstate.MinPriority - 1},
		"a label key '='":          {Labels: map[string]string{"a=b": "v"}},
		"an empty label key":       {Labels: map[string]string{"": "v"}},
		"a step declared twice":    {Steps: []runstate.StepSpec{{Name: "s"}, {Name: "s"}}},
		"a host declared twice":    {Steps: []runstate.StepSpec{{Name: "s", Hosts: []string{"h", "h"}}}},
		"retry_of equal to run_id": {RunID: "self", RetryOf: "self"},
	}
}

func (c *checkState) expectOversizeCreatesRefused(labels map[string]string) {
	for name, p := range oversizeCreates(labels) {
		if p.WorkflowName == "" {
			p.WorkflowName = workflow
		}
		_, err := c.store.CreateRun(c.ctx, p)
		c.expectInvalid(err, "creating a run with an oversize or malformed "+name)
		c.expectNothingStored("after a create with an oversize or malformed " + name)
	}
}

// expectCreatesAtLimitsAccepted: at the limits a create is accepted.
func (c *checkState) expectCreatesAtLimitsAccepted() {
	c.create(runstate.CreateRunParams{Priority: runstate.MinPriority})
	c.create(runstate.CreateRunParams{WorkflowName: long(runstate.MaxWorkflowNameLen), Message: long(runstate.MaxMessageLen), Reason: long(runstate.MaxReasonLen),
		Priority: runstate.MaxPriority, Actor: runstate.Actor{ID: long(runstate.MaxActorIDLen)}, Labels: map[string]string{long(runstate.MaxLabelKeyLen): long(runstate.MaxLabelValueLen)},
		Steps: []runstate.StepSpec{{Name: long(runstate.MaxStepNameLen), Hosts: []string{long(runstate.MaxHostNameLen)}}}})
}

// oversizeUpdates are updates of a running run with a step "build" on host
// "h", with one field over its limit or malformed, by the field's name.
func oversizeUpdates(labels map[string]string) map[string]runstate.UpdateRunParams {
	diag := func(mod func(*runstate.Diagnostic)) runstate.UpdateRunParams {
		d := runstate.Diagnostic{ErrorCode: "E", Message: "m"}
		mod(&d)
		return runstate.UpdateRunParams{Status: "failed", Diagnostic: &d}
	}
	details := map[string]string{}
	for i := range runstate.MaxDiagnosticDetails + 1 {
		details[fmt.Sprintf("k%d", i)] = "v"
	}
	return map[string]runstate.UpdateRunParams{
		"message":            {Message: ptr(long(runstate.MaxMessageLen + 1))},
		"host output":        {Steps: []runstate.StepPatch{{Name: "build", Hosts: []runstate.HostPatch{{Host: "h", OutputSummary: ptr(long(runstate.MaxHostOutputBytes + 1))}}}}},
		"host error":         {Steps: []runstate.StepPatch{{Name: "build", Hosts: []runstate.HostPatch{{Host: "h", Error: ptr(long(runstate.MaxHostErrorLen + 1))}}}}},
		"blank step name":    {Steps: []runstate.StepPatch{{Name: "  ", Status: "running"}}},
		"blank host name":    {Steps: []runstate.StepPatch{{Name: "build", Hosts: []runstate.HostPatch{{Host: " ", Status: "running"}}}}},
		"diagnostic code":    diag(func(d *runstate.Diagnostic) { d.ErrorCode = long(runstate.MaxErrorCodeLen + 1) }),
		"diagnostic message": diag(func(d *runstate.Diagnostic) { d.Message = long(runstate.MaxMessageLen + 1) }),
		"source_step":        diag(func(d *runstate.Diagnostic) { d.SourceStep = long(runstate.MaxStepNameLen + 1) }),
		"source_host":        diag(func(d *runstate.Diagnostic) { d.SourceHost = long(runstate.MaxHostNameLen + 1) }),
		"detail key":         diag(func(d *runstate.Diagnostic) { d.Details = map[string]string{long(runstate.MaxLabelKeyLen + 1): "v"} }),
		"blank detail key":   diag(func(d *runstate.Diagnostic) { d.Details = map[string]string{" ": "v"} }),
		"detail value":       diag(func(d *runstate.Diagnostic) { d.Details = map[string]string{"k": long(runstate.MaxDetailValueLen + 1)} }),
		"detail count":       diag(func(d *runstate.Diagnostic) { d.Details = details }),
		"interrupted_reason": {Status: "interrupted", InterruptedReason: long(runstate.MaxReasonLen + 1)},
		"labels":             {Labels: labels},
		"reason":             {Status: "waiting", Reason: long(runstate.MaxReasonLen + 1)},
		"actor id":           {Status: "waiting", Actor: runstate.Actor{ID: long(runstate.MaxActorIDLen + 1)}},
		"actor principal":    {Status: "waiting", Actor: runstate.Actor{Principal: long(runstate.MaxActorIDLen + 1)}},
		"priority":           {Priority: ptr(runstate.MaxPriority + 1)},
	}
}

func (c *checkState) expectOversizeUpdatesRefused(run runstate.RunSnapshot, labels map[string]string) {
	for name, p := range oversizeUpdates(labels) {
		before := c.state(run.RunID)
		p.RunID, p.ExpectedVersion = run.RunID, run.Version
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectInvalid(err, "an update with an oversize or malformed "+name)
		c.expectUnchanged(before, "after an update with an oversize or malformed "+name)
	}
}

// expectUpdatesAtLimitsAccepted: at the limits an update is accepted: run,
// host, diagnostic and interrupted_reason fields alike.
func (c *checkState) expectUpdatesAtLimitsAccepted(run runstate.RunSnapshot) {
	c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr(long(runstate.MaxMessageLen)),
		Steps: []runstate.StepPatch{{Name: "build", Hosts: []runstate.HostPatch{{Host: "h", OutputSummary: ptr(long(runstate.MaxHostOutputBytes)),
			Error: ptr(long(runstate.MaxHostErrorLen))}}}}})
	fullDetails := map[string]string{}
	for i := range runstate.MaxDiagnosticDetails {
		key := fmt.Sprintf("k%d-", i)
		fullDetails[key+long(runstate.MaxLabelKeyLen-len(key))] = long(runstate.MaxDetailValueLen)
	}
	failing := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	c.update(runstate.UpdateRunParams{RunID: failing.RunID, ExpectedVersion: failing.Version, Status: "failed", Diagnostic: &runstate.Diagnostic{
		ErrorCode: long(runstate.MaxErrorCodeLen), Message: long(runstate.MaxMessageLen), SourceStep: long(runstate.MaxStepNameLen),
		SourceHost: long(runstate.MaxHostNameLen), Details: fullDetails}})
	interrupted := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	c.update(runstate.UpdateRunParams{RunID: interrupted.RunID, ExpectedVersion: interrupted.Version, Status: "interrupted",
		InterruptedReason: long(runstate.MaxReasonLen)})
}

// expectOversizeOwnersRefused: an owner over its limit cannot claim the run,
// and nothing changes; one at its limit can.
func (c *checkState) expectOversizeOwnersRefused(run runstate.RunSnapshot) {
	for name, o := range map[string]runstate.Owner{"owner.worker": {Worker: long(runstate.MaxOwnerLen + 1)}, "owner.incarnation": {Worker: "w", Incarnation: long(runstate.MaxOwnerLen + 1)}} {
		before := c.state(run.RunID)
		_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: o, TTL: c.ttl(), Statuses: anyLive})
		c.expectInvalid(err, "claiming with an oversize "+name)
		c.expectUnchanged(before, "after a claim with an oversize "+name)
	}
	c.claim(run.RunID, runstate.Owner{Worker: long(runstate.MaxOwnerLen), Incarnation: long(runstate.MaxOwnerLen)})
}

func manySteps(n int) []runstate.StepSpec {
	out := make([]runstate.StepSpec, n)
	for i := range out {
		out[i] = runstate.StepSpec{Name: fmt.Sprintf("s%d", i)}
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
	for name, p := range map[string]runstate.CreateRunParams{
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
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
	before := c.state(run.RunID)
	for name, p := range map[string]runstate.UpdateRunParams{
		"no expected version":               {RunID: run.RunID, Status: "waiting"},
		"a negative expected version":       {RunID: run.RunID, ExpectedVersion: -1, Status: "waiting"},
		"nothing to change":                 {RunID: run.RunID, ExpectedVersion: run.Version},
		"priority out of range":             {RunID: run.RunID, ExpectedVersion: run.Version, Priority: ptr(runstate.MinPriority - 1)},
		"interrupted_reason without status": {RunID: run.RunID, ExpectedVersion: run.Version, InterruptedReason: "why"},
		"interrupted_reason with waiting":   {RunID: run.RunID, ExpectedVersion: run.Version, Status: "waiting", InterruptedReason: "why"},
		"interrupted_reason with a message": {RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr("m"), InterruptedReason: "why"},
		"a step named twice":                {RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{{Name: "build", Status: "running"}, {Name: "build", Status: "success"}}},
		"an unknown actor kind":             {RunID: run.RunID, ExpectedVersion: run.Version, Status: "waiting", Actor: runstate.Actor{Kind: "robot"}},
		"a negative lease token":            {RunID: run.RunID, ExpectedVersion: run.Version, Status: "waiting", LeaseToken: -5},
		"a host named twice":                {RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{{Name: "build", Hosts: []runstate.HostPatch{{Host: "h"}, {Host: "h"}}}}},
	} {
		_, err := c.store.UpdateRun(c.ctx, p)
		c.expectInvalid(err, "an update with "+name)
	}
	c.expectUnchanged(before, "after meaningless updates")
}

// checkCountLimits: every count limit of §1.7 is accepted at the limit and
// refused one past it, on create and when a patch adds to a run.
func (c *checkState) checkCountLimits() {
	atLimit := func(what string, p runstate.CreateRunParams) runstate.RunSnapshot {
		p.WorkflowName = workflow
		run, err := c.store.CreateRun(c.ctx, p)
		if err != nil {
			c.Fatalf("a create with "+what+", at the limit", "%s", describeErr(err))
		}
		return run
	}
	labels := map[string]string{}
	for i := range runstate.MaxLabels {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	atLimit(fmt.Sprintf("%d labels", runstate.MaxLabels), runstate.CreateRunParams{Labels: labels})
	atLimit(fmt.Sprintf("%d steps", runstate.MaxSteps), runstate.CreateRunParams{Steps: manySteps(runstate.MaxSteps)})
	full := runstate.MaxHostStates / runstate.MaxHostsPerStep
	hostsAll := make([]runstate.StepSpec, full)
	for i := range hostsAll {
		hostsAll[i] = runstate.StepSpec{Name: fmt.Sprintf("s%d", i), Hosts: manyNames("h", runstate.MaxHostsPerStep)}
	}
	atLimit(fmt.Sprintf("%d host states in %d steps of %d hosts", runstate.MaxHostStates, full, runstate.MaxHostsPerStep), runstate.CreateRunParams{Steps: hostsAll})

	// Patches that add steps, hosts and host states up to the limits, then one more.
	grow := func(what string, run runstate.RunSnapshot, fits, over []runstate.StepPatch) {
		run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: fits})
		before := c.state(run.RunID)
		_, err := c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: over})
		c.expectInvalid(err, "a patch adding "+what+" past the limit")
		c.expectUnchanged(before, "after a patch adding "+what+" past the limit")
	}
	steps := atLimit("steps", runstate.CreateRunParams{Steps: manySteps(runstate.MaxSteps - 1)})
	grow("steps", steps, []runstate.StepPatch{{Name: "last"}}, []runstate.StepPatch{{Name: "one-too-many"}})
	hosts := atLimit("hosts", runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "s", Hosts: manyNames("h", runstate.MaxHostsPerStep-1)}}})
	grow("hosts to a step", hosts, []runstate.StepPatch{{Name: "s", Hosts: []runstate.HostPatch{{Host: "last"}}}},
		[]runstate.StepPatch{{Name: "s", Hosts: []runstate.HostPatch{{Host: "one-too-many"}}}})
	almost := slices.Clone(hostsAll)
	almost[full-1].Hosts = almost[full-1].Hosts[1:]
	states := atLimit("host states", runstate.CreateRunParams{Steps: almost})
	grow("host states", states, []runstate.StepPatch{{Name: almost[full-1].Name, Hosts: []runstate.HostPatch{{Host: "last"}}}},
		[]runstate.StepPatch{{Name: "new", Hosts: []runstate.HostPatch{{Host: "one-too-many"}}}})

	// A patch of the most steps, and of the most hosts in a step, at once.
	run := atLimit("steps", runstate.CreateRunParams{Steps: manySteps(runstate.MaxSteps)})
	patches := make([]runstate.StepPatch, runstate.MaxSteps)
	for i := range patches {
		patches[i] = runstate.StepPatch{Name: fmt.Sprintf("s%d", i), Status: "skipped"}
	}
	run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: patches})
	run = atLimit("steps", runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "s"}}})
	hostPatches := make([]runstate.HostPatch, runstate.MaxHostsPerStep)
	for i := range hostPatches {
		hostPatches[i] = runstate.HostPatch{Host: fmt.Sprintf("h%d", i)}
	}
	c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{{Name: "s", Hosts: hostPatches}}})
	d := runstate.Diagnostic{ErrorCode: "E", Message: "m", Details: map[string]string{}}
	for i := range runstate.MaxDiagnosticDetails {
		d.Details[fmt.Sprintf("k%d", i)] = "v"
	}
	failing := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	p := transition(failing, runstate.StatusFailed)
	p.Diagnostic = &d
	c.update(p)
}
