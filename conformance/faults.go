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
)

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
	register("FAULT-004", "A write that fails because of a fault fails with UNAVAILABLE or the context's error and is applied wholly or not at all: snapshot and audit trail agree, without a version gap or a repeated event.", anyFault, checkWritesWhollyOrNot)
	register("FAULT-005", "Claim-next never hands one run to two owners across a fault, and a claim cut off by a fault leaves no lease but a whole one of its TTL.", Capabilities{Leases: true, Faults: []Fault{FaultPartition, FaultReset, FaultRestart}}, checkClaimsAcrossFaults)
	register("FAULT-006", "Once a fault ends, the same handle works again within "+recoveryLimit.String()+", without being reopened.", anyFault, checkWorksAfterFault)
	register("FAULT-007", "Over a slow link calls succeed, only slower; a call whose deadline is shorter than a round trip returns by it, its write applied wholly or not at all.", Capabilities{Faults: []Fault{FaultDelay}}, checkSlowLink)
}

// anyFault: the check runs under each of these the target declares.
var anyFault = Capabilities{Faults: []Fault{FaultPartition, FaultReset, FaultRestart}}

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
	calls := []timedCall{
		{"GetRun", func(ctx context.Context) error { _, err := c.store.GetRun(ctx, queued.RunID); return err }},
		{"CreateRun", func(ctx context.Context) error {
			_, err := c.store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: workflow})
			return err
		}},
		{"UpdateRun", func(ctx context.Context) error {
			_, err := c.store.UpdateRun(ctx, transition(queued, runstate.StatusRunning))
			return err
		}},
		{"ListRuns", func(ctx context.Context) error {
			_, err := c.store.ListRuns(ctx, runstate.ListRunsParams{})
			return err
		}},
		{"ListAuditEvents", func(ctx context.Context) error {
			_, err := c.store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: queued.RunID})
			return err
		}},
	}
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

