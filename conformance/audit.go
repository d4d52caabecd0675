package conformance

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("AUD-001", "Creating a run records exactly one audit event: seq 1, kind created, to queued, version 1, with the actor and reason given.", none, checkCreateEvent)
	register("AUD-002", "Every accepted status transition records exactly one audit event with from, to, time, actor, reason, error_code and the resulting version, numbered 1, 2, 3, … per run.", none, checkTransitionEvents)
	register("AUD-003", "A write that changes no status records no audit event.", none, checkNoEventWithoutTransition)
	register("AUD-004", "A refused write (conflict, missing diagnostic, lease lost, invalid argument, forbidden step move) records no audit event.", none, checkNoEventOnRefusal)
	register("AUD-005", "Under concurrent writers every run's events match its accepted transitions one to one, with gap-free sequence numbers.", none, checkAuditUnderConcurrency)
	register("AUD-006", "Audit events page by sequence number without gaps or repeats; the audit of an unknown run is NOT_FOUND.", none, checkAuditPaging)
	register("AUD-007", "Every audit event records the lease token its write carried (0 for an unfenced write), also for rejected transitions.", leases, checkEventLeaseToken)
	register("AUD-008", "An actor given without a kind is recorded as operator, with its id, on create and update.", none, checkUnnamedActors)
	register("AUD-009", "Writes refused at once on a terminal run each record one rejected event; the trail stays numbered 1, 2, 3, … without repeats or gaps.", none, checkConcurrentRefusals)
	register("AUD-010", "A write's principal is recorded, exactly as given, beside its actor in every event the write causes (created, transition, rejected); a write without one records none.", none, checkPrincipals)
}

func checkCreateEvent(c *checkState) {
	actor := runstate.Actor{Kind: runstate.ActorOperator, ID: "alice"}
	before := time.Now().Add(-time.Minute)
	run := c.create(runstate.CreateRunParams{Actor: actor, Reason: "nightly build"})
	evs := c.events(run.RunID)
	if len(evs) != 1 {
		c.Fatalf("exactly one event after create", "%d: %s", len(evs), jsonOf(evs))
	}
	e := evs[0]
	if e.RunID != run.RunID || e.Seq != 1 || e.Kind != runstate.AuditCreated || e.From != "" || e.To != runstate.StatusQueued ||
		e.Version != 1 || e.Actor != c.recorded(actor) || e.Reason != "nightly build" || !e.Time.Equal(run.CreatedAt) {
		c.Errorf("seq 1, created, to queued, version 1, actor operator/alice, reason, time = created_at", "%s", jsonOf(e))
	}
	if !c.target.Capabilities.ControlledClock && e.Time.Before(before) {
		c.Errorf("the event time to be now", "%v", e.Time)
	}
}

func checkTransitionEvents(c *checkState) {
	run := c.newRun()
	path := []runstate.RunStatus{runstate.StatusRunning, runstate.StatusWaiting, runstate.StatusRunning, runstate.StatusFailed}
	from := runstate.StatusQueued
	for i, to := range path {
		c.pass(time.Millisecond)
		p := transition(run, to)
		p.Actor = runstate.Actor{Kind: runstate.ActorWorker, ID: fmt.Sprintf("w%d", i)}
		p.Reason = fmt.Sprintf("step %d", i)
		run = c.update(p)
		evs := c.events(run.RunID)
		if len(evs) != i+2 {
			c.Fatalf(fmt.Sprintf("%d events after %d transitions", i+2, i+1), "%d: %s", len(evs), jsonOf(evs))
		}
		e := evs[i+1]
		wantCode := ""
		if p.Diagnostic != nil {
			wantCode = p.Diagnostic.ErrorCode
		}
		if e.Seq != int64(i+2) || e.Kind != runstate.AuditTransition || e.From != from || e.To != to || e.Actor != c.recorded(p.Actor) ||
			e.Reason != p.Reason || e.ErrorCode != wantCode || e.Version != run.Version || !e.Time.Equal(run.UpdatedAt) {
			c.Errorf(fmt.Sprintf("event seq %d: transition %s -> %s by %s, version %d, error_code %q, time = updated_at", i+2, from, to, p.Actor.ID, run.Version, wantCode), "%s", jsonOf(e))
		}
		from = to
	}
}

