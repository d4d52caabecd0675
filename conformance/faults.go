package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// Fault is a disturbance between a store's handles and its backend that a
// harness can cause (the faults capability).
type Fault string

// The faults a harness may declare.
const (
	// FaultPartition: traffic stops both ways; calls and new connections
	// hang until the partition heals.
	FaultPartition Fault = "partition"
	// FaultReset: every connection open at that moment is cut, as by a TCP
	// reset; new ones work. The fault is over when StartFault returns.
	FaultReset Fault = "reset"
	// FaultDelay: every round trip takes FaultParams.Delay longer.
	FaultDelay Fault = "delay"
	// FaultRestart: the backend stops as a crash stops it (killed, no clean
	// shutdown) and comes back at EndFault with the data it had committed.
	FaultRestart Fault = "restart"
	// FaultMemberRestart: one member of a replicated backend, not its
	// leader, stops as a crash stops it and comes back at EndFault; the
	// others, a quorum, go on serving.
	FaultMemberRestart Fault = "member-restart"
	// FaultLeaderRestart: as FaultMemberRestart, of the member that leads:
	// the others elect a new leader.
	FaultLeaderRestart Fault = "leader-restart"
	// FaultFailover: the primary of a replicated backend stops as a crash
	// stops it and a standby is promoted in its place, which the handles
	// reach by the addresses they were given (a DSN naming every host).
	// When StartFault returns the standby is promoted; EndFault makes the
	// old primary a standby of the new one, so that failovers can repeat.
	FaultFailover Fault = "failover"
)

// cutsOff reports whether f leaves the backend unreachable while it
// lasts, so that writes during it must fail.
func (f Fault) cutsOff() bool {
	return f == FaultPartition || f == FaultRestart || f == FaultFailover
}

// FaultParams says which fault to start.
type FaultParams struct {
	Fault Fault
	// Delay is the round trip a FaultDelay adds.
	Delay time.Duration
}

// FaultInjector is implemented by the Harness of a target that declares
// Capabilities.Faults. It disturbs the path between every handle the
// harness opened and their backend, never the store handles themselves:
// the rules are about what the store does when its backend misbehaves.
// The suite starts only declared faults, one at a time, and calls
// EndFault after every StartFault.
type FaultInjector interface {
	// StartFault begins the fault. For FaultRestart the backend is down
	// when it returns.
	StartFault(ctx context.Context, p FaultParams) error
	// EndFault ends the fault that StartFault began: the partition heals,
	// the delay goes, a restarted backend is up and answering.
	EndFault(ctx context.Context) error
}

func init() {
	register("FAULT-001", "During a partition every call returns UNAVAILABLE or the context's error by its deadline.", Capabilities{Faults: []Fault{FaultPartition}}, func(c *checkState) { checkCallsReturnDuring(c, FaultPartition) })
	register("FAULT-002", "While the backend restarts every call returns UNAVAILABLE or the context's error by its deadline.", Capabilities{Faults: []Fault{FaultRestart}}, func(c *checkState) { checkCallsReturnDuring(c, FaultRestart) })
	register("FAULT-003", "A write acknowledged before or during a fault is present after it, with its audit event.", anyFault, checkAcknowledgedWritesSurvive)
	register("FAULT-004", "A write that fails because of a fault, alone or in a batch, fails with UNAVAILABLE or the context's error and is applied wholly or not at all: snapshot and audit trail agree, without a version gap or a repeated event.", anyFault, checkWritesWhollyOrNot)
	register("FAULT-005", "Claim-next never hands one run to two owners across a fault, and a claim cut off by a fault leaves no lease but a whole one of its TTL.", Capabilities{Leases: true, Faults: anyFault.Faults}, checkClaimsAcrossFaults)
	register("FAULT-006", "Once a fault ends, the same handle works again within "+recoveryLimit.String()+", without being reopened.", anyFault, checkWorksAfterFault)
	register("FAULT-007", "Over a slow link calls succeed, only slower; a call whose deadline is shorter than a round trip returns by it, its write applied wholly or not at all.", Capabilities{Faults: []Fault{FaultDelay}}, checkSlowLink)
	register("FAULT-008", "While one member of a replicated backend is down, its leader included, every call succeeds again within "+recoveryLimit.String()+" of the loss, before the member is back.", Capabilities{Faults: memberFaults}, checkServesWithoutAMember)
	// A failover's rules are FAULT-003…006's, checked apart: a target that
	// passes them certifies its replication, not only its connections.
	register("FAULT-009", "A write acknowledged before or during a failover is present on the promoted primary, with its audit event.", onFailover, checkAcknowledgedWritesSurvive)
	register("FAULT-010", "A write that fails because of a failover fails with UNAVAILABLE or the context's error and is applied wholly or not at all on the promoted primary.", onFailover, checkWritesWhollyOrNot)
	register("FAULT-011", "Claim-next never hands one run to two owners across a failover, and a claim cut off by it leaves no lease but a whole one of its TTL.", Capabilities{Leases: true, Faults: onFailover.Faults}, checkClaimsAcrossFaults)
	register("FAULT-012", "Within "+failoverLimit.String()+" of the primary's loss every handle held through a failover writes again on the promoted primary, without being reopened.", onFailover, checkWritesAgainAfterFailover)
}

