package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("REC-001", "Recovery (policy interrupt) moves an orphaned running run to interrupted with reason CRASH_RECOVERY, finished at recovery time, by actor recovery.", none, checkRecoverInterrupt)
	register("REC-002", "Recovery (policy fail) moves an orphaned running run to failed with a retryable CRASH_RECOVERY diagnostic.", none, checkRecoverFail)
	register("REC-003", "Recovery moves the running steps and hosts of a recovered run like the run; other steps and hosts keep their state.", none, checkRecoverSteps)
	register("REC-004", "Recovery leaves unheld queued and waiting runs exactly as they are, unreported; it releases those an earlier incarnation of its worker holds and reports them re-queued.", none, checkRecoverRequeue)
	register("REC-005", "Recovery never touches a run under another worker's live lease.", leases, checkRecoverSkipsLeased)
	register("REC-006", "Recovery does not wait for leases held by an earlier incarnation of its own worker.", leases, checkRecoverOwnIncarnation)
	register("REC-007", "Recovery is idempotent: a second pass changes nothing.", none, checkRecoverIdempotent)
	register("REC-008", "Recovery never modifies a terminal run.", none, checkRecoverTerminal)
	register("REC-009", "Two recoveries running at once settle each orphaned run exactly once.", none, checkRecoverConcurrent)
	register("REC-010", "A run that finishes while recovery is in progress keeps its final state.", none, checkRecoverRace)
	register("REC-011", "Recovery (policy takeover) leaves orphaned running runs running and claimable only by claims that name running, releasing an earlier incarnation's lease.", leases, checkRecoverTakeover)
	register("REC-012", "Recovery reports and logs each run it changed with its new state, then a summary of counts and duration, and hands the report to its metrics hook.", none, checkRecoverReport)
}

func (c *checkState) recover(store runstate.RunStateStore, policy runstate.RecoveryPolicy, o runstate.Owner) runstate.RecoveryReport {
	rep, err := c.recoverWith(store, runstate.RecoveryOptions{Policy: policy, Owner: o, LeaseTTL: c.ttl() * 10, Logger: discardLogger})
	if err != nil {
		c.Fatalf("recovery to succeed", "%s", describeErr(err))
	}
	return rep
}

// recoverWith runs recovery the way the target's capabilities call for:
// Recover on a store with leases, RecoverExclusive on one without.
func (c *checkState) recoverWith(store runstate.RunStateStore, opts runstate.RecoveryOptions) (runstate.RecoveryReport, error) {
	if !c.target.Capabilities.Leases {
		return runstate.RecoverExclusive(c.ctx, store, opts)
	}
	full, ok := runstate.As[runstate.Store](store)
	if !ok {
		c.Fatalf("every handle of a store declaring the leases capability to implement runstate.Store", "%T does not", store)
	}
	return runstate.Recover(c.ctx, full, opts)
}

var discardLogger = slog.New(slog.DiscardHandler)

var recoverer = runstate.Owner{Worker: "recoverer", Incarnation: "boot-2"}

func checkRecoverInterrupt(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	c.pass(5 * time.Millisecond)
	t0 := time.Now()
	c.recover(c.store, runstate.RecoverInterrupt, recoverer)
	t1 := time.Now()
	got := c.get(run.RunID)
	if got.Status != runstate.StatusInterrupted || got.InterruptedReason != runstate.ReasonCrashRecovery {
		c.Errorf("interrupted with interrupted_reason CRASH_RECOVERY", "%s %q", got.Status, got.InterruptedReason)
	}
	if !got.FinishedAt.Equal(got.UpdatedAt) || !got.FinishedAt.After(run.UpdatedAt) {
		c.Errorf("finished_at = the recovery write's time, after the run's last write", "finished %v updated %v before %v", got.FinishedAt, got.UpdatedAt, run.UpdatedAt)
	}
	if !c.target.Capabilities.ControlledClock && (got.FinishedAt.Before(t0.Add(-time.Second)) || got.FinishedAt.After(t1.Add(time.Second))) {
		c.Errorf("finished_at within the recovery pass", "%v not in [%v, %v]", got.FinishedAt, t0, t1)
	}
	evs := c.events(run.RunID)
	if last := evs[len(evs)-1]; last.Kind != runstate.AuditTransition || last.From != runstate.StatusRunning || last.To != runstate.StatusInterrupted ||
		last.Actor != c.recorded(runstate.Actor{Kind: runstate.ActorRecovery, ID: recoverer.String()}) {
		c.Errorf("a running -> interrupted audit event by actor recovery, named after the recovering owner "+recoverer.String(), "%s", jsonOf(last))
	}
}

