package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("LEASE-001", "While a lease is live, claiming the run for another owner fails with LEASE_HELD.", leases, checkExclusiveClaim)
	register("LEASE-002", "N workers running claim-next concurrently over M runs claim each run exactly once.", leases, checkConcurrentClaimNext)
	register("LEASE-003", "Claim-next takes, among the runs its filter matches, the highest priority first, then the oldest run, then the smallest run_id.", leases, checkClaimOrder)
	register("LEASE-004", "Renewing extends the expiry to now + TTL (not acquired_at + TTL) and keeps owner and token; the renewed lease outlives its first expiry.", leases, checkRenew)
	register("LEASE-005", "After a lease expires another worker can claim the run, with a larger token.", leases, checkExpiryTakeover)
	register("LEASE-006", "A write carrying a stale lease token fails with LEASE_LOST and writes nothing; the current token's write succeeds.", leases, checkFencedWrites)
	register("LEASE-007", "Renewing or releasing with a stale or released token fails with LEASE_LOST.", leases, checkStaleRenewRelease)
	register("LEASE-008", "A terminal run is never claimable: ClaimRun fails with NOT_CLAIMABLE, claim-next and the runnable listing pass it by.", leases, checkTerminalNotClaimable)
	register("LEASE-009", "Release ends ownership: the run is claimable at once, with a larger token, and the released token fences nothing from the release on.", leases, checkRelease)
	register("LEASE-010", "The runnable listing returns non-terminal runs in the asked statuses without a live lease, in claim order, filtered and paged.", leases, checkListRunnable)
	register("LEASE-011", "Claims consider queued and waiting runs unless the caller names the statuses; running is claimable only when named; a terminal status among them is INVALID_ARGUMENT.", leases, checkClaimStatuses)
	register("LEASE-012", "A later incarnation of the same worker may claim over its previous incarnation's live lease; other workers may not.", leases, checkIncarnations)
	register("LEASE-013", "Claim-next with no runnable run fails with NOT_FOUND.", leases, checkClaimNextEmpty)
	register("LEASE-014", "Lease operations change neither the run's version nor its audit trail.", leases, checkLeaseNoVersion)
	register("LEASE-015", "An expired lease nobody has claimed since still belongs to its owner: it can be renewed and its token still fences.", leases, checkExpiredUnclaimed)
	register("LEASE-016", "Every claim of a run carries a token larger than all earlier tokens of that run, across releases and expiries.", leases, checkTokenMonotonic)
	register("LEASE-018", "A lease has expired at exactly acquired_at + TTL: another owner can claim the run then, and the runnable listing includes it.", Capabilities{Leases: true, ControlledClock: true}, checkExpiryBoundary)
	register("LEASE-019", "A write without a token is accepted while another owner holds a live lease, governed by compare-and-set alone; the lease stands.", leases, checkUnfencedWrites)
	register("LEASE-020", "The runnable listing reads a page at one instant: while writes move runnable runs about in claim order, a page holding every matching run lists each exactly once.", leases, checkRunnableAtOneInstant)
	register("LEASE-021", "A store with runstate.LeaseReader reports the last lease issued: token 0 before any claim, then each claim, renewal and takeover as returned, a released lease as the last issued; an unknown run is NOT_FOUND.", leases, checkLeaseReader)
	register("LEASE-022", "An update with ReleaseLease applies and releases its lease in one write; refused, it releases nothing; without a token it is INVALID_ARGUMENT.", leases, checkUpdateReleasesLease)
	register("LEASE-023", "A label filter of several pairs selects only runs carrying every pair, in the runnable listing, claim-next and ClaimRuns alike.", leases, checkRunnableLabelsAll)
	register("LEASE-024", "A lease live at a claim keeps its run out however soon it expires: claim-next takes another run or answers NOT_FOUND, never UNAVAILABLE.", leases, checkLeaseAboutToExpire)
}

// anyLive names every non-terminal status, for claims that are not about statuses.
var anyLive = []string{"queued", "running", "waiting"}

// claim claims runID for o with a lease of the suite's TTL (c.ttl()), for
// a check that lets it expire or needs it live for one call or two; one
// that needs it live through more takes hold.
func (c *checkState) claim(runID string, o runstate.Owner) runstate.Claim {
	return c.claimFor(runID, o, c.ttl())
}

// outlast is the TTL of a lease that must outlast its check.
const outlast = time.Hour

// hold claims runID for o with a lease that outlasts the check. A check
// that needs a lease live through several calls takes it so: on a real
// clock and a slow machine, c.ttl() can run out between them.
func (c *checkState) hold(runID string, o runstate.Owner) runstate.Claim {
	return c.claimFor(runID, o, outlast)
}

func (c *checkState) claimFor(runID string, o runstate.Owner, ttl time.Duration) runstate.Claim {
	cl, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: runID, Owner: o, TTL: ttl, Statuses: anyLive})
	if err != nil {
		c.Fatalf("ClaimRun of "+runID+" by "+o.String()+" to succeed", "%s", describeErr(err))
	}
	return cl
}