// onFailover: the check runs under a failover, where the target declares it.
var onFailover = Capabilities{Faults: []Fault{FaultFailover}}

// memberFaults are the losses of one member of a replicated backend.
var memberFaults = []Fault{FaultMemberRestart, FaultLeaderRestart}

// anyFault: the check runs under each of these the target declares.
var anyFault = Capabilities{Faults: []Fault{FaultPartition, FaultReset, FaultRestart, FaultMemberRestart, FaultLeaderRestart}}

const (
	// callDeadline bounds each call the fault checks make while a fault lasts.
	callDeadline = time.Second
	// deadlineGrace is how long past its deadline a call may return, for
	// scheduling on a loaded machine; a call later than that hangs.
	deadlineGrace = time.Second
	// faultHold is how long a fault lasts while writers run.
	faultHold = 1500 * time.Millisecond
	// writeDeadline bounds each call of the writers and claimers that run
	// through a fault.
	writeDeadline = callDeadline / 2
	// recoveryLimit is how soon a handle must work again after a fault.
	recoveryLimit = 10 * time.Second
	// failoverLimit is how soon after the primary's loss a handle must
	// write again on the promoted one: the kill, the promotion, and, with
	// synchronous replication, a standby back to acknowledge commits.
	failoverLimit = 30 * time.Second
)

// injector returns the harness's FaultInjector; a harness that declares
// faults without one is broken.
func (c *checkState) injector() FaultInjector {
	fi, ok := c.h.(FaultInjector)
	if !ok {
		c.harnessFatal("the target declares faults %v but its harness %T does not implement conformance.FaultInjector", c.target.Capabilities.Faults, c.h)
	}
	return fi
}

// faultsToRun returns the faults among the rule's that the target declares.
func (c *checkState) faultsToRun() []Fault {
	var out []Fault
	for _, f := range c.rule.Requires.Faults {
		if slices.Contains(c.target.Capabilities.Faults, f) {
			out = append(out, f)
		}
	}
	return out
}

// a names a fault in messages: "a partition".
func (f Fault) a() string { return "a " + string(f) }

// startFault starts p; a fault that fails to start is ended (the
// harness may have half-started it) and the check ends as broken.
func (c *checkState) startFault(p FaultParams) {
	if err := c.injector().StartFault(c.ctx, p); err != nil {
		endErr := c.injector().EndFault(context.WithoutCancel(c.ctx))
		c.harnessFatal("starting fault %s: %v (ending it: %v)", p.Fault, err, endErr)
	}
}

func (c *checkState) endFault(f Fault) {
	if err := c.injector().EndFault(context.WithoutCancel(c.ctx)); err != nil {
		c.harnessFatal("ending fault %s: %v", f, err)
	}
}