func checkRecoverFail(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	rep := c.recover(c.store, runstate.RecoverFail, recoverer)
	if rep.Failed != 1 || rep.Interrupted != 0 || len(rep.Runs) != 1 || rep.Runs[0].Outcome != runstate.OutcomeFailed {
		c.Errorf("a report of one run failed", "%s", jsonOf(rep))
	}
	got := c.get(run.RunID)
	if got.Status != runstate.StatusFailed || got.Diagnostic == nil || got.Diagnostic.ErrorCode != runstate.ReasonCrashRecovery ||
		!got.Diagnostic.Retryable || got.Diagnostic.Message == "" || got.FinishedAt.IsZero() {
		c.Errorf("failed with a retryable CRASH_RECOVERY diagnostic and finished_at", "%s", jsonOf(got))
	}
	evs := c.events(run.RunID)
	if last := evs[len(evs)-1]; last.To != runstate.StatusFailed || last.ErrorCode != runstate.ReasonCrashRecovery || last.Actor.Kind != runstate.ActorRecovery {
		c.Errorf("a running -> failed event with error_code CRASH_RECOVERY by actor recovery", "%s", jsonOf(last))
	}
}

func checkRecoverSteps(c *checkState) {
	for _, tc := range []struct {
		policy runstate.RecoveryPolicy
		want   runstate.StepStatus
	}{{runstate.RecoverInterrupt, runstate.StepInterrupted}, {runstate.RecoverFail, runstate.StepFailed}} {
		run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Steps: []runstate.StepSpec{
			{Name: "build", Hosts: []string{"h1"}}, {Name: "deploy", Hosts: []string{"h1", "h2", "h3"}}, {Name: "verify", Hosts: []string{"h1"}}}})
		run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{
			{Name: "build", Status: "running", Hosts: []runstate.HostPatch{{Host: "h1", Status: "running"}}},
			{Name: "deploy", Status: "running", Hosts: []runstate.HostPatch{{Host: "h1", Status: "running"}, {Host: "h2", Status: "running"}}},
		}})
		run = c.update(runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Steps: []runstate.StepPatch{
			{Name: "build", Status: "success", Hosts: []runstate.HostPatch{{Host: "h1", Status: "success"}}},
			{Name: "deploy", Hosts: []runstate.HostPatch{{Host: "h2", Status: "success"}}},
		}})
		c.recover(c.store, tc.policy, recoverer)
		got := c.get(run.RunID)
		want := map[string]runstate.StepStatus{
			"build": runstate.StepSuccess, "build/h1": runstate.StepSuccess,
			"deploy": tc.want, "deploy/h1": tc.want, "deploy/h2": runstate.StepSuccess, "deploy/h3": runstate.StepQueued,
			"verify": runstate.StepQueued, "verify/h1": runstate.StepQueued,
		}
		for _, st := range got.Steps {
			check := func(key string, status runstate.StepStatus, finished time.Time) {
				if status != want[key] || (status == tc.want && !finished.Equal(got.FinishedAt)) {
					c.Errorf(fmt.Sprintf("policy %s: %s %s (finished with the run when recovered)", tc.policy, key, want[key]), "%s finished %v", status, finished)
				}
			}
			check(st.Name, st.Status, st.FinishedAt)
			for _, h := range st.Hosts {
				check(st.Name+"/"+h.Host, h.Status, h.FinishedAt)
			}
		}
	}
}