func checkExclusiveClaim(c *checkState) {
	run := c.newRun()
	// The clock moves between the run's last write and the claim: the
	// lease runs from the claim's time, not from the run's updated_at.
	c.pass(c.ttl())
	cl := c.hold(run.RunID, owner("w1"))
	if cl.Lease.AcquiredAt.Before(run.UpdatedAt.Add(c.ttl())) {
		c.Errorf(fmt.Sprintf("a lease acquired at the claim's time, at least %v after the run's last write at %v", c.ttl(), run.UpdatedAt), "acquired_at %v", cl.Lease.AcquiredAt)
	}
	if cl.Lease.Token < 1 || cl.Lease.Owner != owner("w1") || cl.Lease.RunID != run.RunID || cl.Run.RunID != run.RunID ||
		!cl.Lease.ExpiresAt.After(cl.Lease.AcquiredAt) {
		c.Errorf("a lease for w1/i1 with a positive token and expiry after acquisition", "%s", jsonOf(cl))
	}
	if c.target.Capabilities.ControlledClock && cl.Lease.ExpiresAt.Sub(cl.Lease.AcquiredAt) != outlast {
		c.Errorf("expiry = acquisition + TTL", "%v", cl.Lease.ExpiresAt.Sub(cl.Lease.AcquiredAt))
	}
	for _, other := range []runstate.Owner{owner("w2"), owner("w1")} {
		_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: other, TTL: c.ttl()})
		c.expectErr(err, runstate.ErrLeaseHeld, "claiming a live-leased run as "+other.String())
	}
	var ls = c.leases()
	if c.target.Capabilities.SecondHandle {
		ls = c.leaseStoreOf(c.second())
	}
	_, err := ls.ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w3"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrNotFound, "claim-next while the only run is leased")
}

func checkConcurrentClaimNext(c *checkState) {
	const workers, runs = 8, 40
	want := map[string]bool{}
	for range runs {
		want[c.newRun().RunID] = true
	}
	stores := c.handles(workers)
	var mu sync.Mutex
	claimedBy := map[string][]string{}
	c.parallel(workers, func(w int) {
		ls := c.leaseStoreOf(stores[w])
		o := owner(fmt.Sprintf("worker-%d", w))
		for {
			cl, err := ls.ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: o, TTL: runstate.DefaultRecoveryLeaseTTL})
			if errors.Is(err, runstate.ErrNotFound) {
				return
			}
			if err != nil {
				c.Errorf("claim-next to succeed or report NOT_FOUND", "%s", describeErr(err))
				return
			}
			mu.Lock()
			claimedBy[cl.Run.RunID] = append(claimedBy[cl.Run.RunID], o.Worker)
			mu.Unlock()
		}
	})
	for id := range want {
		if n := len(claimedBy[id]); n != 1 {
			c.Errorf("each run claimed exactly once", "%s claimed %d times by %v", id, n, claimedBy[id])
		}
	}
	if len(claimedBy) != runs {
		c.Errorf(fmt.Sprintf("%d distinct runs claimed", runs), "%d", len(claimedBy))
	}
}

