package conformance

import (
	"strings"

	"github.com/oklog/ulid/v2"
	"github.com/runstate/runstate"
)

func init() {
	register("RUN-001", "A run created without a run_id gets a unique ULID.", none, checkGeneratedIDs)
	register("RUN-002", "A valid caller-supplied run_id (1-128 of A-Z a-z 0-9 . _ : -) is kept.", none, checkCallerIDs)
	register("RUN-003", "Creating a run whose run_id exists fails with ALREADY_EXISTS and leaves the existing run untouched.", none, checkDuplicateID)
	register("RUN-004", "Reading, updating, auditing or claiming an unknown run fails with NOT_FOUND.", none, checkUnknownRun)
	register("RUN-005", "A new run is queued at version 1, attempt 1, and returns every field it was created with.", none, checkCreateRoundTrip)
	register("RUN-006", "A retry is a new run naming a terminal run in retry_of, with attempt + 1; retrying a non-terminal or unknown run is INVALID_ARGUMENT.", none, checkRetries)
	register("RUN-007", "A run cannot be created in any status but queued (INVALID_ARGUMENT).", none, checkInitialStatus)
	register("RUN-008", "Snapshots are values: changing a returned snapshot does not change the stored run.", none, checkSnapshotIsolation)
	register("RUN-009", "An update changes only the fields it sets: labels are replaced, unknown steps and hosts are added as queued, host output and errors are stored.", none, checkPatchSemantics)
}

func checkGeneratedIDs(c *checkState) {
	seen := map[string]bool{}
	for range 50 {
		run := c.newRun()
		if _, err := ulid.ParseStrict(run.RunID); err != nil {
			c.Errorf("a generated run_id to be a ULID", "%q: %v", run.RunID, err)
		}
		if seen[run.RunID] {
			c.Errorf("unique generated run_ids", "%q twice", run.RunID)
		}
		seen[run.RunID] = true
	}
}

func checkCallerIDs(c *checkState) {
	for _, id := range []string{"a", "build-42", "Tenant_7:job.123-retry", strings.Repeat("z", runstate.MaxRunIDLen)} {
		run := c.create(runstate.CreateRunParams{RunID: id})
		if run.RunID != id || c.get(id).RunID != id {
			c.Errorf("run_id "+id+" kept", "%q", run.RunID)
		}
	}
}

func checkDuplicateID(c *checkState) {
	run := c.create(runstate.CreateRunParams{RunID: "dup-1", Message: "first"})
	run = c.move(run, runstate.StatusRunning)
	before := c.state(run.RunID)
	_, err := c.store.CreateRun(c.ctx, runstate.CreateRunParams{RunID: "dup-1", WorkflowName: "other", Message: "second"})
	c.expectErr(err, runstate.ErrAlreadyExists, "creating run dup-1 twice")
	c.expectUnchanged(before, "after a duplicate create")
}

func checkUnknownRun(c *checkState) {
	const id = "never-created"
	_, err := c.store.GetRun(c.ctx, id)
	c.expectErr(err, runstate.ErrNotFound, "GetRun of an unknown run")
	_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: 1, Status: "running"})
	c.expectErr(err, runstate.ErrNotFound, "UpdateRun of an unknown run")
	_, err = c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: id})
	c.expectErr(err, runstate.ErrNotFound, "ListAuditEvents of an unknown run")
	if ls, ok := runstate.As[runstate.LeaseStore](c.store); ok {
		_, err = ls.ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: id, Owner: owner("w1"), TTL: c.ttl()})
		c.expectErr(err, runstate.ErrNotFound, "ClaimRun of an unknown run")
		_, err = ls.RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: id, Token: 1, TTL: c.ttl()})
		c.expectErr(err, runstate.ErrNotFound, "RenewLease of an unknown run")
		err = ls.ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: id, Token: 1})
		c.expectErr(err, runstate.ErrNotFound, "ReleaseLease of an unknown run")
	}
}

func checkCreateRoundTrip(c *checkState) {
	p := runstate.CreateRunParams{
		RunID: "round-trip", WorkflowName: "deploy web", Message: "deploy v1.2 — ünïcode ✓", Priority: -7,
		Labels: map[string]string{"env": "prod", "team/owner": "platform"},
		Steps:  []runstate.StepSpec{{Name: "build"}, {Name: "deploy", Hosts: []string{"web-1", "web-2"}}},
		Actor:  runstate.Actor{Kind: runstate.ActorOperator, ID: "bob"}, Reason: "release",
	}
	run := c.create(p)
	got := c.get(run.RunID)
	if jsonOf(got) != jsonOf(run) {
		c.Errorf("GetRun to return what CreateRun returned", "%s vs %s", jsonOf(got), jsonOf(run))
	}
	steps := []runstate.Step{{Name: "build", Status: runstate.StepQueued},
		{Name: "deploy", Status: runstate.StepQueued, Hosts: []runstate.HostState{{Host: "web-1", Status: runstate.StepQueued}, {Host: "web-2", Status: runstate.StepQueued}}}}
	if got.RunID != p.RunID || got.WorkflowName != p.WorkflowName || got.Message != p.Message || got.Priority != p.Priority ||
		jsonOf(got.Labels) != jsonOf(p.Labels) || jsonOf(got.Steps) != jsonOf(steps) || got.Status != runstate.StatusQueued ||
		got.Version != 1 || got.Attempt != 1 || got.RetryOf != "" || got.CreatedAt.IsZero() || got.Diagnostic != nil {
		c.Errorf("every created field returned, queued, version 1, attempt 1", "%s", jsonOf(got))
	}
}