// faultWhile starts fault f after a while, in the background, ends it
// faultHold later, and returns when it ended: the zero time until then.
func (c *checkState) faultWhile(f Fault, after time.Duration) (endedAt func() time.Time) {
	var (
		mu    sync.Mutex
		ended time.Time
	)
	go func() {
		defer func() { mu.Lock(); defer mu.Unlock(); ended = time.Now() }()
		defer func() {
			if p := recover(); p != nil {
				c.broke(fmt.Sprintf("panic while causing %s: %v\n%s", f.a(), p, debug.Stack()))
			}
		}()
		time.Sleep(after)
		c.startFault(FaultParams{Fault: f})
		defer c.endFault(f)
		time.Sleep(faultHold)
	}()
	return func() time.Time { mu.Lock(); defer mu.Unlock(); return ended }
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

// ack is a write the store acknowledged: the run at that version, and
// the write's own reason, which its audit event records.
type ack struct {
	version int64
	status  runstate.RunStatus
	reason  string
}

// faultLedger is what the writers of a fault scenario saw.
type faultLedger struct {
	mu       sync.Mutex
	runs     []string
	acks     map[string][]ack
	failed   int      // writes that failed with a fault's error
	unexpect []string // writes that failed otherwise
	// lost: a run read back older than a write acknowledged on it.
	lost     []string
	afterEnd []time.Duration // per writer: from the fault's end to its first write
	notBack  []string        // writers with no write within recoveryLimit of the end, and why
	late     []string        // errors other than a fault's after the end
}

func (l *faultLedger) add(list *[]string, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*list = append(*list, fmt.Sprintf(format, args...))
}

// writeThroughFault runs writers over fresh runs, each moving its runs
// queued -> running -> waiting -> running …, each write with a reason of
// its own, spread over both handles where the target has two; starts
// fault f while they write, ends it after faultHold, and lets them go on
// until each has written again after the end, or recoveryLimit has passed.
func (c *checkState) writeThroughFault(f Fault) *faultLedger {
	const writers, runsEach = 4, 2
	l := &faultLedger{acks: map[string][]ack{}}
	start := make([][]runstate.RunSnapshot, writers)
	for w := range writers {
		for range runsEach {
			run := c.newRun()
			start[w] = append(start[w], run)
			l.runs = append(l.runs, run.RunID)
			l.acks[run.RunID] = []ack{{run.Version, run.Status, ""}}
		}
	}
	handles := c.handles(writers)
	endedAt := c.faultWhile(f, 200*time.Millisecond)
	c.parallel(writers, func(w int) {
		store, runs := handles[w], start[w]
		stale := make([]bool, len(runs))
		acked := make([]int64, len(runs)) // the version last acknowledged per run
		// conflicted: the version a write expected when it met
		// VERSION_CONFLICT, which only an applied earlier write explains.
		conflicted := make([]int64, len(runs))
		var lastErr error
		for i := 0; ; i++ {
			end := endedAt()
			if !end.IsZero() && time.Since(end) > recoveryLimit {
				l.add(&l.notBack, "writer %d, last error: %s", w, describeErr(lastErr))
				return
			}
			k := i % len(runs)
			var err error
			wrote := false
			if stale[k] {
				var got runstate.RunSnapshot
				var ok bool
				if err, ok = c.faultCall("GetRun", f, func(ctx context.Context) (err error) { got, err = store.GetRun(ctx, runs[k].RunID); return }); !ok {
					return
				}
				if err == nil {
					if got.Version < acked[k] {
						l.add(&l.lost, "run %s read back at version %d (%s) after version %d was acknowledged", got.RunID, got.Version, got.Status, acked[k])
					}
					if conflicted[k] > 0 && got.Version <= conflicted[k] {
						l.add(&l.unexpect, "VERSION_CONFLICT for a write expecting version %d of run %s, which is still at version %d: no write moved it",
							conflicted[k], got.RunID, got.Version)
					}
					conflicted[k] = 0
					runs[k], stale[k] = got, false
				}
			} else {
				p := transition(runs[k], runstate.StatusRunning)
				if runs[k].Status == runstate.StatusRunning {
					p = transition(runs[k], runstate.StatusWaiting)
				}
				p.Reason = fmt.Sprintf("writer %d write %d", w, i)
				var got runstate.RunSnapshot
				var ok bool
				if err, ok = c.faultCall("UpdateRun", f, func(ctx context.Context) (err error) { got, err = store.UpdateRun(ctx, p); return }); !ok {
					return
				}
				if err == nil {
					runs[k], acked[k], wrote = got, got.Version, true
					l.mu.Lock()
					l.acks[got.RunID] = append(l.acks[got.RunID], ack{got.Version, got.Status, p.Reason})
					l.mu.Unlock()
				} else {
					stale[k] = true
					switch {
					case faultError(err):
						l.mu.Lock()
						l.failed++
						l.mu.Unlock()
					case errors.Is(err, runstate.ErrVersionConflict):
						// An earlier write whose outcome was unknown was
						// applied: the next read must show it.
						conflicted[k] = p.ExpectedVersion
					default:
						l.add(&l.unexpect, "%s", describeErr(err))
					}
				}
			}
			if err != nil {
				lastErr = err
			}
			if end := endedAt(); !end.IsZero() {
				if wrote {
					l.mu.Lock()
					l.afterEnd = append(l.afterEnd, time.Since(end))
					l.mu.Unlock()
					return
				}
				if err != nil && !faultError(err) && !errors.Is(err, runstate.ErrVersionConflict) {
					l.add(&l.late, "writer %d: %s", w, describeErr(err))
				}
			}
			// Paced, so that the trails stay short enough to read whole.
			time.Sleep(10 * time.Millisecond)
		}
	})
	for endedAt().IsZero() {
		time.Sleep(10 * time.Millisecond)
	}
	if l.failed == 0 && f != FaultReset {
		// A reset may meet no call in flight; a partition or a restart of
		// 1.5 s cannot miss every write of four writers.
		c.Errorf(fmt.Sprintf("some writes during %s to fail: the backend cannot be reached", f.a()),
			"none failed (does the fault reach the store's handles?)")
	}
	return l
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
		for _, w := range l.notBack {
			c.Errorf(fmt.Sprintf("every writer to write again within %v of the end of %s, on the handle it held through it", recoveryLimit, f.a()), "%s", w)
		}
		for _, e := range l.late {
			c.Errorf(fmt.Sprintf("calls after %s ended to succeed or fail with UNAVAILABLE until the handle works again", f.a()), "%s", e)
		}
		var slowest time.Duration
		for _, d := range l.afterEnd {
			slowest = max(slowest, d)
		}
		c.note(fmt.Sprintf("%s: every writer wrote again within %v of its end", f, slowest.Round(time.Millisecond)))
		// The same handle answers reads and creates too.
		run := c.newRun()
		c.trailAgrees(run.RunID, f.a())
	}
}