func checkClaimOrder(c *checkState) {
	// Created in this order; claim order is priority desc, then oldest,
	// then smallest run_id.
	specs := []struct {
		id   string
		prio int
	}{{"low-old", 1}, {"high-old", 10}, {"mid", 5}, {"high-new", 10}, {"low-new", 1}, {"high-newer", 10}, {"high-newest", 10}, {"low-newest", 1}}
	for _, s := range specs {
		c.create(runstate.CreateRunParams{RunID: s.id, Priority: s.prio})
		c.pass(2 * time.Millisecond)
	}
	// Ties: created one right after another, in descending id order. Where
	// the store's clock stands still (a manual clock) they share created_at
	// and only run_id orders them; where it moves, created_at decides.
	ties := []string{"tie-z", "tie-m", "tie-a"}
	var tied []runstate.RunSnapshot
	for _, id := range ties {
		tied = append(tied, c.create(runstate.CreateRunParams{RunID: id, Priority: 7}))
	}
	slices.SortFunc(tied, func(a, b runstate.RunSnapshot) int {
		if d := a.CreatedAt.Compare(b.CreatedAt); d != 0 {
			return d
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	var got []string
	for range len(specs) + len(ties) {
		// Leases that outlast the check: one that ran out on a slow
		// machine made its run claimable again, ahead of the rest.
		cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: outlast})
		if err != nil {
			c.Fatalf("claim-next to succeed", "%s", describeErr(err))
		}
		got = append(got, cl.Run.RunID)
	}
	want := []string{"high-old", "high-new", "high-newer", "high-newest"}
	for _, r := range tied {
		want = append(want, r.RunID)
	}
	want = append(want, "mid", "low-old", "low-new", "low-newest")
	if jsonOf(got) != jsonOf(want) {
		c.Errorf(fmt.Sprintf("claim order %v", want), "%v", got)
	}
	// A filter picks among the runnable runs before the order does: runs
	// of higher priority that fail one filter field each are passed by.
	pool := map[string]string{"pool": "x"}
	matching := c.create(runstate.CreateRunParams{RunID: "f-match", Priority: 1, Labels: pool}).RunID
	otherWorkflow := c.create(runstate.CreateRunParams{RunID: "f-other-workflow", WorkflowName: "elsewhere", Priority: 9, Labels: pool}).RunID
	otherPool := c.create(runstate.CreateRunParams{RunID: "f-other-pool", Priority: 9, Labels: map[string]string{"pool": "y"}}).RunID
	for _, f := range []struct {
		filter runstate.RunnableFilter
		want   string
	}{
		{runstate.RunnableFilter{WorkflowName: workflow, Labels: pool}, matching},
		{runstate.RunnableFilter{WorkflowName: "elsewhere"}, otherWorkflow},
		{runstate.RunnableFilter{Labels: map[string]string{"pool": "y"}}, otherPool},
	} {
		cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w2"), TTL: outlast, Filter: f.filter})
		if err != nil || cl.Run.RunID != f.want {
			c.Errorf(fmt.Sprintf("claim-next with filter %s to take %s", jsonOf(f.filter), f.want), "%s %s", cl.Run.RunID, describeErr(err))
		}
	}
}

// checkRenew renews a lease half-way through it. On the controlled clock
// the renewal is for the first TTL again and judged exactly: extended from
// its acquisition instead of from now, it would end at the first expiry,
// and the claim between the two expiries would succeed. On a real clock
// the renewal is for four TTLs, so that the claim comes far from either
// expiry whatever a loaded machine delays, and the expiry is judged by
// how far the suite's own clock moved between the claim and the renewal,
// which the store's moved at least as far.
func checkRenew(c *checkState) {
	controlled := c.target.Capabilities.ControlledClock
	run := c.newRun()
	cl := c.claim(run.RunID, owner("w1"))
	claimed := time.Now()
	half := c.ttl() / 2
	c.pass(half)
	ttl := c.ttl()
	if !controlled {
		ttl = 4 * c.ttl()
	}
	renewing := time.Now()
	l, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: ttl})
	if err != nil {
		c.Fatalf("renewing a live lease to succeed", "%s", describeErr(err))
	}
	if l.Owner != cl.Lease.Owner || l.Token != cl.Lease.Token || !l.ExpiresAt.After(cl.Lease.ExpiresAt) {
		c.Errorf("renew to keep owner and token and extend expiry", "before %s after %s", jsonOf(cl.Lease), jsonOf(l))
	}
	fromAcquisition := cl.Lease.AcquiredAt.Add(ttl)
	if controlled {
		if want := cl.Lease.AcquiredAt.Add(half + ttl); !l.ExpiresAt.Equal(want) {
			c.Errorf(fmt.Sprintf("the lease acquired at %v, renewed %v later for %v, to expire at now + TTL, %v", cl.Lease.AcquiredAt, half, ttl, want),
				"expires_at %v (acquired_at + TTL is %v)", l.ExpiresAt, fromAcquisition)
		}
	} else if least := cl.Lease.AcquiredAt.Add(renewing.Sub(claimed) + ttl - time.Millisecond); l.ExpiresAt.Before(least) {
		// A millisecond's grace: stored times are cut to microseconds, and
		// two clocks tick at rates a little apart.
		c.Errorf(fmt.Sprintf("the lease acquired at %v, renewed at least %v later for %v, to expire at now + TTL, no earlier than %v",
			cl.Lease.AcquiredAt, renewing.Sub(claimed), ttl, least), "expires_at %v (acquired_at + TTL is %v)", l.ExpiresAt, fromAcquisition)
	}
	// Past the first expiry, within the renewed one.
	c.pass(half + c.ttl()/4)
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming a renewed lease after its first expiry")
}

func checkExpiryTakeover(c *checkState) {
	run := c.newRun()
	first := c.claim(run.RunID, owner("w1"))
	c.expire()
	second := c.hold(run.RunID, owner("w2"))
	if second.Lease.Token <= first.Lease.Token || second.Lease.Owner != owner("w2") {
		c.Errorf("w2 to take over with a larger token", "first %s, second %s", jsonOf(first.Lease), jsonOf(second.Lease))
	}
	runnable, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{})
	if err != nil || len(runnable.Runs) != 0 {
		c.Errorf("the taken-over run not runnable", "%d runnable, %s", len(runnable.Runs), describeErr(err))
	}
}

func checkFencedWrites(c *checkState) {
	run := c.move(c.newRun(), runstate.StatusRunning)
	old := c.claim(run.RunID, owner("w1")).Lease.Token
	c.expire()
	cur := c.claim(run.RunID, owner("w2")).Lease.Token
	before := c.state(run.RunID)
	p := transition(run, runstate.StatusSuccess)
	p.LeaseToken = old
	_, err := c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrLeaseLost, "a zombie write with the taken-over token")
	c.expectUnchanged(before, "after a zombie write")
	p.LeaseToken = cur + 1
	_, err = c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrLeaseLost, "a write with a token never issued")
	p.LeaseToken = cur
	if _, err := c.store.UpdateRun(c.ctx, p); err != nil {
		c.Errorf("a write with the current token to succeed", "%s", describeErr(err))
	}
	unleased := c.move(c.newRun(), runstate.StatusRunning)
	p = transition(unleased, runstate.StatusSuccess)
	p.LeaseToken = 1
	_, err = c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrLeaseLost, "a fenced write to a run never leased")
}

func checkStaleRenewRelease(c *checkState) {
	run := c.newRun()
	old := c.claim(run.RunID, owner("w1")).Lease.Token
	c.expire()
	cur := c.hold(run.RunID, owner("w2")).Lease
	_, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: old, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseLost, "renewing a taken-over lease")
	err = c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: old})
	c.expectErr(err, runstate.ErrLeaseLost, "releasing a taken-over lease")
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w3"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming after a stale release (w2 must still hold it)")
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cur.Token}); err != nil {
		c.Fatalf("releasing the current lease to succeed", "%s", describeErr(err))
	}
	err = c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cur.Token})
	c.expectErr(err, runstate.ErrLeaseLost, "releasing a lease twice")
	_, err = c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cur.Token, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseLost, "renewing a released lease")
}