func checkRecoverRequeue(c *checkState) {
	q := c.create(runstate.CreateRunParams{Priority: 7})
	w := c.runIn(runstate.StatusWaiting, runstate.CreateRunParams{Priority: -3})
	unheld := []runState{c.state(q.RunID), c.state(w.RunID)}
	var held runstate.RunSnapshot // waiting, under a live lease of the recoverer's previous incarnation
	if c.target.Capabilities.Leases {
		// A queued run whose lease expired holds nothing either.
		expired := c.create(runstate.CreateRunParams{Priority: 5})
		c.claim(expired.RunID, owner("gone"))
		c.expire()
		unheld = append(unheld, c.state(expired.RunID))
		held = c.runIn(runstate.StatusWaiting, runstate.CreateRunParams{})
		previous := runstate.Owner{Worker: recoverer.Worker, Incarnation: "boot-1"}
		if _, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: held.RunID, Owner: previous, TTL: time.Minute}); err != nil {
			c.Fatalf("claim to succeed", "%s", describeErr(err))
		}
	}
	rep := c.recover(c.store, runstate.RecoverInterrupt, recoverer)
	for _, b := range unheld {
		c.expectUnchanged(b, "after recovery met an unheld queued or waiting run")
	}
	if !c.target.Capabilities.Leases {
		if len(rep.Runs) != 0 || rep.Requeued != 0 {
			c.Errorf("unheld queued and waiting runs not reported", "%s", jsonOf(rep))
		}
		return
	}
	if rep.Requeued != 1 || len(rep.Runs) != 1 || rep.Runs[0].RunID != held.RunID || rep.Runs[0].Outcome != runstate.OutcomeRequeued ||
		rep.Runs[0].From != runstate.StatusWaiting || rep.Runs[0].To != runstate.StatusWaiting {
		c.Errorf("only the run the previous incarnation held reported (not the unheld ones, nor the one whose lease expired), re-queued waiting -> waiting", "%s", jsonOf(rep))
	}
	if got := c.get(held.RunID); got.Version != held.Version || got.Status != runstate.StatusWaiting || got.Priority != 0 {
		c.Errorf("the re-queued run with status, priority and version unchanged", "%s", jsonOf(got))
	}
	for _, want := range []string{q.RunID, unheld[2].snap.RunID, held.RunID, w.RunID} {
		// Leases that outlast the check, or a lapsed one's run is claimed again.
		cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: outlast})
		if err != nil || cl.Run.RunID != want {
			c.Errorf("all four runs claimable, in priority order", "claimed %q, want %q: %s", cl.Run.RunID, want, describeErr(err))
		}
	}
}

func checkRecoverSkipsLeased(c *checkState) {
	running := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	queued := c.newRun()
	for _, r := range []runstate.RunSnapshot{running, queued} {
		if _, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: r.RunID, Owner: owner("alive"), TTL: time.Minute, Statuses: []string{"queued", "running"}}); err != nil {
			c.Fatalf("claim to succeed", "%s", describeErr(err))
		}
	}
	before := []runState{c.state(running.RunID), c.state(queued.RunID)}
	rep := c.recover(c.store, runstate.RecoverInterrupt, recoverer)
	for _, b := range before {
		c.expectUnchanged(b, "after recovery met a live lease")
	}
	if rep.Interrupted != 0 || rep.Requeued != 0 || rep.Skipped != 2 {
		c.Errorf("both leased runs reported skipped", "%s", jsonOf(rep))
	}
	_, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: queued.RunID, Owner: owner("other"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrLeaseHeld, "claiming after recovery (the live worker's lease must stand)")
}

func checkRecoverOwnIncarnation(c *checkState) {
	run := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	previous := runstate.Owner{Worker: recoverer.Worker, Incarnation: "boot-1"}
	if _, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: previous, TTL: time.Minute, Statuses: []string{"running"}}); err != nil {
		c.Fatalf("claim to succeed", "%s", describeErr(err))
	}
	rep := c.recover(c.store, runstate.RecoverInterrupt, recoverer)
	if got := c.get(run.RunID); got.Status != runstate.StatusInterrupted || rep.Interrupted != 1 {
		c.Errorf("the run held by the previous incarnation interrupted at once", "%s, report %s", got.Status, jsonOf(rep))
	}
}