func checkNoEventWithoutTransition(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h"}}}})
	n := len(c.events(run.RunID))
	for _, p := range []runstate.UpdateRunParams{
		{Message: ptr("progress")},
		{Steps: []runstate.StepPatch{{Name: "build", Status: "running", Hosts: []runstate.HostPatch{{Host: "h", Status: "running", OutputSummary: ptr("ok")}}}}},
		{Labels: map[string]string{"a": "b"}},
	} {
		p.RunID, p.ExpectedVersion = run.RunID, run.Version
		run = c.update(p)
	}
	if got := len(c.events(run.RunID)); got != n {
		c.Errorf("no audit events for writes without a status change", "%d new events", got-n)
	}
}

func checkNoEventOnRefusal(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{{Name: "build"}}})
	before := c.state(run.RunID)
	refusals := map[string]runstate.UpdateRunParams{
		"a stale version":         {RunID: run.RunID, ExpectedVersion: run.Version + 1, Status: "success"},
		"a missing diagnostic":    {RunID: run.RunID, ExpectedVersion: run.Version, Status: "failed"},
		"an unknown status":       {RunID: run.RunID, ExpectedVersion: run.Version, Status: "exploded"},
		"a forbidden step move":   {RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{{Name: "build", Status: "success"}}},
		"a never-issued token":    {RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: 42, Status: "success"},
		"an oversize message":     {RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr(string(make([]byte, runstate.MaxMessageLen+1)))},
		"a zero expected version": {RunID: run.RunID, Status: "success"},
	}
	for name, p := range refusals {
		if _, err := c.store.UpdateRun(c.ctx, p); err == nil {
			c.Errorf("an update with "+name+" to be refused", "it succeeded")
		}
		c.expectUnchanged(before, "after an update with "+name)
	}
}

func checkAuditUnderConcurrency(c *checkState) {
	const runs, racers = 6, 6
	stores := c.handles(runs * racers)
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = c.newRun().RunID
	}
	var mu sync.Mutex
	accepted := map[string]int{} // accepted transitions per run
	c.parallel(runs*racers, func(i int) {
		id, st := ids[i%runs], stores[i]
		// Each racer pushes its run along running <-> waiting; every
		// accepted CAS write is one transition.
		for range 8 {
			run, err := st.GetRun(c.ctx, id)
			if err != nil {
				c.Errorf("GetRun to succeed", "%s", describeErr(err))
				return
			}
			to := runstate.StatusRunning
			if run.Status == runstate.StatusRunning {
				to = runstate.StatusWaiting
			}
			_, err = st.UpdateRun(c.ctx, transition(run, to))
			switch {
			case err == nil:
				mu.Lock()
				accepted[id]++
				mu.Unlock()
			case !errors.Is(err, runstate.ErrVersionConflict):
				c.Errorf("a racing transition to succeed or conflict", "%s", describeErr(err))
			}
		}
	})
	for _, id := range ids {
		run := c.get(id)
		evs := c.events(id)
		if len(evs) != accepted[id]+1 || run.Version != int64(accepted[id]+1) {
			c.Errorf(fmt.Sprintf("run %s: %d events and version %d for %d accepted transitions", id, accepted[id]+1, accepted[id]+1, accepted[id]),
				"%d events, version %d", len(evs), run.Version)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || e.Version != int64(i+1) || (i > 0 && e.From != evs[i-1].To) {
				c.Errorf("events numbered 1..n, version = seq, each from = previous to", "event %d: %s", i, jsonOf(e))
				break
			}
		}
	}
}