func checkTerminalNotClaimable(c *checkState) {
	for _, st := range runstate.RunStatuses() {
		if !st.Terminal() {
			continue
		}
		run := c.runIn(st, runstate.CreateRunParams{Priority: runstate.MaxPriority})
		_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: c.ttl(),
			Statuses: []string{"queued", "running", "waiting"}})
		c.expectErr(err, runstate.ErrNotClaimable, "claiming a "+string(st)+" run")
	}
	_, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(),
		Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running", "waiting"}}})
	c.expectErr(err, runstate.ErrNotFound, "claim-next when every run is terminal")
	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running", "waiting"}}})
	if err != nil || len(page.Runs) != 0 {
		c.Errorf("no terminal run listed as runnable", "%d runs, %s", len(page.Runs), describeErr(err))
	}
}

func checkRelease(c *checkState) {
	run := c.move(c.newRun(), runstate.StatusRunning)
	run = c.move(run, runstate.StatusWaiting)
	cl := c.claim(run.RunID, owner("w1"))
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cl.Lease.Token}); err != nil {
		c.Fatalf("release to succeed", "%s", describeErr(err))
	}
	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != run.RunID {
		c.Errorf("the released run runnable at once", "%s, %s", jsonOf(page.Runs), describeErr(err))
	}
	// Fenced at once: no other claim has been made yet.
	before := c.state(run.RunID)
	released := transition(run, runstate.StatusRunning)
	released.LeaseToken = cl.Lease.Token
	_, err = c.store.UpdateRun(c.ctx, released)
	c.expectErr(err, runstate.ErrLeaseLost, "a write with a released token, before any other claim")
	c.expectUnchanged(before, "after a write with a released token")
	next := c.claim(run.RunID, owner("w2"))
	if next.Lease.Token <= cl.Lease.Token {
		c.Errorf("a claim after release to carry a larger token", "%d after %d", next.Lease.Token, cl.Lease.Token)
	}
	p := transition(run, runstate.StatusRunning)
	p.LeaseToken = cl.Lease.Token
	_, err = c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrLeaseLost, "a write with a released token")
}

func checkListRunnable(c *checkState) {
	mk := func(id string, prio int, status runstate.RunStatus, labels map[string]string) string {
		c.pass(2 * time.Millisecond)
		return c.runIn(status, runstate.CreateRunParams{RunID: id, Priority: prio, Labels: labels}).RunID
	}
	q1 := mk("q1", 1, runstate.StatusQueued, map[string]string{"pool": "a"})
	w5 := mk("w5", 5, runstate.StatusWaiting, map[string]string{"pool": "b"})
	q5 := mk("q5", 5, runstate.StatusQueued, map[string]string{"pool": "a"})
	r9 := mk("r9", 9, runstate.StatusRunning, nil)
	held := mk("held", 7, runstate.StatusQueued, map[string]string{"pool": "a"})
	expired := mk("expired", 3, runstate.StatusQueued, map[string]string{"pool": "a"})
	mk("done", 9, runstate.StatusSuccess, nil)
	c.claim(expired, owner("gone"))
	c.expire()
	c.hold(held, owner("w1"))

	list := func(f runstate.RunnableFilter, limit int) []string {
		var ids []string
		cursor := ""
		for {
			page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: f, Limit: limit, Cursor: cursor})
			if err != nil {
				c.Fatalf("ListRunnableRuns to succeed", "%s", describeErr(err))
			}
			for _, r := range page.Runs {
				ids = append(ids, r.RunID)
			}
			if cursor = page.NextCursor; cursor == "" {
				return ids
			}
		}
	}
	for _, limit := range []int{1, 2, 10} {
		if got, want := list(runstate.RunnableFilter{}, limit), []string{w5, q5, expired, q1}; jsonOf(got) != jsonOf(want) {
			c.Errorf(fmt.Sprintf("default runnable listing (pages of %d): %v", limit, want), "%v", got)
		}
	}
	if got, want := list(runstate.RunnableFilter{Statuses: []string{"running", "queued"}}, 0), []string{r9, q5, expired, q1}; jsonOf(got) != jsonOf(want) {
		c.Errorf(fmt.Sprintf("running and queued runnable runs %v", want), "%v", got)
	}
	if got, want := list(runstate.RunnableFilter{Labels: map[string]string{"pool": "a"}, WorkflowName: workflow}, 0), []string{q5, expired, q1}; jsonOf(got) != jsonOf(want) {
		c.Errorf(fmt.Sprintf("runnable runs in pool a %v", want), "%v", got)
	}
	// Each filter field also where some runnable run fails it alone: another
	// workflow in pool a, another pool in this workflow.
	elsewhere := c.create(runstate.CreateRunParams{RunID: "elsewhere", WorkflowName: "elsewhere", Priority: 8, Labels: map[string]string{"pool": "a"}}).RunID
	if got, want := list(runstate.RunnableFilter{Labels: map[string]string{"pool": "a"}, WorkflowName: workflow}, 0), []string{q5, expired, q1}; jsonOf(got) != jsonOf(want) {
		c.Errorf(fmt.Sprintf("runnable runs of workflow %s in pool a, not run %s of another workflow: %v", workflow, elsewhere, want), "%v", got)
	}
	if got, want := list(runstate.RunnableFilter{WorkflowName: "elsewhere"}, 0), []string{elsewhere}; jsonOf(got) != jsonOf(want) {
		c.Errorf(fmt.Sprintf("runnable runs of workflow elsewhere: %v", want), "%v", got)
	}
	if got, want := list(runstate.RunnableFilter{Labels: map[string]string{"pool": "b"}}, 0), []string{w5}; jsonOf(got) != jsonOf(want) {
		c.Errorf(fmt.Sprintf("runnable runs in pool b: %v", want), "%v", got)
	}
	_, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Statuses: []string{"success"}}})
	c.expectInvalid(err, "listing runnable runs in a terminal status")
}

