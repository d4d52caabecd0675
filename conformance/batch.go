package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/runstate/runstate"
)

func init() {
	register("BATCH-001", "CreateRuns stores every run or none: an item CreateRun refuses stores nothing and names the item.", none, checkCreateRunsAllOrNone)
	register("BATCH-002", "Each run CreateRuns creates is as CreateRun creates it: queued, version 1, its created event seq 1, in item order.", none, checkCreateRunsAsCreateRun)
	register("BATCH-003", "Bad input in one item, or a run_id given twice, refuses the whole CreateRuns with a typed error naming the item.", none, checkCreateRunsBadInput)
	register("BATCH-004", "UpdateRuns decides each item as UpdateRun would, and one item's refusal neither undoes nor blocks another.", none, checkUpdateRunsPerItem)
	register("BATCH-005", "UpdateRuns refuses a batch that updates one run twice, writing nothing.", none, checkUpdateRunsTwice)
	register("BATCH-006", "ClaimRuns never hands one run to two owners, across concurrent batch claimers.", leases, checkClaimRunsExclusive)
	register("BATCH-007", "ClaimRuns claims in claim order up to Max, each run with a token that fences, and is empty only when nothing matching is runnable.", leases, checkClaimRunsOrder)
	register("BATCH-008", "ClaimRuns with Start moves each claimed run to running with its event, under its new lease; Start claims only queued or waiting runs.", leases, checkClaimRunsStart)
	register("BATCH-009", "Empty batches and batches over MaxBatchItems are refused with INVALID_ARGUMENT, writing nothing.", none, checkBatchLimits)
}

// batchCreator returns the store as a BatchCreator, or skips the check.
func (c *checkState) batchCreator() runstate.BatchCreator {
	b, ok := runstate.As[runstate.BatchCreator](c.store)
	if !ok {
		c.skip(lackBatchCreator)
	}
	return b
}

// batchUpdater returns the store as a BatchUpdater, or skips the check.
func (c *checkState) batchUpdater() runstate.BatchUpdater {
	b, ok := runstate.As[runstate.BatchUpdater](c.store)
	if !ok {
		c.skip(lackBatchUpdater)
	}
	return b
}

// batchClaimerOf returns s as a BatchClaimer, or skips the check.
func (c *checkState) batchClaimerOf(s runstate.RunStateStore) runstate.BatchClaimer {
	b, ok := runstate.As[runstate.BatchClaimer](s)
	if !ok {
		c.skip(lackBatchClaimer)
	}
	return b
}

// runCount is how many runs the store holds (checks hold fewer than a page).
func (c *checkState) runCount() int {
	page, err := c.store.ListRuns(c.ctx, runstate.ListRunsParams{Limit: runstate.MaxPageLimit})
	if err != nil {
		c.Fatalf("ListRuns to succeed", "%s", describeErr(err))
	}
	return len(page.Runs)
}

// expectItemRefusal checks that err refuses a batch for item index with an
// error matching want, and that the store still holds stored runs.
func (c *checkState) expectItemRefusal(err error, index int, want error, stored int, doing string) {
	var itemErr *runstate.BatchItemError
	switch {
	case !errors.As(err, &itemErr):
		c.Errorf(doing+" to be refused with a *runstate.BatchItemError", "%s", describeErr(err))
	case itemErr.Index != index:
		c.Errorf(fmt.Sprintf("%s to name item %d", doing, index), "item %d: %s", itemErr.Index, describeErr(err))
	case !errors.Is(err, want):
		c.Errorf(fmt.Sprintf("%s to match %s through errors.Is", doing, runstate.CodeOf(want)), "%s", describeErr(err))
	case !strings.Contains(err.Error(), fmt.Sprintf("item %d", index)):
		c.Errorf(fmt.Sprintf("the message of %s to say \"item %d\"", doing, index), "%q", err.Error())
	}
	if n := c.runCount(); n != stored {
		c.Errorf(doing+" to store nothing", "%d runs stored, %d before", n, stored)
	}
}