func checkRecoverIdempotent(c *checkState) {
	var ids []string
	for _, st := range []runstate.RunStatus{runstate.StatusQueued, runstate.StatusRunning, runstate.StatusRunning, runstate.StatusWaiting, runstate.StatusSuccess} {
		ids = append(ids, c.runIn(st, runstate.CreateRunParams{}).RunID)
	}
	first := c.recover(c.store, runstate.RecoverInterrupt, recoverer)
	if first.Interrupted != 2 {
		c.Errorf("the first pass to interrupt both running runs", "%s", jsonOf(first))
	}
	var after []runState
	for _, id := range ids {
		after = append(after, c.state(id))
	}
	second := c.recover(c.store, runstate.RecoverInterrupt, runstate.Owner{Worker: "recoverer", Incarnation: "boot-3"})
	for _, s := range after {
		c.expectUnchanged(s, "after a second recovery pass")
	}
	if second.Interrupted != 0 || second.Failed != 0 {
		c.Errorf("the second pass to interrupt nothing", "%s", jsonOf(second))
	}
}

func checkRecoverTerminal(c *checkState) {
	var before []runState
	for _, st := range runstate.RunStatuses() {
		if st.Terminal() {
			before = append(before, c.state(c.runIn(st, runstate.CreateRunParams{}).RunID))
		}
	}
	for _, policy := range []runstate.RecoveryPolicy{runstate.RecoverInterrupt, runstate.RecoverFail, runstate.RecoverTakeover} {
		rep := c.recover(c.store, policy, recoverer)
		if len(rep.Runs) != 0 {
			c.Errorf("terminal runs not even considered by recovery", "%s", jsonOf(rep.Runs))
		}
	}
	for _, b := range before {
		c.expectUnchanged(b, "after recovery")
	}
}

func checkRecoverConcurrent(c *checkState) {
	const n = 20
	var ids []string
	for range n {
		ids = append(ids, c.runIn(runstate.StatusRunning, runstate.CreateRunParams{}).RunID)
	}
	stores := c.handles(2)
	reports := make([]runstate.RecoveryReport, 2)
	c.parallel(2, func(i int) {
		reports[i] = c.recover(stores[i], runstate.RecoverInterrupt, runstate.Owner{Worker: fmt.Sprintf("recoverer-%d", i), Incarnation: "boot"})
	})
	c.expectSettledOnce(ids, reports)
	if !c.target.Capabilities.Leases {
		return
	}
	// Staged, so that timing cannot hide it: a second recovery runs whole
	// while the first holds its first claim. It must leave that run to the
	// first, which must not find its other runs taken from it either.
	ids = nil
	for range 4 {
		ids = append(ids, c.runIn(runstate.StatusRunning, runstate.CreateRunParams{}).RunID)
	}
	var once sync.Once
	hooked := withHooks(stores[0], hooks{afterClaim: func(context.Context, string) {
		once.Do(func() {
			reports[1] = c.recover(stores[1], runstate.RecoverInterrupt, runstate.Owner{Worker: "recoverer-b", Incarnation: "boot"})
		})
	}})
	reports[0] = c.recover(hooked, runstate.RecoverInterrupt, runstate.Owner{Worker: "recoverer-a", Incarnation: "boot"})
	c.expectSettledOnce(ids, reports)
}

// expectSettledOnce checks that the recoveries of reports together
// interrupted each run of ids exactly once.
func (c *checkState) expectSettledOnce(ids []string, reports []runstate.RecoveryReport) {
	total := 0
	for _, r := range reports {
		total += r.Interrupted
	}
	if total != len(ids) {
		c.Errorf(fmt.Sprintf("%d runs interrupted across both recoveries", len(ids)), "%d + %d", reports[0].Interrupted, reports[1].Interrupted)
	}
	for _, id := range ids {
		recoveries := 0
		for _, e := range c.events(id) {
			if e.Actor.Kind == runstate.ActorRecovery {
				recoveries++
			}
		}
		if got := c.get(id); got.Status != runstate.StatusInterrupted || recoveries != 1 {
			c.Errorf("each run interrupted by exactly one recovery", "run %s %s with %d recovery events", id, got.Status, recoveries)
		}
	}
}

