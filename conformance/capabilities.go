package conformance

import (
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("CAP-001", "A target declares leases exactly when its store implements runstate.LeaseStore.", none, checkLeasesDeclared)
	register("CAP-002", "A declared second handle shares the store's data in both directions.", Capabilities{SecondHandle: true}, checkSecondHandle)
	register("CAP-003", "A declared controlled clock moves the store's clock by exactly the time advanced.", Capabilities{ControlledClock: true}, checkControlledClock)
}

func checkLeasesDeclared(c *checkState) {
	implements := c.store.Features().Leases != nil
	if declared := c.target.Capabilities.Leases; declared != implements {
		c.Errorf("the leases capability declared exactly when the store implements runstate.LeaseStore",
			"declared %v, implemented %v (%T)", declared, implements, c.store)
	}
}

func checkSecondHandle(c *checkState) {
	other := c.second()
	a := c.newRun()
	if got, err := other.GetRun(c.ctx, a.RunID); err != nil || got.Version != a.Version {
		c.Errorf("the second handle to see a run the first created", "%s", describeErr(err))
	}
	b, err := other.CreateRun(c.ctx, runstate.CreateRunParams{WorkflowName: workflow})
	if err != nil {
		c.Fatalf("creating through the second handle to succeed", "%s", describeErr(err))
	}
	moved, err := other.UpdateRun(c.ctx, transition(a, runstate.StatusRunning))
	if err != nil {
		c.Fatalf("updating through the second handle to succeed", "%s", describeErr(err))
	}
	if got := c.get(b.RunID); got.RunID != b.RunID {
		c.Errorf("the first handle to see a run the second created", "%s", jsonOf(got))
	}
	if got := c.get(a.RunID); got.Version != moved.Version || got.Status != runstate.StatusRunning {
		c.Errorf("the first handle to see the second's update", "%s", jsonOf(got))
	}
}

func checkControlledClock(c *checkState) {
	first := c.newRun()
	c.h.Advance(time.Hour)
	second := c.newRun()
	if d := second.CreatedAt.Sub(first.CreatedAt); d < time.Hour || d > time.Hour+time.Minute {
		c.Errorf("created_at an hour apart after advancing the clock by an hour", "%v apart", d)
	}
}