// batchOf returns n creations with run ids prefix-0, prefix-1, ….
func batchOf(prefix string, n int) []runstate.CreateRunParams {
	out := make([]runstate.CreateRunParams, n)
	for i := range out {
		out[i] = runstate.CreateRunParams{RunID: fmt.Sprintf("%s-%d", prefix, i), WorkflowName: workflow}
	}
	return out
}

func checkCreateRunsAllOrNone(c *checkState) {
	b := c.batchCreator()
	existing := c.newRun()
	queued := c.newRun()
	before := c.state(existing.RunID)

	runs := batchOf("exists", 4)
	runs[2].RunID = existing.RunID
	_, err := b.CreateRuns(c.ctx, runstate.CreateRunsParams{Runs: runs})
	c.expectItemRefusal(err, 2, runstate.ErrAlreadyExists, 2, "a batch whose item 2 exists")
	c.expectUnchanged(before, "after a batch that named it was refused")

	runs = batchOf("retry", 3)
	runs[1].RetryOf = queued.RunID // not terminal
	_, err = b.CreateRuns(c.ctx, runstate.CreateRunsParams{Runs: runs})
	c.expectItemRefusal(err, 1, runstate.ErrInvalidArgument, 2, "a batch whose item 1 retries a queued run")
}

func checkCreateRunsAsCreateRun(c *checkState) {
	b := c.batchCreator()
	done := c.runIn(runstate.StatusFailed, runstate.CreateRunParams{})
	actor := runstate.Actor{Kind: runstate.ActorWorker, ID: "batch"}
	items := []runstate.CreateRunParams{
		{RunID: "given-1", WorkflowName: workflow, Priority: 3, Labels: map[string]string{"k": "v"},
			Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1"}}}, Actor: actor, Reason: "batch"},
		{WorkflowName: workflow, Message: "generated id", Actor: actor, Reason: "batch"},
		{RunID: "retry-1", WorkflowName: workflow, RetryOf: done.RunID, Actor: actor, Reason: "batch"},
	}
	res, err := b.CreateRuns(c.ctx, runstate.CreateRunsParams{Runs: items})
	if err != nil {
		c.Fatalf("CreateRuns of 3 valid runs to succeed", "%s", describeErr(err))
	}
	if len(res.Runs) != len(items) {
		c.Fatalf("one run per item", "%d runs for %d items", len(res.Runs), len(items))
	}
	wantAttempt := []int{1, 1, done.Attempt + 1}
	for i, run := range res.Runs {
		if items[i].RunID != "" && run.RunID != items[i].RunID || run.RunID == "" || slices.ContainsFunc(res.Runs[:i], func(r runstate.RunSnapshot) bool { return r.RunID == run.RunID }) {
			c.Errorf(fmt.Sprintf("item %d's run id as given, or a generated one of its own", i), "%q", run.RunID)
		}
		if run.Status != runstate.StatusQueued || run.Version != 1 || run.Attempt != wantAttempt[i] || run.CreatedAt.IsZero() ||
			run.Message != items[i].Message || run.Priority != items[i].Priority || run.RetryOf != items[i].RetryOf {
			c.Errorf(fmt.Sprintf("item %d's run queued at version 1, attempt %d, with its fields", i, wantAttempt[i]), "%s", jsonOf(run))
		}
		if got := c.get(run.RunID); jsonOf(got) != jsonOf(run) {
			c.Errorf(fmt.Sprintf("GetRun of item %d to return the run CreateRuns returned", i), "%s, returned %s", jsonOf(got), jsonOf(run))
		}
		events := c.events(run.RunID)
		if len(events) != 1 || events[0].Seq != 1 || events[0].Kind != runstate.AuditCreated || events[0].To != runstate.StatusQueued ||
			events[0].Version != 1 || events[0].Actor != c.recorded(actor) || events[0].Reason != "batch" {
			c.Errorf(fmt.Sprintf("item %d's trail: one created event, seq 1, to queued, version 1, with the actor and reason", i), "%s", jsonOf(events))
		}
	}
	if len(res.Runs[0].Steps) != 1 || len(res.Runs[0].Steps[0].Hosts) != 1 || res.Runs[0].Labels["k"] != "v" {
		c.Errorf("item 0's steps, hosts and labels stored", "%s", jsonOf(res.Runs[0]))
	}
}

func checkCreateRunsBadInput(c *checkState) {
	b := c.batchCreator()
	c.newRun()
	cases := []struct {
		index int
		doing string
		spoil func(*runstate.CreateRunParams)
	}{
		{1, "a batch whose item 1 has an invalid run id", func(p *runstate.CreateRunParams) { p.RunID = "bad/id" }},
		{2, "a batch whose item 2 has an oversize message", func(p *runstate.CreateRunParams) { p.Message = strings.Repeat("m", runstate.MaxMessageLen+1) }},
		{3, "a batch whose item 3 repeats item 0's run id", func(p *runstate.CreateRunParams) { p.RunID = "bad-0" }},
		{0, "a batch whose item 0 has no workflow", func(p *runstate.CreateRunParams) { p.WorkflowName = " " }},
	}
	for _, tc := range cases {
		runs := batchOf("bad", 4)
		tc.spoil(&runs[tc.index])
		_, err := b.CreateRuns(c.ctx, runstate.CreateRunsParams{Runs: runs})
		c.expectItemRefusal(err, tc.index, runstate.ErrInvalidArgument, 1, tc.doing)
	}
}

// checkUpdateRunsPerItem sends one batch with an outcome of every kind and
// compares each item with what UpdateRun promises for it.
func checkUpdateRunsPerItem(c *checkState) {
	b := c.batchUpdater()
	applied, conflict, forbidden, invalid, later := c.newRun(), c.newRun(), c.newRun(), c.newRun(), c.newRun()
	conflict = c.move(conflict, runstate.StatusRunning)
	updates := []runstate.UpdateRunParams{
		transition(applied, runstate.StatusRunning),
		transition(runstate.RunSnapshot{RunID: conflict.RunID, Version: 1}, runstate.StatusWaiting),
		transition(forbidden, runstate.StatusSuccess),
		transition(runstate.RunSnapshot{RunID: "no-such-run", Version: 1}, runstate.StatusRunning),
		{RunID: invalid.RunID, ExpectedVersion: 0, Message: ptr("no version")},
		{RunID: later.RunID + "-x", ExpectedVersion: 1, Message: ptr("unknown")},
	}
	want := []error{nil, runstate.ErrVersionConflict, runstate.ErrInvalidTransition, runstate.ErrNotFound, runstate.ErrInvalidArgument, runstate.ErrNotFound}
	var fenced runstate.RunSnapshot
	if ls, ok := runstate.As[runstate.LeaseStore](c.store); ok { // a stale token: LEASE_LOST
		fenced = c.newRun()
		cl := c.claim(fenced.RunID, owner("w1"))
		if err := ls.ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: fenced.RunID, Token: cl.Lease.Token}); err != nil {
			c.Fatalf("ReleaseLease to succeed", "%s", describeErr(err))
		}
		p := transition(fenced, runstate.StatusRunning)
		p.LeaseToken = cl.Lease.Token
		updates, want = append(updates, p), append(want, runstate.ErrLeaseLost)
	}
	updates, want = append(updates, transition(later, runstate.StatusCanceled)), append(want, nil)
	untouched := []runState{c.state(conflict.RunID), c.state(invalid.RunID)}
	if fenced.RunID != "" {
		untouched = append(untouched, c.state(fenced.RunID))
	}
	res, err := b.UpdateRuns(c.ctx, runstate.UpdateRunsParams{Updates: updates})
	if err != nil {
		c.Fatalf("UpdateRuns of a mixed batch to succeed as a call", "%s", describeErr(err))
	}
	if len(res.Items) != len(updates) {
		c.Fatalf("one item per update", "%d items for %d updates", len(res.Items), len(updates))
	}
	for i, item := range res.Items {
		switch {
		case want[i] == nil && item.Err != nil:
			c.Errorf(fmt.Sprintf("item %d applied", i), "%s", describeErr(item.Err))
		case want[i] == nil && jsonOf(item.Run) != jsonOf(c.get(item.Run.RunID)):
			c.Errorf(fmt.Sprintf("item %d's run as stored", i), "returned %s", jsonOf(item.Run))
		case want[i] != nil:
			c.expectErr(item.Err, want[i], fmt.Sprintf("item %d", i))
		}
	}
	for _, before := range untouched {
		c.expectUnchanged(before, "after its item was refused")
	}
	c.expectTrail(applied.RunID, runstate.StatusRunning, 2, runstate.AuditCreated, runstate.AuditTransition)
	c.expectTrail(later.RunID, runstate.StatusCanceled, 2, runstate.AuditCreated, runstate.AuditTransition)
	// A forbidden transition fails the run, with its rejected event (FSM-004, FSM-005).
	c.expectTrail(forbidden.RunID, runstate.StatusFailed, 2, runstate.AuditCreated, runstate.AuditRejected, runstate.AuditTransition)
}