func checkClaimStatuses(c *checkState) {
	running := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Priority: 9})
	waiting := c.runIn(runstate.StatusWaiting, runstate.CreateRunParams{Priority: 1})
	_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: running.RunID, Owner: owner("w1"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrNotClaimable, "claiming a running run without naming running")
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl()})
	if err != nil || cl.Run.RunID != waiting.RunID {
		c.Errorf("claim-next by default to pass the running run by and take the waiting one", "%s %s", cl.Run.RunID, describeErr(err))
	}
	cl, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w2"), TTL: c.ttl(),
		Filter: runstate.RunnableFilter{Statuses: []string{"running"}}})
	if err != nil || cl.Run.RunID != running.RunID {
		c.Errorf("claim-next naming running to take the running run", "%s %s", cl.Run.RunID, describeErr(err))
	}
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: waiting.RunID, Owner: owner("w1"), TTL: c.ttl(), Statuses: []string{"queued", "success"}})
	c.expectInvalid(err, "claiming with a terminal status among the statuses")
}

func checkIncarnations(c *checkState) {
	run := c.newRun()
	old := c.hold(run.RunID, runstate.Owner{Worker: "w1", Incarnation: "boot-1"})
	_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "w2", Incarnation: "boot-1"}, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "another worker claiming a live lease")
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "w1", Incarnation: "boot-1"}, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "the same incarnation claiming its own live lease again")
	reborn := c.hold(run.RunID, runstate.Owner{Worker: "w1", Incarnation: "boot-2"})
	if reborn.Lease.Token <= old.Lease.Token {
		c.Errorf("the new incarnation's token larger", "%d after %d", reborn.Lease.Token, old.Lease.Token)
	}
	// Incarnations are not ordered: an "older" name may take over too, and
	// the empty incarnation is one of them.
	back := c.hold(run.RunID, runstate.Owner{Worker: "w1", Incarnation: "boot-0"})
	empty := c.hold(run.RunID, runstate.Owner{Worker: "w1"})
	if back.Lease.Token <= reborn.Lease.Token || empty.Lease.Token <= back.Lease.Token {
		c.Errorf("every takeover by another incarnation with a larger token", "%d, %d, %d", reborn.Lease.Token, back.Lease.Token, empty.Lease.Token)
	}
	// A worker whose id extends another's is another worker.
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "w1x", Incarnation: "boot-9"}, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "worker w1x claiming over w1's live lease")
	other := c.newRun()
	c.hold(other.RunID, runstate.Owner{Worker: "w1", Incarnation: "boot-2"})
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w1", Incarnation: "boot-3"}, TTL: c.ttl()})
	if err != nil || cl.Run.RunID != run.RunID {
		c.Errorf("claim-next by a new incarnation to take the oldest run its previous incarnation held", "%s %s", cl.Run.RunID, describeErr(err))
	}
}

func checkClaimNextEmpty(c *checkState) {
	_, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrNotFound, "claim-next on an empty store")
	c.create(runstate.CreateRunParams{WorkflowName: "build"})
	_, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl(), Filter: runstate.RunnableFilter{WorkflowName: "deploy"}})
	c.expectErr(err, runstate.ErrNotFound, "claim-next when no run matches the filter")
}

func checkLeaseNoVersion(c *checkState) {
	run := c.newRun()
	before := c.state(run.RunID)
	cl := c.claim(run.RunID, owner("w1"))
	if _, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: c.ttl()}); err != nil {
		c.Errorf("renew to succeed", "%s", describeErr(err))
	}
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cl.Lease.Token}); err != nil {
		c.Errorf("release to succeed", "%s", describeErr(err))
	}
	c.expectUnchanged(before, "after claim, renew and release")
	if jsonOf(cl.Run) != jsonOf(before.snap) {
		c.Errorf("the claim to return the run as stored", "%s vs %s", jsonOf(cl.Run), jsonOf(before.snap))
	}
}

func checkExpiredUnclaimed(c *checkState) {
	run := c.move(c.newRun(), runstate.StatusRunning)
	cl, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w1"), TTL: c.ttl(), Statuses: []string{"running"}})
	if err != nil {
		c.Fatalf("claiming a running run when naming running to succeed", "%s", describeErr(err))
	}
	c.expire()
	p := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: cl.Lease.Token, Message: ptr("still here")}
	if _, err := c.store.UpdateRun(c.ctx, p); err != nil {
		c.Errorf("a write with an expired but unclaimed token to succeed", "%s", describeErr(err))
	}
	// Renewed to outlast the check: the claim below must meet it live.
	l, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: outlast})
	if err != nil || l.Token != cl.Lease.Token {
		c.Fatalf("renewing an expired but unclaimed lease to succeed with the same token", "%s %s", jsonOf(l), describeErr(err))
	}
	_, err = c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl(), Statuses: []string{"running"}})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming a lease renewed after expiry")
}