func checkRetries(c *checkState) {
	first := c.runIn(runstate.StatusFailed, runstate.CreateRunParams{})
	before := c.state(first.RunID)
	second := c.create(runstate.CreateRunParams{RetryOf: first.RunID})
	if second.RunID == first.RunID || second.RetryOf != first.RunID || second.Attempt != 2 || second.Status != runstate.StatusQueued {
		c.Errorf("a retry: new run_id, retry_of set, attempt 2, queued", "%s", jsonOf(second))
	}
	c.expectUnchanged(before, "after a retry was created")
	second = c.move(c.move(second, runstate.StatusRunning), runstate.StatusTimeout)
	if third := c.create(runstate.CreateRunParams{RetryOf: second.RunID}); third.Attempt != 3 {
		c.Errorf("a retry of a retry at attempt 3", "%d", third.Attempt)
	}
	live := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	_, err := c.store.CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: workflow, RetryOf: live.RunID})
	c.expectInvalid(err, "retrying a running run")
	_, err = c.store.CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: workflow, RetryOf: "no-such-run"})
	c.expectInvalid(err, "retrying an unknown run")
}

func checkInitialStatus(c *checkState) {
	for _, st := range runstate.RunStatuses() {
		if st == runstate.StatusQueued {
			continue
		}
		_, err := c.store.CreateRun(c.ctx, runstate.CreateRunParams{RunID: "born-" + string(st), WorkflowName: workflow, Status: string(st)})
		c.expectInvalid(err, "creating a run as "+string(st))
		_, err = c.store.GetRun(c.ctx, "born-"+string(st))
		c.expectErr(err, runstate.ErrNotFound, "reading the run whose creation as "+string(st)+" was refused")
	}
}

func checkSnapshotIsolation(c *checkState) {
	run := c.create(runstate.CreateRunParams{Labels: map[string]string{"k": "v"}, Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h"}}}})
	want := jsonOf(c.get(run.RunID))
	run.Labels["k"] = "changed"
	run.Steps[0].Status = runstate.StepSuccess
	run.Steps[0].Hosts[0].Host = "other"
	got := c.get(run.RunID)
	got.Labels["k"] = "changed again"
	got.Steps[0].Name = "renamed"
	if now := jsonOf(c.get(run.RunID)); now != want {
		c.Errorf("the stored run unaffected by changes to returned snapshots", "%s became %s", want, now)
	}
}

func checkPatchSemantics(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Message: "m", Priority: 3, Labels: map[string]string{"a": "1", "b": "2"},
		Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1"}}}})
	run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Labels: map[string]string{"c": "3"},
		Steps: []runstate.StepPatch{
			{Name: "build", Hosts: []runstate.HostPatch{{Host: "h1", Status: "running", OutputSummary: ptr("compiling"), Error: ptr("warning: x")}}},
			{Name: "test", Hosts: []runstate.HostPatch{{Host: "h9"}}},
		}})
	got := c.get(run.RunID)
	build, _ := got.Step("build")
	test, hasTest := got.Step("test")
	if got.Message != "m" || got.Priority != 3 || jsonOf(got.Labels) != `{"c":"3"}` {
		c.Errorf("message and priority kept, labels replaced", "%s", jsonOf(got))
	}
	if h, _ := build.Host("h1"); h == nil || h.Status != runstate.StepRunning || h.OutputSummary != "compiling" || h.Error != "warning: x" || build.Status != runstate.StepQueued {
		c.Errorf("host h1 running with its output and error; step build still queued", "%s", jsonOf(build))
	}
	if !hasTest || test.Status != runstate.StepQueued || len(test.Hosts) != 1 || test.Hosts[0].Status != runstate.StepQueued {
		c.Errorf("step test and host h9 added as queued", "%s", jsonOf(got.Steps))
	}
	got = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: got.Version, Priority: ptr(0), Message: ptr("")})
	if got.Priority != 0 || got.Message != "" || jsonOf(got.Labels) != `{"c":"3"}` {
		c.Errorf("explicit zero priority and empty message stored; labels untouched", "%s", jsonOf(got))
	}
}

func owner(worker string) runstate.Owner { return runstate.Owner{Worker: worker, Incarnation: "i1"} }