// expectTrail checks a run's status, version and the kinds of its events.
func (c *checkState) expectTrail(id string, status runstate.RunStatus, version int64, kinds ...runstate.AuditKind) {
	run, events := c.get(id), c.events(id)
	var got []runstate.AuditKind
	for _, e := range events {
		got = append(got, e.Kind)
	}
	if run.Status != status || run.Version != version || !slices.Equal(got, kinds) {
		c.Errorf(fmt.Sprintf("run %s %s at version %d with events %v", id, status, version, kinds), "%s at version %d with events %v", run.Status, run.Version, got)
	}
}

func checkUpdateRunsTwice(c *checkState) {
	b := c.batchUpdater()
	a, other := c.newRun(), c.newRun()
	before := []runState{c.state(a.RunID), c.state(other.RunID)}
	msg := transition(a, runstate.StatusRunning)
	msg.Status, msg.Message = "", ptr("twice")
	_, err := b.UpdateRuns(c.ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		transition(a, runstate.StatusRunning), transition(other, runstate.StatusRunning), msg,
	}})
	c.expectErr(err, runstate.ErrInvalidArgument, "a batch updating one run in items 0 and 2")
	if err != nil && !(strings.Contains(err.Error(), "0") && strings.Contains(err.Error(), "2")) {
		c.Errorf("the refusal to name items 0 and 2", "%q", err.Error())
	}
	for _, st := range before {
		c.expectUnchanged(st, "after a batch that updates a run twice was refused")
	}
}