// faultError reports whether err is what a call cut off by a fault may
// return: UNAVAILABLE or the context's error.
func faultError(err error) bool {
	return errors.Is(err, runstate.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// timedCall is one call made with a deadline while a fault lasts.
type timedCall struct {
	name string
	call func(ctx context.Context) error
}

// callOutcome is how a timed call ended; returned is false for a call
// still running deadlineGrace after its deadline.
type callOutcome struct {
	err      error
	took     time.Duration
	returned bool
	panicked bool // the check is broken already
}

// within makes call with deadline d and waits for it until d plus the
// grace. A call that has not returned by then is left running: done is
// closed when it does. A panic in it breaks the check.
func (c *checkState) within(d time.Duration, call func(ctx context.Context) error) (callOutcome, <-chan struct{}) {
	ended := make(chan struct{})
	var (
		mu  sync.Mutex
		res callOutcome
	)
	ctx, cancel := context.WithTimeout(c.ctx, d)
	began := time.Now()
	go func() {
		defer close(ended)
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				c.broke(fmt.Sprintf("panic in a call during a fault: %v\n%s", p, debug.Stack()))
				mu.Lock()
				res.panicked = true
				mu.Unlock()
			}
		}()
		err := call(ctx)
		mu.Lock()
		res = callOutcome{err: err, took: time.Since(began), returned: true}
		mu.Unlock()
	}()
	select {
	case <-ended:
	case <-time.After(d + deadlineGrace - time.Since(began)):
	}
	mu.Lock()
	defer mu.Unlock()
	return res, ended
}

// callsDuringFault are the calls FAULT-001, FAULT-002 and FAULT-007 make:
// reads, writes and, with leases, claims and renewals, on runs made
// before the fault.
func (c *checkState) callsDuringFault() []timedCall {
	queued := c.newRun()
	running := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	reads := []timedCall{
		{"GetRun", func(ctx context.Context) error { _, err := c.store.GetRun(ctx, queued.RunID); return err }},
		{"ListRuns", func(ctx context.Context) error {
			_, err := c.store.ListRuns(ctx, runstate.ListRunsParams{})
			return err
		}},
		{"ListAuditEvents", func(ctx context.Context) error {
			_, err := c.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: queued.RunID})
			return err
		}},
	}
	// Each read once before the fault: a store that caches what it read
	// must not answer from the cache while the backend is out of reach.
	for _, read := range reads {
		if err := read.call(c.ctx); err != nil {
			c.Fatalf(read.name+" to succeed before the fault", "%s", describeErr(err))
		}
	}
	calls := append(reads,
		timedCall{"CreateRun", func(ctx context.Context) error {
			_, err := c.store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: workflow})
			return err
		}},
		timedCall{"UpdateRun", func(ctx context.Context) error {
			_, err := c.store.UpdateRun(ctx, transition(queued, runstate.StatusRunning))
			return err
		}})
	if c.target.Capabilities.Leases {
		ls := c.leases()
		cl := c.claim(running.RunID, owner("holder"))
		calls = append(calls,
			timedCall{"ClaimNextRun", func(ctx context.Context) error {
				_, err := ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner("claimer"), TTL: time.Minute})
				return err
			}},
			timedCall{"RenewLease", func(ctx context.Context) error {
				_, err := ls.RenewLease(ctx, runstate.RenewLeaseParams{RunID: running.RunID, Token: cl.Lease.Token, TTL: time.Minute})
				return err
			}})
	}
	return calls
}

// checkCallsReturnDuring: FAULT-001 and FAULT-002.
func checkCallsReturnDuring(c *checkState, f Fault) {
	calls := c.callsDuringFault()
	c.startFault(FaultParams{Fault: f})
	outcomes := make([]callOutcome, len(calls))
	dones := make([]<-chan struct{}, len(calls))
	c.parallel(len(calls), func(i int) { outcomes[i], dones[i] = c.within(callDeadline, calls[i].call) })
	c.endFault(f)
	for i, o := range outcomes {
		name := calls[i].name
		switch {
		case !o.returned:
			c.Errorf(fmt.Sprintf("%s during %s to return by its deadline of %v", name, f.a(), callDeadline), "still running %v after it", deadlineGrace)
		case o.err == nil:
			c.Errorf(fmt.Sprintf("%s during %s to fail: the backend cannot be reached", name, f.a()), "it succeeded after %v (does the fault reach this handle?)", o.took.Round(time.Millisecond))
		case !faultError(o.err):
			c.Errorf(fmt.Sprintf("%s during %s to fail with UNAVAILABLE or the context's error", name, f.a()), "%s", describeErr(o.err))
		}
	}
	var slowest time.Duration
	for i, o := range outcomes {
		if o.returned {
			slowest = max(slowest, o.took)
			continue
		}
		// Healed, a hung call may still end; one that does not is left.
		select {
		case <-dones[i]:
		case <-time.After(recoveryLimit):
		}
	}
	c.note(fmt.Sprintf("%d calls during %s, slowest returned after %v", len(calls), f.a(), slowest.Round(time.Millisecond)))
}