func checkTokenMonotonic(c *checkState) {
	run := c.newRun()
	var last int64
	step := func(what string, tok int64) {
		if tok <= last {
			c.Errorf("tokens to grow with every claim", "%s: token %d after %d", what, tok, last)
		}
		last = tok
	}
	cl := c.claim(run.RunID, owner("w1"))
	step("first claim", cl.Lease.Token)
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: cl.Lease.Token}); err != nil {
		c.Fatalf("release to succeed", "%s", describeErr(err))
	}
	cl = c.claim(run.RunID, owner("w1"))
	step("claim after release by the same owner", cl.Lease.Token)
	c.expire()
	cl = c.claim(run.RunID, owner("w2"))
	step("claim after expiry", cl.Lease.Token)
	cl = c.claim(run.RunID, runstate.Owner{Worker: "w2", Incarnation: "i2"})
	step("claim by a new incarnation", cl.Lease.Token)
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w2", Incarnation: "i3"}, TTL: c.ttl()})
	if err != nil {
		c.Fatalf("claim-next to succeed", "%s", describeErr(err))
	}
	step("claim-next", cl.Lease.Token)
}

func checkExpiryBoundary(c *checkState) {
	run := c.newRun()
	cl := c.claim(run.RunID, owner("w1"))
	c.h.Advance(cl.Lease.ExpiresAt.Sub(cl.Lease.AcquiredAt) - time.Microsecond)
	_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming a microsecond before expires_at")
	if page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{}); err != nil || len(page.Runs) != 0 {
		c.Errorf("the run not runnable a microsecond before expires_at", "%d runnable, %s", len(page.Runs), describeErr(err))
	}
	c.h.Advance(time.Microsecond) // now exactly expires_at
	if page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{}); err != nil || len(page.Runs) != 1 {
		c.Errorf("the run runnable at exactly expires_at", "%d runnable, %s", len(page.Runs), describeErr(err))
	}
	if _, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl()}); err != nil {
		c.Errorf("another owner to claim the run at exactly expires_at", "%s", describeErr(err))
	}
}

func checkUnfencedWrites(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	cl := c.claim(run.RunID, owner("w1"))
	run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr("an operator's note")})
	stale := transition(run, runstate.StatusCanceled)
	stale.ExpectedVersion--
	_, err := c.store.UpdateRun(c.ctx, stale)
	c.expectErr(err, runstate.ErrVersionConflict, "an unfenced write with a stale version while the run is leased")
	canceled := c.update(transition(run, runstate.StatusCanceled))
	if canceled.Status != runstate.StatusCanceled {
		c.Errorf("an operator to cancel a leased run without a token", "%s", canceled.Status)
	}
	_, err = c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: c.ttl()})
	if err != nil {
		c.Errorf("the holder's lease to stand after unfenced writes (renewable)", "%s", describeErr(err))
	}
}

// checkRunnableAtOneInstant lists a pool of runnable runs while writers
// change their priorities, which moves them about in claim order without
// making any of them unrunnable. A listing read in parts, each at its own
// instant, misses a run that moved back past a part already read, or
// lists twice one that moved forward.
func checkRunnableAtOneInstant(c *checkState) {
	const runs, listers, writers, listings = 12, 2, 3, 150
	pool := map[string]string{"pool": "moving"}
	var ids []string
	for i := range runs {
		ids = append(ids, c.create(runstate.CreateRunParams{Priority: i, Labels: pool}).RunID)
	}
	sortedIDs := slices.Sorted(slices.Values(ids))
	stores := c.handles(listers + writers)
	var listing atomic.Int32
	listing.Store(listers)
	c.parallel(listers+writers, func(i int) {
		if i < listers {
			defer listing.Add(-1)
			ls := c.leaseStoreOf(stores[i])
			for range listings {
				page, err := ls.ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{Labels: pool}, Limit: runstate.MaxPageLimit})
				if err != nil {
					c.Fatalf("the runnable listing to succeed", "%s", describeErr(err))
				}
				var got []string
				for _, r := range page.Runs {
					got = append(got, r.RunID)
				}
				if g := slices.Sorted(slices.Values(got)); !slices.Equal(g, sortedIDs) {
					c.Fatalf(fmt.Sprintf("every run of the pool listed exactly once while priorities change: %v", sortedIDs), "%v", g)
				}
			}
			return
		}
		for n := i; listing.Load() > 0; n += 5 {
			run, err := stores[i].GetRun(c.ctx, ids[n%runs])
			if err != nil {
				c.Fatalf("GetRun to succeed", "%s", describeErr(err))
			}
			prio := (run.Priority + 7) % runs
			_, err = stores[i].UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Priority: &prio})
			if err != nil && !errors.Is(err, runstate.ErrVersionConflict) {
				c.Fatalf("a priority change to succeed or conflict", "%s", describeErr(err))
			}
		}
	})
}