func checkRecoverRace(c *checkState) {
	// finish completes a run through the real store the moment recovery has
	// looked at it, as a worker finishing its run would.
	finish := func(ctx context.Context, id string) {
		run, err := c.store.GetRun(ctx, id)
		if err == nil {
			_, err = c.store.UpdateRun(ctx, transition(run, runstate.StatusSuccess))
		}
		if err != nil {
			c.Errorf("the racing worker's write to succeed", "%s", describeErr(err))
		}
	}
	afterList := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{RunID: "finishes-after-list"})
	afterClaim := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{RunID: "finishes-after-claim"})
	var listed sync.Once
	hooked := withHooks(c.store, hooks{
		afterList: func(ctx context.Context) { listed.Do(func() { finish(ctx, afterList.RunID) }) },
		afterClaim: func(ctx context.Context, id string) {
			if id == afterClaim.RunID {
				finish(ctx, id)
			}
		},
	})
	if c.store.Features().Leases == nil {
		// Without leases recovery writes straight after reading: race there.
		hooked = withHooks(c.store, hooks{afterList: func(ctx context.Context) {
			listed.Do(func() {
				finish(ctx, afterList.RunID)
				finish(ctx, afterClaim.RunID)
			})
		}})
	}
	rep := c.recover(hooked, runstate.RecoverInterrupt, recoverer)
	for _, id := range []string{afterList.RunID, afterClaim.RunID} {
		got := c.get(id)
		if got.Status != runstate.StatusSuccess {
			c.Errorf("the run that finished during recovery to stay success", "%s is %s", id, got.Status)
		}
		for _, e := range c.events(id) {
			if e.Actor.Kind == runstate.ActorRecovery {
				c.Errorf("no recovery event on a run that finished meanwhile", "%s", jsonOf(e))
			}
		}
	}
	if rep.Interrupted != 0 || rep.Skipped != 2 {
		c.Errorf("both runs reported skipped", "%s", jsonOf(rep))
	}
}

func checkRecoverTakeover(c *checkState) {
	expired := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{Priority: 1})
	dead, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: expired.RunID, Owner: owner("dead"), TTL: c.ttl(), Statuses: []string{"running"}})
	if err != nil {
		c.Fatalf("claim to succeed", "%s", describeErr(err))
	}
	c.expire()
	earlier := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{})
	previous := runstate.Owner{Worker: recoverer.Worker, Incarnation: "boot-1"}
	left, err := c.leases().ClaimRun(c.ctx, runstate.ClaimRunParams{RunID: earlier.RunID, Owner: previous, TTL: time.Minute, Statuses: []string{"running"}})
	if err != nil {
		c.Fatalf("claim to succeed", "%s", describeErr(err))
	}
	before := []runState{c.state(expired.RunID), c.state(earlier.RunID)}
	rep := c.recover(c.store, runstate.RecoverTakeover, recoverer)
	for _, b := range before {
		c.expectUnchanged(b, "after takeover recovery")
	}
	if rep.Requeued != 1 || rep.Interrupted != 0 || len(rep.Runs) != 1 || rep.Runs[0].RunID != earlier.RunID {
		c.Errorf("only the run the previous incarnation held reported, re-queued for takeover", "%s", jsonOf(rep))
	}
	_, err = c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: c.ttl()})
	c.expectErr(err, runstate.ErrNotFound, "claim-next with default statuses after takeover recovery")
	for _, want := range []struct {
		id    string
		token int64
	}{{expired.RunID, dead.Lease.Token}, {earlier.RunID, left.Lease.Token}} {
		cl, err := c.leases().ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: owner("w1"), TTL: outlast, Filter: runstate.RunnableFilter{Statuses: []string{"running"}}})
		if err != nil || cl.Run.RunID != want.id || cl.Lease.Token <= want.token {
			c.Errorf("a worker naming running to take "+want.id+" over with a larger token", "%s %s", jsonOf(cl.Lease), describeErr(err))
		}
	}
}