// faultSpan is when a fault of faultWhile started and ended: the zero
// time until it did.
type faultSpan struct {
	mu             sync.Mutex
	started, ended time.Time
}

func (s *faultSpan) set(at *time.Time) { s.mu.Lock(); defer s.mu.Unlock(); *at = time.Now() }

// endedAt is when the fault ended, the zero time until it has.
func (s *faultSpan) endedAt() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.ended }

func (s *faultSpan) startedAt() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.started }

// faultWhile starts fault f after a while, in the background, ends it
// faultHold later, and returns at once: the span says when it did.
func (c *checkState) faultWhile(f Fault, after time.Duration) *faultSpan {
	span := &faultSpan{}
	go func() {
		defer span.set(&span.ended)
		defer func() {
			if p := recover(); p != nil {
				c.broke(fmt.Sprintf("panic while causing %s: %v\n%s", f.a(), p, debug.Stack()))
			}
		}()
		time.Sleep(after)
		span.set(&span.started)
		c.startFault(FaultParams{Fault: f})
		defer c.endFault(f)
		time.Sleep(faultHold)
	}()
	return span
}

// faultCall makes one call of a writer or claimer with the writers'
// deadline. A call that does not return by it (and the grace) is a
// failure of the check's rule, and stops its caller: ok is false.
func (c *checkState) faultCall(what string, f Fault, call func(ctx context.Context) error) (err error, ok bool) {
	o, _ := c.within(writeDeadline, call)
	if o.panicked {
		return nil, false
	}
	if !o.returned {
		c.Errorf(fmt.Sprintf("%s around %s to return by its deadline of %v", what, f.a(), writeDeadline), "still running %v after it", deadlineGrace)
		return nil, false
	}
	return o.err, true
}

// checkAcknowledgedWritesSurvive: FAULT-003.
func checkAcknowledgedWritesSurvive(c *checkState) {
	for _, f := range c.faultsToRun() {
		l := c.writeThroughFault(f)
		for _, e := range l.lost {
			c.Errorf(fmt.Sprintf("no acknowledged write lost across %s", f.a()), "%s", e)
		}
		n := 0
		for _, id := range l.runs {
			got, evs := c.get(id), c.events(id)
			recorded := map[ack]bool{}
			for _, e := range evs {
				reason := e.Reason
				if e.Kind == runstate.AuditCreated {
					reason = ""
				}
				recorded[ack{e.Version, e.To, reason}] = true
			}
			for _, a := range l.acks[id] {
				n++
				if got.Version < a.version {
					c.Errorf(fmt.Sprintf("run %s, acknowledged at version %d (%s) before or during %s, at that version or later after it", id, a.version, a.status, f.a()),
						"version %d (%s)", got.Version, got.Status)
				}
				if !recorded[a] {
					c.Errorf(fmt.Sprintf("run %s's audit trail to hold the event of its acknowledged write %q to %s at version %d across %s", id, a.reason, a.status, a.version, f.a()),
						"%d events, the last %s", len(evs), jsonOf(evs[max(0, len(evs)-2):]))
				}
			}
		}
		c.note(fmt.Sprintf("%s: %d acknowledged writes present, %d failed writes", f, n, l.failed))
	}
}