// checkClaimsAcrossFaults: FAULT-005.
func checkClaimsAcrossFaults(c *checkState) {
	const claimers, pool = 4, 40
	const ttl = 10 * time.Minute
	handles := c.handles(claimers)
	for _, f := range c.faultsToRun() {
		queue := "fault-" + string(f)
		var ids []string
		for range pool {
			ids = append(ids, c.create(runstate.CreateRunParams{WorkflowName: queue}).RunID)
		}
		var (
			mu       sync.Mutex
			claims   = map[string][]runstate.Lease{}
			odd      []string
			gaveUp   []string
			hung     bool // a claimer stopped on a call that did not return
			notFound int  // answers NOT_FOUND while the fault lasted
		)
		endedAt := c.faultWhile(f, 100*time.Millisecond)
		c.parallel(claimers, func(w int) {
			ls := c.leaseStoreOf(handles[w])
			me := owner(fmt.Sprintf("claimer-%d", w))
			for {
				var cl runstate.Claim
				err, ok := c.faultCall("ClaimNextRun", f, func(ctx context.Context) (err error) {
					cl, err = ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: me, TTL: ttl, Filter: runstate.RunnableFilter{WorkflowName: queue}})
					return
				})
				if !ok {
					mu.Lock()
					hung = true
					mu.Unlock()
					return
				}
				end := endedAt()
				switch {
				case err == nil:
					mu.Lock()
					claims[cl.Run.RunID] = append(claims[cl.Run.RunID], cl.Lease)
					mu.Unlock()
					// Paced, so that the pool lasts through the fault.
					time.Sleep(150 * time.Millisecond)
				case errors.Is(err, runstate.ErrNotFound) && !end.IsZero():
					return
				case errors.Is(err, runstate.ErrNotFound):
					mu.Lock()
					notFound++
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
				case !faultError(err):
					mu.Lock()
					odd = append(odd, describeErr(err))
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
				default:
					time.Sleep(20 * time.Millisecond)
				}
				if !end.IsZero() && time.Since(end) > recoveryLimit {
					mu.Lock()
					gaveUp = append(gaveUp, me.String())
					mu.Unlock()
					return
				}
			}
		})
		for endedAt().IsZero() {
			time.Sleep(10 * time.Millisecond)
		}
		for _, e := range odd {
			c.Errorf(fmt.Sprintf("a claim cut off by %s to fail with UNAVAILABLE or the context's error", f.a()), "%s", e)
		}
		for _, o := range gaveUp {
			c.Errorf(fmt.Sprintf("claim-next to drain the queue within %v of the end of %s", recoveryLimit, f.a()), "%s still claiming", o)
		}
		// Every run was claimed, by an answer or by a claim whose answer
		// was lost: a NOT_FOUND said while a run was claimable is false.
		left, err := c.leases().ListRunnableRuns(c.ctx, runstate.ListRunnableParams{Filter: runstate.RunnableFilter{WorkflowName: queue}})
		if err != nil {
			c.Fatalf("ListRunnableRuns to succeed after the fault", "%s", describeErr(err))
		}
		if len(left.Runs) > 0 && !hung && len(gaveUp) == 0 {
			c.Errorf(fmt.Sprintf("claim-next to answer NOT_FOUND only with no run claimable, across %s", f.a()),
				"%d runs still runnable after the claimers were told NOT_FOUND, such as %s", len(left.Runs), left.Runs[0].RunID)
		}
		reader, hasReader := c.store.(runstate.LeaseReader)
		lingering := 0
		for _, id := range ids {
			got := claims[id]
			if len(got) > 1 {
				c.Errorf(fmt.Sprintf("run %s claimed by one owner across %s (leases of %v)", id, f.a(), ttl), "claimed %d times: %s", len(got), jsonOf(got))
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
			case lease.Token != 0 && lease.ExpiresAt.Sub(lease.AcquiredAt) != ttl:
				c.Errorf(fmt.Sprintf("run %s's lease, cut off by %s or not, to last its TTL of %v (a whole claim)", id, f.a(), ttl), "%s", jsonOf(lease))
			}
			if len(got) == 0 && lease.Token != 0 {
				lingering++
			}
		}
		c.note(fmt.Sprintf("%s: %d claims acknowledged, %d made whole by claims whose answer was lost, %d NOT_FOUND during the fault", f, len(claims), lingering, notFound))
	}
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
