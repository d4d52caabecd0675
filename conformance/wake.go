package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("WAKE-001", "A parked run is neither listed runnable nor claimed before its wake time (ClaimRun: NOT_CLAIMABLE), and from its wake time on it is, in claim order; parked by its holder, it holds no lease.", leases, checkParkedUntilWakeTime)
	register("WAKE-002", "WakeAt is stored as written and a zero one wakes the run; it is refused, changing nothing, on a run not queued or waiting after the write, on a leased run the write does not release (an expired lease nobody claimed since included), and outside 1970-9999; leaving queued and waiting clears it.", leases, checkParkingRules)
}

// lackWakeAt: the store refused to park a run (ErrUnsupported), as a
// client refuses what its server would drop.
var lackWakeAt = lack{"runstate.UpdateRunParams.WakeAt", "the store cannot park a run: it refuses WakeAt as unsupported " +
	"(a plugin or gateway of protocol 1.7 or older, whose server would drop the field, or a driver.Wrap store whose driver does not state driver.Keeps.Parking)"}

// park sets the run's wake time with an unfenced write, skipping the check
// when the store cannot park.
func (c *checkState) park(run runstate.RunSnapshot, at time.Time) runstate.RunSnapshot {
	return c.parkWith(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &at})
}

// parkWith makes the update p, which parks or wakes a run, skipping the
// check when the store cannot park.
func (c *checkState) parkWith(p runstate.UpdateRunParams) runstate.RunSnapshot {
	run, err := c.store.UpdateRun(c.ctx, p)
	if errors.Is(err, runstate.ErrUnsupported) {
		c.skip(lackWakeAt)
	}
	if err != nil {
		c.Fatalf("the update that parks or wakes run "+p.RunID+" to succeed", "%s for %s", describeErr(err), jsonOf(p))
	}
	return run
}

// expectParked checks that no claim takes run and the runnable listing
// passes it by, while it is parked until a time far past the check.
func (c *checkState) expectParked(id, why string) {
	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: anyLive}, Limit: runstate.MaxPageLimit})
	if err != nil {
		c.Fatalf("the runnable listing to succeed", "%s", describeErr(err))
	}
	for _, r := range page.Runs {
		if r.RunID == id {
			c.Errorf("the runnable listing to pass by run "+id+", "+why, "it lists it (wake_at %s)", r.WakeAt.Format(time.RFC3339Nano))
		}
	}
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: id, Owner: owner("w-early"), TTL: c.ttl(), Statuses: anyLive})
	c.expectErr(err, runstate.ErrNotClaimable, "ClaimRun of run "+id+", "+why+",")
}

// checkParkedUntilWakeTime: a parked run of the highest priority stays out
// of every claim until its wake time, and is then the next claimed; a run
// parked by its holder's last write holds no lease; due runs are taken in
// claim order, not in the order of their wake times.
func checkParkedUntilWakeTime(c *checkState) {
	later := c.create(runstate.CreateRunParams{Priority: 9})
	plain := c.create(runstate.CreateRunParams{Priority: 1})
	// A day past the store's time: far past the check on any clock.
	later = c.park(later, later.UpdatedAt.Add(24*time.Hour))
	c.expectParked(later.RunID, "parked for a day")
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: outlast})
	if err != nil || cl.Run.RunID != plain.RunID {
		c.Errorf("claim-next to take "+plain.RunID+", passing by the parked run of higher priority", "%s %s", cl.Run.RunID, describeErr(err))
	}
	res, err := runstate.ClaimRuns(c.ctx, c.leases(), runstate.ClaimRunsParams{Owner: owner("w2"), TTL: outlast, Max: 5})
	if err != nil || len(res.Claims) != 0 {
		c.Errorf("ClaimRuns to claim nothing while the only unclaimed run is parked", "%d claims, %s", len(res.Claims), describeErr(err))
	}

	// Parked by its holder's last write: the lease is released with it.
	held := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	hc := c.hold(held.RunID, owner("w1"))
	p := transition(held, runstate.StatusWaiting)
	wake := held.UpdatedAt.Add(24 * time.Hour)
	p.LeaseToken, p.ReleaseLease, p.WakeAt = hc.Lease.Token, true, &wake
	held = c.parkWith(p)
	_, err = c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: held.RunID, Token: hc.Lease.Token, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseLost, "renewing the lease of the write that parked the run")
	c.expectParked(held.RunID, "parked by its holder for a day")

	// Due: runs parked until a time the store has reached are claimable at
	// once, in claim order among the others (priority first, whatever the
	// wake times), the parked ones of a day still out.
	now := plain.CreatedAt
	first := c.park(c.create(runstate.CreateRunParams{Priority: 7}), now.Add(-time.Second))
	second := c.park(c.create(runstate.CreateRunParams{Priority: 5}), now.Add(-time.Hour))
	third := c.create(runstate.CreateRunParams{Priority: 3})
	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: anyLive}, Limit: runstate.MaxPageLimit})
	if err != nil {
		c.Fatalf("the runnable listing to succeed", "%s", describeErr(err))
	}
	c.expectIDs("the runnable listing with two due parked runs", runIDs(page.Runs), []string{first.RunID, second.RunID, third.RunID})
	for i, want := range []string{first.RunID, second.RunID, third.RunID} {
		cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w3"), TTL: outlast})
		if err != nil || cl.Run.RunID != want {
			c.Errorf("claim-next to take the due and queued runs in claim order", "claim %d took %s (%s), want %s", i+1, cl.Run.RunID, describeErr(err), want)
		}
	}
	_, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w3"), TTL: outlast})
	c.expectErr(err, runstate.ErrNotFound, "claim-next with only runs parked for a day left")

	// On a clock the suite moves: claimable from exactly the wake time on.
	if !c.target.Capabilities.ControlledClock {
		return
	}
	at := c.create(runstate.CreateRunParams{})
	at = c.park(at, at.UpdatedAt.Add(time.Minute))
	c.pass(time.Minute - time.Microsecond)
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: at.RunID, Owner: owner("w4"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrNotClaimable, "ClaimRun a microsecond before the wake time")
	c.pass(time.Microsecond)
	if _, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: at.RunID, Owner: owner("w4"), TTL: c.ttl()}); err != nil {
		c.Errorf("ClaimRun at exactly the wake time to succeed", "%s", describeErr(err))
	}
}