// checkWritesWhollyOrNot: FAULT-004.
func checkWritesWhollyOrNot(c *checkState) {
	for _, f := range c.faultsToRun() {
		l := c.writeThroughFault(f)
		for _, e := range l.unexpect {
			c.Errorf(fmt.Sprintf("a write cut off by %s to fail with UNAVAILABLE or the context's error", f.a()), "%s", e)
		}
		for _, id := range l.runs {
			c.trailAgrees(id, f.a())
		}
		c.note(fmt.Sprintf("%s: %d writes failed, every run's snapshot and trail agree", f, l.failed))
	}
}

// trailAgrees checks that a run whose every write is a transition has a
// trail of one event per version, the last matching the snapshot: a write
// applied wholly or not at all, none applied twice.
func (c *checkState) trailAgrees(id, across string) {
	got, evs := c.get(id), c.events(id)
	for i, e := range evs {
		if e.Version != int64(i+1) {
			c.Errorf(fmt.Sprintf("run %s's trail across %s to hold one event per version, 1, 2, 3, … (every write to it is a transition)", id, across),
				"event %d is at version %d: %s", i+1, e.Version, jsonOf(evs[max(0, i-1):min(len(evs), i+2)]))
			return
		}
	}
	if len(evs) == 0 {
		c.Errorf(fmt.Sprintf("run %s to have its created event after %s", id, across), "no events")
		return
	}
	if last := evs[len(evs)-1]; last.Version != got.Version || last.To != got.Status {
		c.Errorf(fmt.Sprintf("run %s's snapshot across %s to be what its last audit event says (a write applied wholly or not at all)", id, across),
			"snapshot %s at version %d; last event to %s at version %d", got.Status, got.Version, last.To, last.Version)
	}
}

// checkWorksAfterFault: FAULT-006.
func checkWorksAfterFault(c *checkState) {
	for _, f := range c.faultsToRun() {
		l := c.writeThroughFault(f)
		c.expectWritersBack(f, l)
		c.note(fmt.Sprintf("%s: every writer wrote again within %v of its end", f, slices.Max(append(l.afterEnd, 0)).Round(time.Millisecond)))
		// The same handle answers reads and creates too.
		run := c.newRun()
		c.trailAgrees(run.RunID, f.a())
	}
}

// expectWritersBack: every writer of l wrote again within recoveryLimit
// of the end of f, and failed meanwhile only as a fault's call may.
func (c *checkState) expectWritersBack(f Fault, l *writeLedger) {
	for _, w := range l.notBack {
		c.Errorf(fmt.Sprintf("every writer to write again within %v of the end of %s, on the handle it held through it", recoveryLimit, f.a()), "%s", w)
	}
	for _, e := range l.late {
		c.Errorf(fmt.Sprintf("calls after %s ended to succeed or fail with UNAVAILABLE until the handle works again", f.a()), "%s", e)
	}
}

// checkWritesAgainAfterFailover: FAULT-012. The bound runs from the
// primary's loss: the end of a failover is the harness's (a standby
// rebuilt), the loss is what a deployment's users see.
func checkWritesAgainAfterFailover(c *checkState) {
	for _, f := range c.faultsToRun() {
		l := c.writeThroughFault(f)
		c.expectWritersBack(f, l)
		held := l.span.endedAt().Sub(l.span.startedAt())
		var slowest time.Duration
		for _, d := range l.afterEnd {
			slowest = max(slowest, held+d)
		}
		if slowest > failoverLimit {
			c.Errorf(fmt.Sprintf("every writer to write again on the promoted primary within %v of the primary's loss", failoverLimit),
				"the last wrote again %v after it (the failover took %v, with the standby rebuilt)", slowest.Round(time.Millisecond), held.Round(time.Millisecond))
		}
		c.note(fmt.Sprintf("%s: the harness's failover took %v; every writer wrote again within %v of the primary's loss", f, held.Round(time.Millisecond), slowest.Round(time.Millisecond)))
	}
}