func checkRecoverReport(c *checkState) {
	running := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{}).RunID
	queued := c.newRun().RunID
	c.runIn(runstate.StatusSuccess, runstate.CreateRunParams{})
	logs := &logRecorder{}
	var finished []runstate.RecoveryReport
	rep, err := c.recoverWith(c.store, runstate.RecoveryOptions{Owner: recoverer, Logger: slog.New(logs),
		OnFinish: func(r runstate.RecoveryReport) { finished = append(finished, r) }})
	if err != nil {
		c.Fatalf("recovery to succeed", "%s", describeErr(err))
	}
	byID := map[string]runstate.RecoveredRun{}
	for _, r := range rep.Runs {
		byID[r.RunID] = r
	}
	if r := byID[running]; r.To != runstate.StatusInterrupted || r.Outcome != runstate.OutcomeInterrupted || r.From != runstate.StatusRunning {
		c.Errorf("the running run reported running -> interrupted", "%s", jsonOf(r))
	}
	if r, ok := byID[queued]; ok {
		c.Errorf("the unheld queued run, which recovery does not change, not reported", "%s", jsonOf(r))
	}
	if len(rep.Runs) != 1 || rep.Interrupted != 1 || rep.Requeued != 0 || rep.Failed != 0 || rep.Duration < 0 {
		c.Errorf("a report of 1 run: 1 interrupted", "%s", jsonOf(rep))
	}
	if len(finished) != 1 || jsonOf(finished[0]) != jsonOf(rep) {
		c.Errorf("OnFinish called once with the report", "%d calls", len(finished))
	}
	lines := logs.lines()
	perRun := map[string]bool{}
	summary := false
	for _, l := range lines {
		if id, ok := l["run_id"]; ok {
			perRun[fmt.Sprint(id)] = true
		}
		if _, ok := l["interrupted"]; ok {
			summary = fmt.Sprint(l["interrupted"]) == "1" && fmt.Sprint(l["requeued"]) == "0" && l["duration"] != nil
		}
	}
	if !perRun[running] || perRun[queued] || !summary {
		c.Errorf("a log line for the interrupted run, none for the unchanged queued run, and a summary with counts and duration", "%v", lines)
	}
	if c.target.Capabilities.Leases {
		// A run left alone (held by a live worker) is logged at debug level only.
		held := c.runIn(runstate.StatusRunning, runstate.CreateRunParams{}).RunID
		c.hold(held, owner("alive"))
		logs := &logRecorder{}
		if _, err := c.recoverWith(c.store, runstate.RecoveryOptions{Owner: recoverer, Logger: slog.New(logs)}); err != nil {
			c.Fatalf("recovery to succeed", "%s", describeErr(err))
		}
		for _, l := range logs.lines() {
			if fmt.Sprint(l["run_id"]) == held && l["level"] != slog.LevelDebug {
				c.Errorf("the run recovery left alone logged at debug level only", "%v", l)
			}
		}
	}
	// A recovery that fails says so at error level, and still reports.
	failing := listFails{c.store}
	logs = &logRecorder{}
	finished = nil
	_, err = c.recoverWith(failing.store(), runstate.RecoveryOptions{Owner: recoverer, Logger: slog.New(logs),
		OnFinish: func(r runstate.RecoveryReport) { finished = append(finished, r) }})
	stopped := false
	for _, l := range logs.lines() {
		stopped = stopped || (l["level"] == slog.LevelError && l["error"] != nil)
	}
	if err == nil || len(finished) != 1 || !stopped {
		c.Errorf("a recovery whose listing fails to return the error, log it at error level and hand its report to OnFinish",
			"%s, %d reports, log %v", describeErr(err), len(finished), logs.lines())
	}
}

// listFails is a store whose ListRuns fails, keeping its features.
type listFails struct{ runstate.RunStateStore }

func (s listFails) ListRuns(context.Context, runstate.ListRunsParams) (runstate.RunPage, error) {
	return runstate.RunPage{}, runstate.Unavailable("listing failed on purpose", nil)
}

func (s listFails) store() runstate.RunStateStore { return s }

// logRecorder is a slog.Handler that keeps every record's attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]any
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{"msg": r.Message, "level": r.Level}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, m)
	return nil
}

func (l *logRecorder) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs
}
