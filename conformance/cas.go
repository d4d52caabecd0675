package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("CAS-001", "A new run is at version 1 and every accepted write increments the version by exactly one.", none, checkVersionSteps)
	register("CAS-002", "An update whose expected version is stale fails with VERSION_CONFLICT, reports the current version and writes nothing.", none, checkStaleVersion)
	register("CAS-003", "Of N writers racing from the same version, exactly one wins and the others get VERSION_CONFLICT.", none, checkRacingWriters)
	register("CAS-004", "A stale update that also asks for a forbidden transition is a version conflict, not an invalid transition: the run is not failed.", none, checkConflictBeforeTransition)
	register("CAS-005", "Version and updated_at move only with an accepted update: lease operations and an update with nothing to change leave both as they were.", none, checkUpdatedAtMovesWithVersion)
}

func checkVersionSteps(c *checkState) {
	run := c.create(runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
	if run.Version != 1 {
		c.Errorf("version 1 on create", "%d", run.Version)
	}
	writes := []runstate.UpdateRunParams{
		{Status: "running"},
		{Message: ptr("halfway")},
		{Steps: []runstate.StepPatch{{Name: "build", Status: "running"}}},
		{Priority: ptr(5), Labels: map[string]string{"k": "v"}},
		{Status: "waiting"},
		{Status: "running"},
		{Status: "success"},
	}
	for i, p := range writes {
		p.RunID, p.ExpectedVersion = run.RunID, run.Version
		next := c.update(p)
		if next.Version != run.Version+1 {
			c.Errorf(fmt.Sprintf("write %d to move version %d to %d", i+1, run.Version, run.Version+1), "version %d", next.Version)
		}
		if got := c.get(run.RunID).Version; got != next.Version {
			c.Errorf("GetRun to return the version UpdateRun returned", "%d vs %d", got, next.Version)
		}
		run = next
	}
}

func checkStaleVersion(c *checkState) {
	run := c.move(c.newRun(), runstate.StatusRunning)
	for _, stale := range []int64{run.Version - 1, run.Version + 1, run.Version + 100} {
		before := c.state(run.RunID)
		p := transition(run, runstate.StatusSuccess)
		p.ExpectedVersion = stale
		_, err := c.store.UpdateRun(c.ctx, p)
		if c.expectErr(err, runstate.ErrVersionConflict, fmt.Sprintf("an update expecting version %d of a run at %d", stale, run.Version)) {
			var e *runstate.Error
			if !errors.As(err, &e) || e.CurrentVersion != run.Version {
				c.Errorf("the conflict to report current version", "%+v", e)
			}
		}
		c.expectUnchanged(before, "after a version conflict")
	}
}

// A check-then-write window can be a few instructions wide: the race is
// repeated so that such a window is hit reliably, not once in a while.
func checkRacingWriters(c *checkState) {
	const writers, rounds = 16, 20
	for round := range rounds {
		if !raceWriters(c, writers, round) {
			return // one failed round says it; more would repeat it
		}
	}
}

// raceWriters races writers from one version of a fresh run and reports
// whether exactly one won.
func raceWriters(c *checkState, writers, round int) bool {
	run := c.move(c.newRun(), runstate.StatusRunning)
	before := c.state(run.RunID)
	stores := c.handles(writers)
	errs := make([]error, writers)
	c.parallel(writers, func(i int) {
		// Half race a transition, half a plain write: both are CAS writes.
		p := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr(fmt.Sprintf("writer %d", i))}
		if i%2 == 0 {
			p = transition(run, runstate.StatusWaiting)
		}
		_, errs[i] = stores[i].UpdateRun(c.ctx, p)
	})
	ok := true
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, runstate.ErrVersionConflict):
			c.Errorf("losers to get VERSION_CONFLICT", "round %d, writer %d: %s", round+1, i, describeErr(err))
			ok = false
		}
	}
	after := c.state(run.RunID)
	if wins != 1 || after.snap.Version != run.Version+1 {
		c.Errorf("exactly one winner and version+1", "round %d: %d winners, version %d -> %d", round+1, wins, run.Version, after.snap.Version)
		ok = false
	}
	added := len(after.events) - len(before.events)
	wantEvents := 0
	if after.snap.Status == runstate.StatusWaiting {
		wantEvents = 1
	}
	if added != wantEvents {
		c.Errorf(fmt.Sprintf("%d audit event(s) for the one accepted write", wantEvents), "round %d: %d", round+1, added)
		ok = false
	}
	return ok
}

func checkConflictBeforeTransition(c *checkState) {
	run := c.move(c.newRun(), runstate.StatusRunning)
	run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr("moved on")})
	before := c.state(run.RunID)
	p := transition(run, runstate.StatusQueued) // forbidden, and based on a stale version
	p.ExpectedVersion = run.Version - 1
	_, err := c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrVersionConflict, "a stale forbidden transition")
	c.expectUnchanged(before, "after a stale forbidden transition")
}

// checkUpdatedAtMovesWithVersion moves the clock before each write that
// changes nothing, so that a store stamping updated_at on it shows the
// write's time instead of the run's last change; the lease operations run
// where the target has leases.
func checkUpdatedAtMovesWithVersion(c *checkState) {
	const later = 20 * time.Millisecond // on a real clock, far beyond a stored time's microsecond
	run := c.newRun()
	expectAsItWas := func(got runstate.RunSnapshot, after string) {
		if !got.UpdatedAt.Equal(run.UpdatedAt) || got.Version != run.Version {
			c.Errorf(fmt.Sprintf("updated_at %v and version %d, as they were, %s", run.UpdatedAt, run.Version, after), "updated_at %v, version %d", got.UpdatedAt, got.Version)
		}
	}
	c.pass(later)
	// Its refusal is BAD-007's to judge; here only what it leaves.
	_, _ = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version})
	expectAsItWas(c.get(run.RunID), "after an update with nothing to change")
	if !c.target.Capabilities.Leases {
		return
	}
	c.pass(later)
	cl := c.hold(run.RunID, owner("w1"))
	expectAsItWas(cl.Run, "in the run a claim returns")
	expectAsItWas(c.get(run.RunID), "after a claim")
	c.pass(later)
	if _, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: outlast}); err != nil {
		c.Fatalf("renewing a live lease to succeed", "%s", describeErr(err))
	}
	expectAsItWas(c.get(run.RunID), "after a renewal")
	c.pass(later)
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cl.Lease.Token}); err != nil {
		c.Fatalf("releasing a live lease to succeed", "%s", describeErr(err))
	}
	expectAsItWas(c.get(run.RunID), "after a release")
	c.pass(later)
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w2"), TTL: outlast})
	if err != nil || cl.Run.RunID != run.RunID {
		c.Fatalf("claim-next to take "+run.RunID+", the one runnable run", "%s %s", cl.Run.RunID, describeErr(err))
	}
	expectAsItWas(cl.Run, "in the run claim-next returns")
	expectAsItWas(c.get(run.RunID), "after claim-next")
}