// checkParkingRules: what a parking write stores, and the writes that may
// not park.
func checkParkingRules(c *checkState) {
	// Stored as written, in UTC to the microsecond; no audit event (no
	// status moved, AUD-003), one version.
	run := c.create(runstate.CreateRunParams{})
	before := len(c.events(run.RunID))
	at := run.UpdatedAt.Add(24*time.Hour + 1234567*time.Nanosecond).In(time.FixedZone("UTC+5", 5*3600))
	parked := c.park(run, at)
	want := at.UTC().Truncate(time.Microsecond)
	if !parked.WakeAt.Equal(want) || parked.Version != run.Version+1 {
		c.Errorf(fmt.Sprintf("the parked run with wake_at %s at version %d", want.Format(time.RFC3339Nano), run.Version+1), "wake_at %s, version %d",
			parked.WakeAt.Format(time.RFC3339Nano), parked.Version)
	}
	if got := c.get(run.RunID); !got.WakeAt.Equal(want) {
		c.Errorf("GetRun to read the wake time as written", "%s", got.WakeAt.Format(time.RFC3339Nano))
	}
	if n := len(c.events(run.RunID)) - before; n != 0 {
		c.Errorf("no audit event for a write that only parks", "%d events", n)
	}
	c.expectParked(run.RunID, "parked for a day")

	// A zero wake time wakes it: claimable at once.
	woken := c.parkWith(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: parked.Version, WakeAt: &time.Time{}})
	if !woken.WakeAt.IsZero() {
		c.Errorf("a zero wake_at to wake the run", "wake_at %s", woken.WakeAt.Format(time.RFC3339Nano))
	}
	cl, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: outlast})
	if err != nil {
		c.Errorf("ClaimRun of the woken run to succeed", "%s", describeErr(err))
	}

	// A leased run: neither an operator nor its holder without releasing
	// the lease parks it; the lease stands.
	far := run.UpdatedAt.Add(24 * time.Hour)
	leased := c.get(run.RunID)
	was := c.state(leased.RunID)
	_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: leased.RunID, ExpectedVersion: leased.Version, WakeAt: &far})
	c.expectInvalid(err, "an operator parking a leased run")
	c.expectUnchanged(was, "an operator parking a leased run")
	_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: leased.RunID, ExpectedVersion: leased.Version, LeaseToken: cl.Lease.Token, WakeAt: &far})
	c.expectInvalid(err, "the holder parking its run without releasing the lease")
	c.expectUnchanged(was, "the holder parking its run without releasing the lease")
	if _, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: leased.RunID, Token: cl.Lease.Token, TTL: outlast}); err != nil {
		c.Errorf("the lease to stand after the refused parking", "%s", describeErr(err))
	}

	// Statuses that cannot be parked: running (after the write) and
	// terminal; times no store holds.
	running := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	was = c.state(running.RunID)
	_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: running.RunID, ExpectedVersion: running.Version, WakeAt: &far})
	c.expectInvalid(err, "parking a running run")
	c.expectUnchanged(was, "parking a running run")
	queued := c.create(runstate.CreateRunParams{})
	was = c.state(queued.RunID)
	toRunning := transition(queued, runstate.StatusRunning)
	toRunning.WakeAt = &far
	_, err = c.store.UpdateRun(c.ctx, toRunning)
	c.expectInvalid(err, "parking a run the same write starts")
	c.expectUnchanged(was, "parking a run the same write starts")
	for _, bad := range []time.Time{time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		_, err = c.store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: queued.RunID, ExpectedVersion: queued.Version, WakeAt: &bad})
		c.expectInvalid(err, fmt.Sprintf("a wake time in the year %d", bad.Year()))
		c.expectUnchanged(was, fmt.Sprintf("a wake time in the year %d", bad.Year()))
	}

	// Leaving queued or waiting clears the wake time: an operator's cancel
	// of a parked waiting run, and the start of a parked queued one.
	waiting := c.park(c.runIn(runstate.StatusWaiting, runstate.CreateRunParams{}), far)
	if canceled := c.move(waiting, runstate.StatusCanceled); !canceled.WakeAt.IsZero() {
		c.Errorf("a canceled run to keep no wake time", "wake_at %s", canceled.WakeAt.Format(time.RFC3339Nano))
	}
	started := c.park(c.create(runstate.CreateRunParams{}), far)
	if started = c.move(started, runstate.StatusRunning); !started.WakeAt.IsZero() {
		c.Errorf("a run started by an operator's write to keep no wake time", "wake_at %s", started.WakeAt.Format(time.RFC3339Nano))
	}
}