// checkClaimsAcrossFaults: FAULT-005.
func checkClaimsAcrossFaults(c *checkState) {
	handles := c.handles(faultClaimers)
	for _, f := range c.faultsToRun() {
		l := c.claimThroughFault(f, handles)
		for _, e := range l.odd {
			c.Errorf(fmt.Sprintf("a claim cut off by %s to fail with UNAVAILABLE or the context's error", f.a()), "%s", e)
		}
		for _, o := range l.gaveUp {
			c.Errorf(fmt.Sprintf("claim-next to drain the queue within %v of the end of %s", recoveryLimit, f.a()), "%s still claiming", o)
		}
		c.expectQueueDrained(f, l)
		lingering := c.expectOneWholeLeaseEach(f, l)
		c.note(fmt.Sprintf("%s: %d claims acknowledged, %d made whole by claims whose answer was lost, %d NOT_FOUND during the fault", f, len(l.claims), lingering, l.notFound))
	}
}

// expectQueueDrained: every run was claimed, by an answer or by a claim
// whose answer was lost: a NOT_FOUND said while a run was claimable is false.
func (c *checkState) expectQueueDrained(f Fault, l *claimLedger) {
	left, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{WorkflowName: l.queue}})
	if err != nil {
		c.Fatalf("ListRunnableRuns to succeed after the fault", "%s", describeErr(err))
	}
	if len(left.Runs) > 0 && !l.hung && len(l.gaveUp) == 0 {
		c.Errorf(fmt.Sprintf("claim-next to answer NOT_FOUND only with no run claimable, across %s", f.a()),
			"%d runs still runnable after the claimers were told NOT_FOUND, such as %s", len(left.Runs), left.Runs[0].RunID)
	}
}

// expectOneWholeLeaseEach: no run of the pool was claimed twice, and, where
// the store tells who holds a lease, each lease is its acknowledged claim's
// or a whole one of a claim whose answer was lost. It returns how many of
// the latter there are.
func (c *checkState) expectOneWholeLeaseEach(f Fault, l *claimLedger) (lingering int) {
	reader, hasReader := runstate.As[runstate.LeaseReader](c.store)
	for _, id := range l.ids {
		got := l.claims[id]
		if len(got) > 1 {
			c.Errorf(fmt.Sprintf("run %s claimed by one owner across %s (leases of %v)", id, f.a(), faultClaimTTL), "claimed %d times: %s", len(got), jsonOf(got))
		}
		if !hasReader {
			continue
		}
		lease, err := reader.GetLease(c.ctx, id)
		if err != nil {
			c.Fatalf("GetLease to succeed after the fault", "%s", describeErr(err))
		}
		switch {
		case len(got) == 1 && (lease.Token != got[0].Token || lease.Owner != got[0].Owner):
			c.Errorf(fmt.Sprintf("run %s's lease to be the one its acknowledged claim returned across %s", id, f.a()), "claimed %s, lease now %s", jsonOf(got[0]), jsonOf(lease))
		case lease.Token != 0 && !strings.HasPrefix(lease.Owner.Worker, "claimer-"):
			c.Errorf(fmt.Sprintf("run %s's lease held by one of the claimers", id), "%s", jsonOf(lease))
		case lease.Token != 0 && lease.ExpiresAt.Sub(lease.AcquiredAt) != faultClaimTTL:
			c.Errorf(fmt.Sprintf("run %s's lease, cut off by %s or not, to last its TTL of %v (a whole claim)", id, f.a(), faultClaimTTL), "%s", jsonOf(lease))
		}
		if len(got) == 0 && lease.Token != 0 {
			lingering++
		}
	}
	return lingering
}