func checkAuditPaging(c *checkState) {
	run := c.newRun()
	for range 5 {
		run = c.move(c.move(run, runstate.StatusRunning), runstate.StatusWaiting)
	}
	const want = 11
	// Page sizes that end on a partial page, on a full one (11), and past the end.
	for _, limit := range []int{1, 4, 11, 12} {
		var got []int64
		var after int64
		for pages := 0; ; pages++ {
			page, err := c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: run.RunID, AfterSeq: after, Limit: limit})
			if err != nil {
				c.Fatalf("paging the audit to succeed", "%s", describeErr(err))
			}
			if len(page.Events) > limit || pages > want {
				c.Fatalf(fmt.Sprintf("pages of at most %d that end", limit), "page of %d", len(page.Events))
			}
			if page.More && len(page.Events) < limit {
				c.Errorf(fmt.Sprintf("a page of %d with more to come to be full", limit), "%d events, more", len(page.Events))
			}
			if pages > 0 && len(page.Events) == 0 {
				c.Errorf(fmt.Sprintf("more reported only when events follow (limit %d)", limit), "an empty page after a page that said more")
			}
			for _, e := range page.Events {
				got = append(got, e.Seq)
			}
			if !page.More {
				break
			}
			after = page.Events[len(page.Events)-1].Seq
		}
		if len(got) != want {
			c.Errorf(fmt.Sprintf("%d events over all pages of %d", want, limit), "%v", got)
		}
		for i, s := range got {
			if s != int64(i+1) {
				c.Errorf(fmt.Sprintf("sequence 1..11 without gaps or repeats in pages of %d", limit), "%v", got)
				break
			}
		}
	}
	// after_seq in the middle and past the end.
	page, err := c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: run.RunID, AfterSeq: 9})
	if err != nil || len(page.Events) != 2 || page.Events[0].Seq != 10 || page.More {
		c.Errorf("events 10 and 11 after seq 9, no more", "%s %s", jsonOf(page), describeErr(err))
	}
	if page, err := c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: run.RunID, AfterSeq: 11}); err != nil || len(page.Events) != 0 || page.More {
		c.Errorf("no events after the last one", "%s %s", jsonOf(page), describeErr(err))
	}
	_, err = c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: "no-such-run"})
	c.expectErr(err, runstate.ErrNotFound, "the audit of an unknown run")
}

func checkEventLeaseToken(c *checkState) {
	run := c.newRun()
	first := c.claim(run.RunID, owner("w1"))
	if err := c.leases().ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: run.RunID, Token: first.Lease.Token}); err != nil {
		c.Fatalf("release to succeed", "%s", describeErr(err))
	}
	cl := c.claim(run.RunID, owner("w2")) // a token other than 1, so 1 cannot pass by chance
	fenced := transition(run, runstate.StatusRunning)
	fenced.LeaseToken = cl.Lease.Token
	run = c.update(fenced)
	unfenced := c.update(transition(run, runstate.StatusWaiting))
	bad := transition(unfenced, runstate.StatusSuccess) // waiting -> success is forbidden
	bad.LeaseToken = cl.Lease.Token
	_, err := c.store.UpdateRun(c.ctx, bad)
	c.expectErr(err, runstate.ErrInvalidTransition, "a fenced forbidden transition")
	want := []int64{0, cl.Lease.Token, 0, cl.Lease.Token, cl.Lease.Token}
	evs := c.events(run.RunID)
	var got []int64
	for _, e := range evs {
		got = append(got, e.LeaseToken)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		c.Errorf(fmt.Sprintf("lease tokens %v on created, fenced running, unfenced waiting, rejected and failed events", want), "%v in %s", got, jsonOf(evs))
	}
}

func checkUnnamedActors(c *checkState) {
	run := c.create(runstate.CreateRunParams{Actor: runstate.Actor{ID: "cron"}, Reason: "nightly"})
	p := transition(run, runstate.StatusRunning)
	p.Actor = runstate.Actor{ID: "alice"}
	c.update(p)
	evs := c.events(run.RunID)
	want := []runstate.Actor{{Kind: runstate.ActorOperator, ID: "cron"}, {Kind: runstate.ActorOperator, ID: "alice"}}
	for i, w := range want {
		if i >= len(evs) || evs[i].Actor != c.recorded(w) {
			c.Errorf(fmt.Sprintf("event %d by %s/%s", i+1, w.Kind, w.ID), "%s", jsonOf(evs))
			return
		}
	}
	// A retry is a create like any other.
	done := c.runIn(runstate.StatusFailed, runstate.CreateRunParams{})
	retry := c.create(runstate.CreateRunParams{RetryOf: done.RunID, Actor: runstate.Actor{ID: "bob"}})
	if evs := c.events(retry.RunID); len(evs) != 1 || evs[0].Actor != c.recorded(runstate.Actor{Kind: runstate.ActorOperator, ID: "bob"}) {
		c.Errorf("a retry's created event by operator/bob", "%s", jsonOf(evs))
	}
}

