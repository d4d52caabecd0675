package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// Context returns the check's context.
func (c *checkState) Context() context.Context { return c.ctx }

// leases returns the store's LeaseStore. A target that declares Leases but
// does not implement the interface fails the rule.
func (c *checkState) leases() runstate.Store {
	return c.leaseStoreOf(c.store)
}

// second returns the check's second handle, as another worker process
// would hold it. It is opened once per check: a check that races in rounds
// must not open (and keep, until the harness closes) a pool per round.
func (c *checkState) second() runstate.RunStateStore {
	c.secondMu.Lock()
	defer c.secondMu.Unlock()
	if c.other == nil {
		s, err := c.h.OpenHandle(c.ctx)
		if err != nil {
			c.harnessFatal("opening a second handle: %v", err)
		}
		c.other = s
	}
	return c.other
}

// handles returns n handles alternating between the primary and, when the
// target has one, a second handle; concurrency checks spread workers over them.
func (c *checkState) handles(n int) []runstate.RunStateStore {
	out := make([]runstate.RunStateStore, n)
	var other runstate.RunStateStore = c.store
	if c.target.Capabilities.SecondHandle {
		other = c.second()
	}
	for i := range out {
		out[i] = c.store
		if i%2 == 1 {
			out[i] = other
		}
	}
	return out
}

// leaseStoreOf returns s with its lease side as a Store; a handle without
// leases fails the rule.
func (c *checkState) leaseStoreOf(s runstate.RunStateStore) runstate.Store {
	ls, ok := runstate.As[runstate.Store](s)
	if !ok {
		c.Fatalf("every handle of a store declaring the leases capability to have leases (Features().Leases)", "%T has none", s)
	}
	return ls
}

// parallel runs fn(0) … fn(n-1) in goroutines released at the same moment
// and waits for all of them. A panic in one becomes a harness error instead
// of crashing the process; Fatalf ends only that goroutine.
func (c *checkState) parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					c.broke(fmt.Sprintf("panic in goroutine %d: %v\n%s", i, p, debug.Stack()))
				}
			}()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

func (c *checkState) ttl() time.Duration {
	if c.target.LeaseTTL > 0 {
		return c.target.LeaseTTL
	}
	return 300 * time.Millisecond
}

// pass lets d go by on the store's clock: advancing it when controlled,
// sleeping otherwise.
func (c *checkState) pass(d time.Duration) {
	if c.target.Capabilities.ControlledClock {
		c.h.Advance(d)
		return
	}
	select {
	case <-time.After(d):
	case <-c.ctx.Done():
		c.harnessFatal("context ended while waiting %v", d)
	}
}

// expire lets a lease of c.ttl() run out, with a margin for real clocks.
func (c *checkState) expire() { c.pass(c.ttl() + c.ttl()/2 + 50*time.Millisecond) }

const workflow = "conformance"

func (c *checkState) create(p runstate.CreateRunParams) runstate.RunSnapshot {
	if p.WorkflowName == "" {
		p.WorkflowName = workflow
	}
	run, err := c.store.CreateRun(c.ctx, p)
	if err != nil {
		c.Fatalf("CreateRun to succeed", "%s", describeErr(err))
	}
	return run
}

func (c *checkState) newRun() runstate.RunSnapshot { return c.create(runstate.CreateRunParams{}) }

func (c *checkState) update(p runstate.UpdateRunParams) runstate.RunSnapshot {
	run, err := c.store.UpdateRun(c.ctx, p)
	if err != nil {
		c.Fatalf("UpdateRun to succeed", "%s for %s", describeErr(err), jsonOf(p))
	}
	return run
}

// move transitions run to status to, with whatever the status requires.
func (c *checkState) move(run runstate.RunSnapshot, to runstate.RunStatus) runstate.RunSnapshot {
	return c.update(transition(run, to))
}

// runIn creates a run and drives it to status along the shortest allowed path.
func (c *checkState) runIn(status runstate.RunStatus, p runstate.CreateRunParams) runstate.RunSnapshot {
	run := c.create(p)
	for _, st := range pathTo(status) {
		run = c.move(run, st)
	}
	return run
}

func (c *checkState) get(id string) runstate.RunSnapshot {
	run, err := c.store.GetRun(c.ctx, id)
	if err != nil {
		c.Fatalf("GetRun to succeed", "%s", describeErr(err))
	}
	return run
}

// events returns every audit event of a run, following pages.
func (c *checkState) events(id string) []runstate.AuditEvent {
	var out []runstate.AuditEvent
	var after int64
	for {
		page, err := c.store.ListAuditEvents(c.ctx, runstate.ListAuditParams{RunID: id, AfterSeq: after})
		if err != nil {
			c.Fatalf("ListAuditEvents to succeed", "%s", describeErr(err))
		}
		out = append(out, page.Events...)
		if !page.More || len(page.Events) == 0 {
			break
		}
		after = page.Events[len(page.Events)-1].Seq
	}
	// Every trail any check reads is numbered 1, 2, 3, …: writes that
	// record two events at once included (AUD-002).
	for i, e := range out {
		if e.Seq != int64(i+1) {
			c.Errorf(fmt.Sprintf("the audit trail of run %s numbered 1, 2, 3, … without gaps or repeats", id), "event %d has seq %d", i+1, e.Seq)
			break
		}
	}
	return out
}

