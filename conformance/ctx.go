package conformance

import (
	"context"
	"errors"

	"github.com/runstate/runstate"
)

func init() {
	register("CTX-001", "Every call whose context is already canceled, batch calls included, returns an error matching context.Canceled and changes nothing.", none, checkCanceledContext)
}

func checkCanceledContext(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	before := c.state(run.RunID)
	ctx, cancel := context.WithCancel(c.ctx)
	cancel()
	expect := func(err error, what string) {
		if !errors.Is(err, context.Canceled) {
			c.Errorf(what+" with a canceled context to fail with context.Canceled", "%s", describeErr(err))
		}
	}
	_, err := c.store.CreateRun(ctx, runstate.CreateRunParams{RunID: "canceled", WorkflowName: workflow})
	expect(err, "CreateRun")
	_, err = c.store.UpdateRun(ctx, transition(run, runstate.StatusSuccess))
	expect(err, "UpdateRun")
	_, err = c.store.GetRun(ctx, run.RunID)
	expect(err, "GetRun")
	_, err = c.store.ListRuns(ctx, runstate.ListRunsParams{})
	expect(err, "ListRuns")
	_, err = c.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: run.RunID})
	expect(err, "ListAuditEvents")
	// The batch calls too, through the package functions: a store's own
	// batch methods where it has them, its single calls otherwise.
	_, err = runstate.CreateRuns(ctx, c.store, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{{RunID: "canceled", WorkflowName: workflow}}})
	expect(err, "CreateRuns")
	_, err = runstate.UpdateRuns(ctx, c.store, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{transition(run, runstate.StatusSuccess)}})
	expect(err, "UpdateRuns")
	if c.target.Capabilities.Leases {
		ls := c.leases()
		held := c.hold(c.runIn(runstate.StatusRunning, runstate.CreateRunParams{RunID: "held"}).RunID, owner("w0"))
		before = c.state(run.RunID)
		heldBefore := c.state(held.Run.RunID)
		_, err = ls.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: c.ttl(), Statuses: []string{"running"}})
		expect(err, "ClaimRun")
		_, err = ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(), Filter: runstate.RunnableFilter{Statuses: []string{"running"}}})
		expect(err, "ClaimNextRun")
		_, err = ls.RenewLease(ctx, runstate.RenewLeaseParams{RunID: held.Run.RunID, Token: held.Lease.Token, TTL: c.ttl()})
		expect(err, "RenewLease")
		err = ls.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: held.Run.RunID, Token: held.Lease.Token})
		expect(err, "ReleaseLease")
		_, err = ls.ListRunnableRuns(ctx, runstate.ListRunnableParams{})
		expect(err, "ListRunnableRuns")
		_, err = runstate.ClaimRuns(ctx, ls, runstate.ClaimRunsParams{Owner: owner("w1"), TTL: c.ttl(), Max: 2,
			Filter: runstate.RunnableFilter{Statuses: []string{"running"}}})
		expect(err, "ClaimRuns")
		c.expectUnchanged(heldBefore, "after lease calls with a canceled context")
		// The lease stands: neither renewed (nothing to see) nor released.
		_, err = ls.ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: held.Run.RunID, Owner: owner("w2"), TTL: c.ttl(), Statuses: anyLive})
		c.expectErr(err, runstate.ErrLeaseHeld, "claiming after a release with a canceled context (the lease must stand)")
		_, err = ls.ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl(), Statuses: []string{"running"}})
		if err != nil {
			c.Errorf("the run a canceled claim named to be unleased and claimable", "%s", describeErr(err))
		}
	}
	c.expectUnchanged(before, "after calls with a canceled context")
	c.expectNothingStored("after a create with a canceled context", run.RunID, "held")
}
