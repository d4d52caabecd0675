package conformance

import (
	"context"
	"errors"

	"github.com/runstate/runstate/spec"
)

func init() {
	register("CTX-001", "A call whose context is already canceled returns an error matching context.Canceled and changes nothing.", none, checkCanceledContext)
}

func checkCanceledContext(c *C) {
	run := c.runIn(spec.StatusRunning, spec.CreateRunParams{})
	before := c.state(run.RunID)
	ctx, cancel := context.WithCancel(c.ctx)
	cancel()
	expect := func(err error, what string) {
		if !errors.Is(err, context.Canceled) {
			c.Errorf(what+" with a canceled context to fail with context.Canceled", "%s", describeErr(err))
		}
	}
	_, err := c.store.CreateRun(ctx, spec.CreateRunParams{RunID: "canceled", WorkflowName: workflow})
	expect(err, "CreateRun")
	_, err = c.store.UpdateRun(ctx, transition(run, spec.StatusSuccess))
	expect(err, "UpdateRun")
	_, err = c.store.GetRun(ctx, run.RunID)
	expect(err, "GetRun")
	_, err = c.store.ListRuns(ctx, spec.ListRunsParams{})
	expect(err, "ListRuns")
	if ls, ok := c.store.(spec.LeaseStore); ok {
		_, err = ls.ClaimNextRun(ctx, spec.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(), Filter: spec.RunnableFilter{Statuses: []string{"running"}}})
		expect(err, "ClaimNextRun")
	}
	c.expectUnchanged(before, "after calls with a canceled context")
	c.expectNothingStored("after a create with a canceled context", run.RunID)
}