func checkClaimRunsExclusive(c *checkState) {
	const claimers, runs = 6, 60
	for range runs {
		c.newRun()
	}
	batchers := make([]runstate.BatchClaimer, claimers)
	for i, s := range c.handles(claimers) { // skipped here, not in a claimer
		batchers[i] = c.batchClaimerOf(s)
	}
	var mu sync.Mutex
	claimedBy := map[string][]string{}
	c.parallel(claimers, func(w int) {
		b := batchers[w]
		o := owner(fmt.Sprintf("batch-%d", w))
		for {
			res, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: o, TTL: runstate.DefaultRecoveryLeaseTTL, Max: 4})
			if err != nil {
				c.Errorf("ClaimRuns to succeed", "%s", describeErr(err))
				return
			}
			if len(res.Claims) == 0 {
				return
			}
			mu.Lock()
			for _, cl := range res.Claims {
				claimedBy[cl.Run.RunID] = append(claimedBy[cl.Run.RunID], o.Worker)
			}
			mu.Unlock()
		}
	})
	for id, by := range claimedBy {
		if len(by) != 1 {
			c.Errorf("each run claimed by one batch only", "%s claimed %d times, by %v", id, len(by), by)
		}
	}
	if len(claimedBy) != runs {
		c.Errorf(fmt.Sprintf("all %d runs claimed before the claimers were told nothing is runnable", runs), "%d claimed", len(claimedBy))
	}
}