// checkLeaseReader follows one run's lease through claim, renewal,
// release, a new claim, expiry and takeover, reading it after each step
// with runstate.LeaseReader; the gateway decides who may act on a run by it.
func checkLeaseReader(c *checkState) {
	reader, ok := runstate.As[runstate.LeaseReader](c.store)
	if !ok {
		c.skip(lackLeaseReader)
	}
	expect := func(after string, want runstate.Lease) {
		got, err := reader.GetLease(c.ctx, want.RunID)
		if err != nil {
			c.Fatalf("GetLease "+after+" to succeed", "%s", describeErr(err))
		}
		if got.Owner != want.Owner || got.Token != want.Token || !got.AcquiredAt.Equal(want.AcquiredAt) || !got.ExpiresAt.Equal(want.ExpiresAt) {
			c.Errorf("GetLease "+after+" to report "+jsonOf(want), "%s", jsonOf(got))
		}
	}
	run := c.newRun()
	expect("before any claim", runstate.Lease{RunID: run.RunID})
	first := c.claim(run.RunID, owner("w1"))
	expect("after a claim", first.Lease)
	c.pass(c.ttl() / 3)
	renewed, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: first.Lease.Token, TTL: c.ttl()})
	if err != nil {
		c.Fatalf("renewing a live lease to succeed", "%s", describeErr(err))
	}
	expect("after a renewal", renewed)
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: first.Lease.Token}); err != nil {
		c.Fatalf("release to succeed", "%s", describeErr(err))
	}
	expect("after a release (the last lease issued)", renewed)
	second := c.claim(run.RunID, owner("w2"))
	expect("after a claim that follows a release", second.Lease)
	c.expire()
	expect("after the lease expired", second.Lease)
	third := c.claim(run.RunID, owner("w3"))
	expect("after a takeover", third.Lease)
	_, err = reader.GetLease(c.ctx, "no-such-run")
	c.expectErr(err, runstate.ErrNotFound, "GetLease of an unknown run")
}

// checkUpdateReleasesLease: a worker's last write releases its lease in
// the same write (ReleaseLease). Applied, the run is as the update alone
// makes it, with the update's events only, and the lease is released: the
// token fences nothing and a non-terminal run is claimable at once.
// Refused, the lease stands; without a token, nothing changes.
func checkUpdateReleasesLease(c *checkState) {
	// The last write of a run: success under the lease, released with it.
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	cl := c.claim(run.RunID, owner("w1"))
	before := len(c.events(run.RunID))
	p := transition(run, runstate.StatusSuccess)
	p.LeaseToken, p.ReleaseLease = cl.Lease.Token, true
	done := c.update(p)
	if done.Status != runstate.StatusSuccess || done.Version != run.Version+1 {
		c.Errorf("the update with ReleaseLease to apply as the update alone", "status %s, version %d after version %d", done.Status, done.Version, run.Version)
	}
	if n := len(c.events(run.RunID)) - before; n != 1 {
		c.Errorf("one event for the update (the release writes none)", "%d events", n)
	}
	_, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseLost, "renewing the lease the update released")

	// A non-terminal run released with the update is claimable at once,
	// and the released token fences nothing.
	run = c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	cl = c.claim(run.RunID, owner("w1"))
	p = transition(run, runstate.StatusWaiting)
	p.LeaseToken, p.ReleaseLease = cl.Lease.Token, true
	run = c.update(p)
	next, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: owner("w2"), TTL: c.ttl(), Statuses: anyLive})
	if err != nil {
		c.Errorf("another owner to claim the run released by the update at once", "%s", describeErr(err))
	} else if next.Lease.Token <= cl.Lease.Token {
		c.Errorf("the next claim's token to be larger", "%d after %d", next.Lease.Token, cl.Lease.Token)
	}
	stale := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: cl.Lease.Token, Message: ptr("late")}
	_, err = c.store.UpdateRun(c.ctx, stale)
	c.expectErr(err, runstate.ErrLeaseLost, "a write with the token the update released")

	// Refused (a stale version): nothing written, the lease stands.
	run = c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	cl = c.claim(run.RunID, owner("w1"))
	was := c.state(run.RunID)
	p = transition(run, runstate.StatusSuccess)
	p.ExpectedVersion--
	p.LeaseToken, p.ReleaseLease = cl.Lease.Token, true
	_, err = c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrVersionConflict, "a refused update with ReleaseLease")
	c.expectUnchanged(was, "a refused update with ReleaseLease")
	if _, err := c.leases().RenewLease(c.ctx, runstate.RenewLeaseParams{RunID: run.RunID, Token: cl.Lease.Token, TTL: c.ttl()}); err != nil {
		c.Errorf("the lease to stand after a refused update with ReleaseLease", "%s", describeErr(err))
	}

	// No token: bad input, nothing changed.
	p = transition(run, runstate.StatusSuccess)
	p.ReleaseLease = true
	_, err = c.store.UpdateRun(c.ctx, p)
	c.expectInvalid(err, "ReleaseLease without a lease token")
	c.expectUnchanged(was, "ReleaseLease without a lease token")
}