// checkConcurrentRefusals races writes that a terminal run refuses. Each
// refusal appends one event and changes no snapshot, so a store that
// guards its writes by the snapshot's version alone (compare-and-set on
// the run's key) appends them from a stale read and repeats a seq.
func checkConcurrentRefusals(c *checkState) {
	const runs, racers, rounds = 3, 6, 4
	stores := c.handles(racers)
	for range runs {
		run := c.runIn(runstate.StatusSuccess, runstate.CreateRunParams{})
		before := len(c.events(run.RunID))
		var refused atomic.Int64
		for range rounds {
			c.parallel(racers, func(i int) {
				p := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Message: ptr(fmt.Sprintf("late %d", i)), Reason: "late write"}
				if i%2 == 1 {
					p = transition(run, runstate.StatusRunning)
				}
				_, err := stores[i].UpdateRun(c.ctx, p)
				if c.expectErr(err, runstate.ErrInvalidTransition, "a write to a terminal run, racing others") {
					refused.Add(1)
				}
			})
		}
		evs := c.events(run.RunID) // reports repeated or missing seq numbers
		if len(evs) != before+int(refused.Load()) {
			c.Errorf(fmt.Sprintf("run %s: one rejected event per refused write, %d in all", run.RunID, before+int(refused.Load())), "%d events: %s", len(evs), jsonOf(evs[min(before, len(evs)):]))
		}
		for _, e := range evs[min(before, len(evs)):] {
			if e.Kind != runstate.AuditRejected || e.Version != run.Version {
				c.Errorf("each event after the run ended to be rejected, at the run's final version", "%s", jsonOf(e))
				break
			}
		}
		if got := c.get(run.RunID); got.Version != run.Version || got.Status != runstate.StatusSuccess {
			c.Errorf("the terminal run unchanged by the refused writes", "%s", jsonOf(got))
		}
	}
}

// checkPrincipals: AUD-010.
func checkPrincipals(c *checkState) {
	// An operator token acting on behalf of a scheduler creates the run;
	// a worker runs it; an unauthenticated writer fails it; the operator's
	// late write to the failed run is rejected, and still names it.
	onBehalf := runstate.Actor{Kind: runstate.ActorOperator, ID: "cron", Principal: "ops-token"}
	run := c.create(runstate.CreateRunParams{Actor: onBehalf, Reason: "nightly"})
	p := transition(run, runstate.StatusRunning)
	p.Actor = runstate.Actor{Kind: runstate.ActorWorker, ID: "w1", Principal: "worker-w1"}
	run = c.update(p)
	p = transition(run, runstate.StatusFailed)
	p.Actor = runstate.Actor{Kind: runstate.ActorWorker, ID: "w1"}
	run = c.update(p)
	late := transition(run, runstate.StatusRunning)
	late.Actor = onBehalf
	if _, err := c.store.UpdateRun(c.ctx, late); !errors.Is(err, runstate.ErrInvalidTransition) {
		c.Errorf("INVALID_TRANSITION for a write to a failed run", "%v", err)
	}
	want := []runstate.Actor{onBehalf, {Kind: runstate.ActorWorker, ID: "w1", Principal: "worker-w1"}, {Kind: runstate.ActorWorker, ID: "w1"}, onBehalf}
	evs := c.events(run.RunID)
	if len(evs) != len(want) {
		c.Fatalf(fmt.Sprintf("%d events (created, two transitions, rejected)", len(want)), "%s", jsonOf(evs))
	}
	for i, w := range want {
		if w = c.recorded(w); evs[i].Actor != w {
			c.Errorf(fmt.Sprintf("event %d (%s) by %s/%s with principal %q", i+1, evs[i].Kind, w.Kind, w.ID, w.Principal), "%s", jsonOf(evs[i]))
		}
	}
}