func checkClaimRunsOrder(c *checkState) {
	b := c.batchClaimerOf(c.store)
	for _, prio := range []int{0, 5, 1, 5, -1, 2} {
		c.create(runstate.CreateRunParams{Priority: prio})
	}
	c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Priority: 9}) // not in the default statuses
	held := c.create(runstate.CreateRunParams{Priority: 9})
	c.hold(held.RunID, owner("other"))
	page, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{})
	if err != nil {
		c.Fatalf("ListRunnableRuns to succeed", "%s", describeErr(err))
	}
	res, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w1"), TTL: outlast, Max: 3})
	if err != nil || len(res.Claims) != 3 {
		c.Fatalf("3 claims of 6 runnable runs with Max 3", "%d claims, %s", len(res.Claims), describeErr(err))
	}
	for i, cl := range res.Claims {
		if cl.Run.RunID != page.Runs[i].RunID {
			c.Errorf(fmt.Sprintf("claim %d to be run %s, in claim order", i, page.Runs[i].RunID), "%s", cl.Run.RunID)
		}
		c.expectFencingClaim(cl, owner("w1"))
	}
	rest, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w2"), TTL: outlast, Max: 100})
	if err != nil || len(rest.Claims) != len(page.Runs)-3 {
		c.Errorf(fmt.Sprintf("the %d runnable runs left, claimed with Max 100", len(page.Runs)-3), "%d claims, %s", len(rest.Claims), describeErr(err))
	}
	none, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w3"), TTL: c.ttl(), Max: 5})
	if err != nil || len(none.Claims) != 0 {
		c.Errorf("no claim and no error when nothing is runnable", "%d claims, %s", len(none.Claims), describeErr(err))
	}
	// The filter: runs of higher priority that fail one field each stay.
	pool := map[string]string{"pool": "x"}
	var want []string
	for range 2 {
		want = append(want, c.create(runstate.CreateRunParams{Labels: pool}).RunID)
	}
	c.create(runstate.CreateRunParams{WorkflowName: "elsewhere", Priority: 9, Labels: pool})
	c.create(runstate.CreateRunParams{Priority: 9, Labels: map[string]string{"pool": "y"}})
	filtered, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w4"), TTL: outlast, Max: 10,
		Filter: runstate.RunnableFilter{WorkflowName: workflow, Labels: pool}})
	var got []string
	for _, cl := range filtered.Claims {
		got = append(got, cl.Run.RunID)
	}
	if err != nil || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		c.Errorf(fmt.Sprintf("ClaimRuns with a workflow and a label to claim exactly %v", want), "%v, %s", got, describeErr(err))
	}
}

// expectFencingClaim checks one claim of a batch: its lease is by o, on its
// run, and its token fences: another owner is refused, a newer token is
// LEASE_LOST, and the claim's own token writes.
func (c *checkState) expectFencingClaim(cl runstate.Claim, o runstate.Owner) {
	if cl.Lease.RunID != cl.Run.RunID || cl.Lease.Owner != o || cl.Lease.Token < 1 {
		c.Errorf("a lease by "+o.String()+" on the claimed run, with a positive token", "%s", jsonOf(cl))
		return
	}
	_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: cl.Run.RunID, Owner: owner("thief"), TTL: c.ttl(), Statuses: anyLive})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming a run a batch claimed")
	p := runstate.UpdateRunParams{RunID: cl.Run.RunID, ExpectedVersion: cl.Run.Version, LeaseToken: cl.Lease.Token + 1, Message: ptr("fenced")}
	_, err = c.store.UpdateRun(c.ctx, p)
	c.expectErr(err, runstate.ErrLeaseLost, "a write with a token newer than the batch's claim")
	p.LeaseToken = cl.Lease.Token
	c.update(p)
}