// checkSlowLink: FAULT-007.
func checkSlowLink(c *checkState) {
	const delay = 300 * time.Millisecond
	run := c.newRun()
	c.startFault(FaultParams{Fault: FaultDelay, Delay: delay})
	defer c.endFault(FaultDelay)
	began := time.Now()
	got, err := c.store.GetRun(c.ctx, run.RunID)
	took := time.Since(began)
	switch {
	case err != nil:
		c.Errorf("GetRun over a slow link to succeed", "%s", describeErr(err))
	case took < delay:
		c.Errorf(fmt.Sprintf("GetRun over a link with a %v round trip to take at least that long", delay), "it took %v (does the delay reach this handle?)", took)
	case got.Version != run.Version:
		c.Errorf("GetRun over a slow link to return the run", "%s", jsonOf(got))
	}
	moved, err := c.store.UpdateRun(c.ctx, transition(run, runstate.StatusRunning))
	if err != nil {
		c.Errorf("UpdateRun over a slow link to succeed", "%s", describeErr(err))
	} else {
		run = moved
	}
	short := delay / 3
	o, done := c.within(short, func(ctx context.Context) error {
		_, err := c.store.UpdateRun(ctx, transition(run, runstate.StatusWaiting))
		return err
	})
	switch {
	case !o.returned:
		c.Errorf(fmt.Sprintf("UpdateRun with a %v deadline over a link with a %v round trip to return by its deadline", short, delay), "still running %v after it", deadlineGrace)
	case o.err == nil:
		c.Errorf(fmt.Sprintf("UpdateRun with a %v deadline over a link with a %v round trip to fail", short, delay), "it succeeded after %v", o.took)
	case !faultError(o.err):
		c.Errorf("UpdateRun past its deadline over a slow link to fail with UNAVAILABLE or the context's error", "%s", describeErr(o.err))
	}
	select {
	case <-done:
	case <-time.After(recoveryLimit):
	}
	c.trailAgrees(run.RunID, "a slow link")
	c.note(fmt.Sprintf("GetRun took %v over a link with a %v round trip", took.Round(time.Millisecond), delay))
}

// checkServesWithoutAMember: FAULT-008. With a member down, each call of
// callsDuringFault is made until it succeeds; each must within
// recoveryLimit of the loss, and fail meanwhile only as a fault's call
// may. UpdateRun reads the run afresh each time, so that a write whose
// answer a leader's loss cut off is not mistaken for a refusal.
func checkServesWithoutAMember(c *checkState) {
	for _, f := range c.faultsToRun() {
		calls := c.callsWithoutAMember()
		c.startFault(FaultParams{Fault: f})
		lost := time.Now()
		took := make([]time.Duration, len(calls))
		c.parallel(len(calls), func(i int) { took[i] = c.callUntilServed(f, calls[i], lost) })
		c.endFault(f)
		c.note(fmt.Sprintf("%s: every call served %v after the loss at the latest", f, slices.Max(took).Round(time.Millisecond)))
	}
}

// callsWithoutAMember are FAULT-008's calls: those of callsDuringFault,
// with an update that may be made again, and queued runs enough for
// claim-next to succeed after a claim whose answer was lost.
func (c *checkState) callsWithoutAMember() []timedCall {
	calls := c.callsDuringFault()
	target := c.newRun()
	for range 3 {
		c.newRun()
	}
	for i, call := range calls {
		if call.name == "UpdateRun" {
			calls[i].call = func(ctx context.Context) error {
				cur, err := c.store.GetRun(ctx, target.RunID)
				if err != nil {
					return err
				}
				msg := "written while a member is down"
				_, err = c.store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: cur.RunID, ExpectedVersion: cur.Version, Message: &msg})
				return err
			}
		}
	}
	return calls
}

// callUntilServed makes call until it succeeds and returns how long after
// the loss it did; a call that fails otherwise than a fault's, hangs, or
// is not served within recoveryLimit breaks the rule.
func (c *checkState) callUntilServed(f Fault, call timedCall, lost time.Time) time.Duration {
	for {
		o, _ := c.within(callDeadline, call.call)
		switch {
		case o.panicked:
			return 0
		case !o.returned:
			c.Errorf(fmt.Sprintf("%s during %s to return by its deadline of %v", call.name, f.a(), callDeadline), "still running %v after it", deadlineGrace)
			return 0
		case o.err == nil:
			return time.Since(lost)
		case !faultError(o.err):
			c.Errorf(fmt.Sprintf("%s during %s to succeed, or fail with UNAVAILABLE or the context's error", call.name, f.a()), "%s", describeErr(o.err))
			return 0
		case time.Since(lost) > recoveryLimit:
			c.Errorf(fmt.Sprintf("%s to succeed within %v of %s, with the member still down", call.name, recoveryLimit, f.a()), "%s", describeErr(o.err))
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}