// runState is everything observable about one run.
type runState struct {
	snap   runstate.RunSnapshot
	events []runstate.AuditEvent
}

func (c *checkState) state(id string) runState { return runState{c.get(id), c.events(id)} }

// expectUnchanged reports a failure when the run differs from before.
func (c *checkState) expectUnchanged(before runState, after string) {
	now := c.state(before.snap.RunID)
	if a, b := jsonOf(before.snap), jsonOf(now.snap); a != b {
		c.Errorf("the run unchanged "+after, "snapshot changed from %s to %s", a, b)
	}
	if len(now.events) != len(before.events) {
		c.Errorf("no audit event "+after, "%d events before, %d after: %s", len(before.events), len(now.events), jsonOf(now.events[min(len(before.events), len(now.events)):]))
	}
}

// expectErr reports whether err matches want with errors.Is, recording a
// failure otherwise.
func (c *checkState) expectErr(err error, want error, doing string) bool {
	if errors.Is(err, want) {
		return true
	}
	c.Errorf(fmt.Sprintf("%s to fail with %s", doing, runstate.CodeOf(want)), "%s", describeErr(err))
	return false
}

// expectInvalid checks an ErrInvalidArgument that names the offending field.
func (c *checkState) expectInvalid(err error, doing string) {
	if !c.expectErr(err, runstate.ErrInvalidArgument, doing) {
		return
	}
	var e *runstate.Error
	if !errors.As(err, &e) || e.Field == "" || e.Message == "" {
		c.Errorf(doing+" to name the offending field in an *runstate.Error", "%s", describeErr(err))
	}
}

func describeErr(err error) string {
	if err == nil {
		return "success"
	}
	return fmt.Sprintf("error %q (code %q)", err.Error(), runstate.CodeOf(err))
}

// transition builds an update moving run to status to, with a diagnostic or
// interrupted_reason where the status requires one.
func transition(run runstate.RunSnapshot, to runstate.RunStatus) runstate.UpdateRunParams {
	p := runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(to),
		Actor: runstate.Actor{Kind: runstate.ActorWorker, ID: "conformance"}, Reason: "conformance check"}
	if to.RequiresDiagnostic() {
		p.Diagnostic = &runstate.Diagnostic{ErrorCode: "E_CONFORMANCE", Message: "entered " + string(to) + " on purpose", Retryable: true}
	}
	if to == runstate.StatusInterrupted {
		p.InterruptedReason = "CONFORMANCE"
	}
	return p
}

// pathTo returns the shortest sequence of allowed transitions from queued to
// target (empty for queued), found by searching the transition table.
func pathTo(target runstate.RunStatus) []runstate.RunStatus {
	return shortestPath(runstate.StatusQueued, target, allowedFrom)
}

// allowedFrom returns the statuses the table allows from from, in lifecycle order.
func allowedFrom(from runstate.RunStatus) []runstate.RunStatus {
	var out []runstate.RunStatus
	for _, to := range runstate.RunStatuses() {
		if runstate.CanTransition(from, to) {
			out = append(out, to)
		}
	}
	return out
}

// stepPathTo is pathTo for the step table.
func stepPathTo(target runstate.StepStatus) []runstate.StepStatus {
	return shortestPath(runstate.StepQueued, target, func(from runstate.StepStatus) []runstate.StepStatus {
		var out []runstate.StepStatus
		for _, to := range runstate.StepStatuses() {
			if runstate.CanStepTransition(from, to) {
				out = append(out, to)
			}
		}
		return out
	})
}

// shortestPath searches a transition table breadth-first.
func shortestPath[S comparable](start, target S, next func(S) []S) []S {
	prev := map[S]S{start: start}
	queue := []S{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == target {
			var path []S
			for s := cur; s != start; s = prev[s] {
				path = append([]S{s}, path...)
			}
			return path
		}
		for _, n := range next(cur) {
			if _, seen := prev[n]; !seen {
				prev[n] = cur
				queue = append(queue, n)
			}
		}
	}
	panic(fmt.Sprintf("%v is unreachable from %v", target, start))
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

var worker = runstate.Actor{Kind: runstate.ActorWorker, ID: "conformance"}

// recorded is actor a as the target records it: with the principal the
// target sets on every write, when it sets one (Target.Principal).
func (c *checkState) recorded(a runstate.Actor) runstate.Actor {
	if c.target.Principal != "" {
		a.Principal = c.target.Principal
	}
	return a
}