func checkClaimRunsStart(c *checkState) {
	b := c.batchClaimerOf(c.store)
	before := map[string]runstate.RunSnapshot{}
	for range 3 {
		r := c.newRun()
		before[r.RunID] = r
	}
	waiting := c.runIn(runstate.StatusWaiting, runstate.CreateRunParams{})
	before[waiting.RunID] = waiting
	_, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w1"), TTL: c.ttl(), Max: 10, Start: true,
		Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running"}}})
	c.expectInvalid(err, "ClaimRuns with Start and a filter naming running")
	actor := runstate.Actor{Kind: runstate.ActorWorker, ID: "w1"}
	res, err := b.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w1"), TTL: outlast, Max: 10, Start: true, Actor: actor, Reason: "batch start"})
	if err != nil || len(res.Claims) != len(before) {
		c.Fatalf(fmt.Sprintf("%d claims that start their runs", len(before)), "%d claims, %s", len(res.Claims), describeErr(err))
	}
	reader, hasReader := runstate.As[runstate.LeaseReader](c.store)
	for _, cl := range res.Claims {
		was := before[cl.Run.RunID]
		if cl.Run.Status != runstate.StatusRunning || cl.Run.Version != was.Version+1 || cl.Run.StartedAt.IsZero() {
			c.Errorf("each claimed run running at its version + 1, started", "%s (was %s at version %d)", jsonOf(cl.Run), was.Status, was.Version)
		}
		if got := c.get(cl.Run.RunID); jsonOf(got) != jsonOf(cl.Run) {
			c.Errorf("GetRun to return the started run the claim returned", "%s", jsonOf(got))
		}
		events := c.events(cl.Run.RunID)
		last := events[len(events)-1]
		if last.Kind != runstate.AuditTransition || last.From != was.Status || last.To != runstate.StatusRunning ||
			last.Version != cl.Run.Version || last.LeaseToken != cl.Lease.Token || last.Actor != c.recorded(actor) || last.Reason != "batch start" {
			c.Errorf("the start's transition event, with the claim's token, actor and reason", "%s", jsonOf(last))
		}
		if hasReader {
			if l, err := reader.GetLease(c.ctx, cl.Run.RunID); err != nil || l.Token != cl.Lease.Token || l.Owner != owner("w1") {
				c.Errorf("the claim's lease to be the run's current one", "%s, %s", jsonOf(l), describeErr(err))
			}
		}
		c.expectFencingClaim(cl, owner("w1"))
	}
}

func checkBatchLimits(c *checkState) {
	f := runstate.Resolve(c.store)
	bc, bu, bk := f.BatchCreator, f.BatchUpdater, f.BatchClaimer
	creates, updates, claims := bc != nil, bu != nil, bk != nil
	if !creates && !updates && !claims {
		c.skip(lackAnyBatch)
	}
	run := c.newRun()
	before := c.state(run.RunID)
	if creates {
		for _, n := range []int{0, runstate.MaxBatchItems + 1} {
			_, err := bc.CreateRuns(c.ctx, runstate.CreateRunsParams{Runs: batchOf("limit", n)})
			c.expectInvalid(err, fmt.Sprintf("CreateRuns of %d runs", n))
		}
		if n := c.runCount(); n != 1 {
			c.Errorf("refused batches to create nothing", "%d runs stored, 1 before", n)
		}
	}
	if updates {
		for _, n := range []int{0, runstate.MaxBatchItems + 1} {
			ups := make([]runstate.UpdateRunParams, n)
			for i := range ups {
				ups[i] = runstate.UpdateRunParams{RunID: fmt.Sprintf("limit-%d", i), ExpectedVersion: 1, Message: ptr("x")}
			}
			if n > 0 {
				ups[0] = runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Message: ptr("over the limit")}
			}
			_, err := bu.UpdateRuns(c.ctx, runstate.UpdateRunsParams{Updates: ups})
			c.expectInvalid(err, fmt.Sprintf("UpdateRuns of %d updates", n))
		}
	}
	if claims {
		for _, n := range []int{0, runstate.MaxBatchItems + 1} {
			_, err := bk.ClaimRuns(c.ctx, runstate.ClaimRunsParams{Owner: owner("w1"), TTL: c.ttl(), Max: n})
			c.expectInvalid(err, fmt.Sprintf("ClaimRuns with Max %d", n))
		}
		if ls, ok := runstate.As[runstate.LeaseStore](c.store); ok {
			page, err := ls.ListRunnableRuns(c.ctx, runstate.ListRunnableParams{})
			if err != nil || len(page.Runs) != 1 {
				c.Errorf("the run still runnable after refused claims", "%d runnable, %s", len(page.Runs), describeErr(err))
			}
		}
	}
	c.expectUnchanged(before, "after batches over the limit were refused")
}