// checkRunnableLabelsAll: runs that carry one pair of a two-pair label
// filter, ranked ahead of the run that carries both, are passed by where
// claims look (LIST-003 holds the same in ListRuns). A search that joins
// the pairs with OR lists them, and claim-next and ClaimRuns take them
// first.
func checkRunnableLabelsAll(c *checkState) {
	both := map[string]string{"env": "prod", "team": "web"}
	filter := runstate.RunnableFilter{Labels: both}
	want := c.create(runstate.CreateRunParams{Labels: map[string]string{"env": "prod", "team": "web", "extra": "more than asked for"}}).RunID
	for _, some := range []map[string]string{{"env": "prod", "team": "db"}, {"env": "dev", "team": "web"}, {"env": "prod"}, {"team": "web"}} {
		c.create(runstate.CreateRunParams{Priority: 9, Labels: some})
	}
	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: filter})
	if err != nil {
		c.Fatalf("the runnable listing to succeed", "%s", describeErr(err))
	}
	c.expectIDs("the runnable listing with labels env=prod,team=web", runIDs(page.Runs), []string{want})
	// Leases that outlast the check: the runs they hold stay out.
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: outlast, Filter: filter})
	if err != nil || cl.Run.RunID != want {
		c.Errorf("claim-next with labels env=prod,team=web to take "+want+", the one run carrying both", "%s %s", cl.Run.RunID, describeErr(err))
	}
	cl, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w2"), TTL: outlast, Filter: filter})
	if !errors.Is(err, runstate.ErrNotFound) {
		c.Errorf("claim-next with labels env=prod,team=web to fail with NOT_FOUND once the run carrying both is claimed", "%s %s", cl.Run.RunID, describeErr(err))
	}
	b, ok := runstate.As[runstate.BatchClaimer](c.store)
	if !ok {
		return
	}
	want = c.create(runstate.CreateRunParams{Labels: both}).RunID
	res, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w3"), TTL: outlast, Max: 10, Filter: filter})
	if err != nil {
		c.Fatalf("ClaimRuns to succeed", "%s", describeErr(err))
	}
	var claimed []string
	for _, cl := range res.Claims {
		claimed = append(claimed, cl.Run.RunID)
	}
	if !slices.Equal(claimed, []string{want}) {
		c.Errorf("ClaimRuns with labels env=prod,team=web to claim "+want+" alone, the one runnable run carrying both", "claimed %v", claimed)
	}
}

// runIDs returns the run_ids of runs, in order.
func runIDs(runs []runstate.RunSnapshot) []string {
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.RunID)
	}
	return ids
}

// expiresSoon is the TTL of a lease that ends within the second.
const expiresSoon = 900 * time.Millisecond

// checkLeaseAboutToExpire: run held, first in claim order, is leased by
// another owner for a moment more; run free is claimable. Claim-next
// takes free and then answers NOT_FOUND, ClaimRuns then claims nothing,
// and the runnable listing lists free alone. A store that takes a lease
// near its expiry for expired offers held, which the kit refuses as
// UNAVAILABLE.
//
// On the controlled clock the lease has a microsecond left throughout. On
// a real clock it lasts expiresSoon and may lapse during the check on a
// loaded machine, and then held is claimable: an answer counts against
// the store only when the lease was surely live, by the store's own times
// for a claim, by the suite's clock for a listing. Once the lease has
// lapsed, the rest is not judged.
func checkLeaseAboutToExpire(c *checkState) {
	controlled := c.target.Capabilities.ControlledClock
	held := c.create(runstate.CreateRunParams{Priority: 9}).RunID
	free := c.create(runstate.CreateRunParams{}).RunID
	claiming := time.Now()
	lease := c.claimFor(held, owner("holder"), expiresSoon).Lease
	if controlled {
		c.h.Advance(lease.ExpiresAt.Sub(lease.AcquiredAt) - time.Microsecond)
	}
	// surelyLive reports whether the lease was live through a call that
	// has just returned: it was acquired after claiming, and the store's
	// clock moves as the suite's does.
	surelyLive := func() bool { return controlled || time.Since(claiming) < expiresSoon }
	leaseLive := fmt.Sprintf("while another owner's lease on %s, expiring at %v, is live", held, lease.ExpiresAt)
	// tookHeld judges a claim of held: taken while the lease was live by
	// the store's clock, it fails the rule; otherwise the lease lapsed.
	// Either way, the rest cannot be judged.
	tookHeld := func(cl runstate.Claim, doing string) bool {
		if cl.Run.RunID != held {
			return false
		}
		if cl.Lease.AcquiredAt.Before(lease.ExpiresAt) {
			c.Errorf(doing+" never to take "+held+" "+leaseLive, "taken at %v", cl.Lease.AcquiredAt)
		} else {
			c.note(fmt.Sprintf("the lease on %s lapsed before %s (real clock); the rest was not judged", held, doing))
		}
		return true
	}

	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{})
	if err != nil {
		c.Fatalf("the runnable listing to succeed", "%s", describeErr(err))
	}
	if slices.Contains(runIDs(page.Runs), held) && surelyLive() {
		c.Errorf("the runnable listing to pass "+held+" by "+leaseLive, "listed %v", runIDs(page.Runs))
	}
	cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: outlast})
	switch {
	case err != nil:
		c.Fatalf("claim-next to take "+free+", the claimable run, "+leaseLive, "%s", describeErr(err))
	case tookHeld(cl, "claim-next"):
		return
	case cl.Run.RunID != free:
		c.Fatalf("claim-next to take "+free+", the claimable run", "took %s", cl.Run.RunID)
	}
	cl, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w2"), TTL: outlast})
	switch {
	case errors.Is(err, runstate.ErrNotFound):
	case err != nil:
		c.Errorf("claim-next to fail with NOT_FOUND, nothing being claimable, "+leaseLive, "%s", describeErr(err))
	case tookHeld(cl, "claim-next with nothing else claimable"):
		return
	default:
		c.Errorf("claim-next to fail with NOT_FOUND, nothing being claimable", "took %s", cl.Run.RunID)
	}
	b, ok := runstate.As[runstate.BatchClaimer](c.store)
	if !ok {
		return
	}
	res, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w3"), TTL: outlast, Max: 5})
	if err != nil {
		c.Errorf("ClaimRuns to succeed with no claim, nothing being claimable, "+leaseLive, "%s", describeErr(err))
	}
	for _, cl := range res.Claims {
		if !tookHeld(cl, "ClaimRuns") {
			c.Errorf("ClaimRuns to claim nothing, nothing being claimable", "claimed %s", cl.Run.RunID)
		}
	}
}
