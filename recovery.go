package runstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// RecoveryPolicy says what recovery does with an orphaned running run.
type RecoveryPolicy string

// Recovery policies.
const (
	// RecoverInterrupt moves orphaned running runs to interrupted with reason
	// CRASH_RECOVERY (docs/requirements.md#000-5, REC-001). The default; it suits a single process.
	RecoverInterrupt RecoveryPolicy = "interrupt"
	// RecoverFail moves them to failed with a retryable CRASH_RECOVERY diagnostic (docs/requirements.md#003-2, REC-002).
	RecoverFail RecoveryPolicy = "fail"
	// RecoverTakeover leaves them running and releases them, so a worker that
	// claims running runs continues them under a new lease (docs/requirements.md#004-2). It
	// suits shared stores whose steps are safe to resume (REC-011).
	RecoverTakeover RecoveryPolicy = "takeover"
)

const (
	// ReasonCrashRecovery is the interrupted_reason, diagnostic error_code
	// and audit error_code of runs that recovery settles.
	ReasonCrashRecovery = "CRASH_RECOVERY"
	// DefaultRecoveryLeaseTTL is how long recovery holds a run while settling it.
	DefaultRecoveryLeaseTTL = 30 * time.Second
)

// RecoveryOptions configures Recover.
type RecoveryOptions struct {
	// Policy defaults to RecoverInterrupt.
	Policy RecoveryPolicy
	// Owner is the recovering worker; Recover requires it. Recovery claims
	// each run before settling it, so runs held by other live workers are
	// left alone, while runs held by an earlier incarnation of Owner.Worker
	// are taken over. It must be unique to this process.
	Owner Owner
	// LeaseTTL defaults to DefaultRecoveryLeaseTTL.
	LeaseTTL time.Duration
	// Logger receives one line per run and a summary; defaults to slog.Default().
	Logger *slog.Logger
	// OnFinish, when set, receives the report (for metrics: count and duration),
	// also when recovery stops on an error.
	OnFinish func(RecoveryReport)
	// Clock measures the duration; defaults to the wall clock.
	Clock Clock
	// Actor recorded in audit events; defaults to {recovery, Owner}.
	Actor Actor
}

// RecoveryOutcome is what recovery did with one run.
type RecoveryOutcome string

// Recovery outcomes.
const (
	OutcomeInterrupted RecoveryOutcome = "interrupted"
	OutcomeFailed      RecoveryOutcome = "failed"
	// OutcomeRequeued: recovery released a lease left on the run (or, under
	// takeover, on an orphaned running run): it is claimable again with its
	// status and priority.
	OutcomeRequeued RecoveryOutcome = "requeued"
	// OutcomeSkipped: a live worker holds the run, or it finished meanwhile; untouched.
	OutcomeSkipped RecoveryOutcome = "skipped"
)

// RecoveredRun reports one run recovery considered.
type RecoveredRun struct {
	RunID    string          `json:"run_id"`
	From     RunStatus       `json:"from"`
	To       RunStatus       `json:"to"`
	Priority int             `json:"priority"`
	Outcome  RecoveryOutcome `json:"outcome"`
	Detail   string          `json:"detail,omitempty"`
}

// RecoveryReport summarises a recovery pass.
type RecoveryReport struct {
	Policy      RecoveryPolicy `json:"policy"`
	Runs        []RecoveredRun `json:"runs"`
	Interrupted int            `json:"interrupted"`
	Failed      int            `json:"failed"`
	Requeued    int            `json:"requeued"`
	Skipped     int            `json:"skipped"`
	Duration    time.Duration  `json:"-"` // duration_seconds in JSON
}

// MarshalJSON writes the duration in seconds, as every duration runstate
// prints, and an empty list of runs as [].
func (r RecoveryReport) MarshalJSON() ([]byte, error) {
	type fields RecoveryReport
	if r.Runs == nil {
		r.Runs = []RecoveredRun{}
	}
	return json.Marshal(struct {
		fields
		DurationSeconds float64 `json:"duration_seconds"`
	}{fields(r), r.Duration.Seconds()})
}

// Recovered is the number of runs whose state recovery changed or released.
func (r RecoveryReport) Recovered() int { return r.Interrupted + r.Failed + r.Requeued }

// maxSettleWrites bounds the writes recovery tries on one run that keeps
// changing under it; after each conflict it reads the run again.
const maxSettleWrites = 5

// recoveryBatch is how many runs recovery holds at once and settles in one
// UpdateRuns call: one write for many runs on a store with batches, and
// few enough that the leases taken first are far from expiring when the
// write lands.
const recoveryBatch = 100

// Recover settles the runs that crashed processes left behind in a store
// that any number of processes share, using only the store's interfaces.
// The store's leases are what make that safe, so it takes a Store: every
// run recovery writes to, it claims first, and a run that a live worker
// holds is left alone (REC-005) while one held by an earlier incarnation of
// opts.Owner is taken over (REC-006). For a store without leases, see
// RecoverExclusive.
//
// Recovery considers the non-terminal runs:
//   - running runs become interrupted (or failed, or are released for
//     takeover, by policy); their running steps and hosts follow;
//   - queued and waiting runs stay as they are; a lease an earlier
//     incarnation of opts.Owner left on one is released, so the run is
//     claimable at once (reported re-queued). A run nobody holds is
//     claimable already: recovery writes nothing to it and does not report it.
//
// Every write is a compare-and-set fenced by recovery's own lease, so a run
// that finishes meanwhile is never overwritten (REC-010), a second pass
// changes nothing (REC-007), and two processes recovering at once settle
// each run exactly once (REC-009).
func Recover(ctx context.Context, store Store, opts RecoveryOptions) (RecoveryReport, error) {
	if store == nil {
		return RecoveryReport{}, InvalidArgument("store", "recovery needs a store")
	}
	// The store checks the owner in full when recovery claims a run.
	if strings.TrimSpace(opts.Owner.Worker) == "" {
		return RecoveryReport{}, InvalidArgument("owner.worker", "recovery needs an owner: the worker that recovers, unique to this process")
	}
	return recoverRuns(ctx, store, store, opts)
}

// RecoverExclusive settles the runs of a store without leases. Without
// leases nothing tells a run that a live process executes from one a
// crashed process left behind, so the caller asserts, by calling this,
// that no other process uses the store. It refuses a store that has leases,
// where Recover is the safe choice. It asks the store's Features, so a
// wrapper that hides the lease methods (the mistake that once made
// recovery interrupt runs live workers held) cannot hide the leases.
func RecoverExclusive(ctx context.Context, store RunStateStore, opts RecoveryOptions) (RecoveryReport, error) {
	if store == nil {
		return RecoveryReport{}, InvalidArgument("store", "recovery needs a store")
	}
	if store.Features().Leases != nil {
		return RecoveryReport{}, InvalidArgument("store",
			"the store has leases: recover it with Recover, which leaves alone the runs live workers hold")
	}
	return recoverRuns(ctx, store, nil, opts)
}

func recoverRuns(ctx context.Context, runs RunStateStore, leases LeaseStore, opts RecoveryOptions) (RecoveryReport, error) {
	r, err := newRecoverer(runs, leases, opts)
	if err != nil {
		return RecoveryReport{}, err
	}
	start := r.clock.Now()
	report := RecoveryReport{Policy: r.opts.Policy}
	err = r.run(ctx, &report)
	report.Duration = r.clock.Now().Sub(start)
	attrs := []any{"policy", report.Policy, "interrupted", report.Interrupted, "failed", report.Failed,
		"requeued", report.Requeued, "skipped", report.Skipped, "duration", report.Duration}
	if err != nil {
		r.log.Error("crash recovery stopped", append(attrs, "error", err)...)
	} else {
		r.log.Info("crash recovery finished", attrs...)
	}
	// After the summary line, the report goes to the metrics hook (REC-012).
	if opts.OnFinish != nil {
		opts.OnFinish(report)
	}
	return report, err
}

type recoverer struct {
	runs   RunStateStore
	leases LeaseStore // nil: the caller asserted exclusive use
	opts   RecoveryOptions
	log    *slog.Logger
	clock  Clock
}

func newRecoverer(runs RunStateStore, leases LeaseStore, opts RecoveryOptions) (*recoverer, error) {
	switch opts.Policy {
	case "":
		opts.Policy = RecoverInterrupt
	case RecoverInterrupt, RecoverFail, RecoverTakeover:
	default:
		return nil, InvalidArgument("policy", "unknown recovery policy %q (want interrupt, fail or takeover)", opts.Policy)
	}
	r := &recoverer{runs: runs, leases: leases, opts: opts, log: opts.Logger, clock: opts.Clock}
	if r.opts.LeaseTTL == 0 {
		r.opts.LeaseTTL = DefaultRecoveryLeaseTTL
	}
	if err := ValidateTTL(r.opts.LeaseTTL); err != nil {
		return nil, err
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.clock == nil {
		r.clock = wallClock{}
	}
	if r.opts.Actor.Kind == "" { // actor recovery (REC-001)
		r.opts.Actor = Actor{Kind: ActorRecovery}
		if opts.Owner.Worker != "" {
			r.opts.Actor.ID = opts.Owner.String()
		}
	}
	return r, nil
}

func statusNames(list []RunStatus) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = string(s)
	}
	return out
}

func (r *recoverer) run(ctx context.Context, report *RecoveryReport) error {
	// Terminal runs are never listed, so never touched (REC-008).
	// First every non-terminal run, then which of them nobody holds: a run
	// claimed in between is then seen held, never mistaken for free. Only
	// what the decision needs is kept of each run: recovery's memory follows
	// the number of non-terminal runs, not their size.
	var candidates []listedRun
	for cursor := ""; ; {
		// Keyset paging by (created_at, run_id) is unaffected by status
		// changes meanwhile, so no run is skipped or seen twice.
		page, err := r.runs.ListRuns(ctx, ListRunsParams{Statuses: statusNames(nonTerminalRunStatuses()), Limit: MaxPageLimit, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("list non-terminal runs: %w", err)
		}
		for _, run := range page.Runs {
			candidates = append(candidates, listedRun{RunID: run.RunID, Status: run.Status, Priority: run.Priority})
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	free, err := r.unheld(ctx)
	if err != nil {
		return err
	}
	var todo []listedRun
	for _, run := range candidates {
		orphanedRunning := run.Status == StatusRunning && r.opts.Policy != RecoverTakeover
		if orphanedRunning || (r.leases != nil && !free[run.RunID]) {
			todo = append(todo, run)
		} // else claimable already: nothing to do (REC-004, REC-011)
	}
	for len(todo) > 0 {
		took, settled, err := r.settleBatch(ctx, todo[:min(len(todo), recoveryBatch)])
		todo = todo[took:]
		for _, rec := range settled {
			report.add(rec)
			// One line per run; runs left alone only at debug level (REC-012).
			attrs := []any{"run_id", rec.RunID, "from", rec.From, "to", rec.To, "outcome", rec.Outcome, "priority", rec.Priority}
			if rec.Outcome == OutcomeSkipped {
				r.log.Debug("recovery left a run alone", append(attrs, "detail", rec.Detail)...)
			} else {
				r.log.Info("recovered run", attrs...)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unheld returns the non-terminal runs without a live lease (none without leases).
func (r *recoverer) unheld(ctx context.Context) (map[string]bool, error) {
	free := map[string]bool{}
	if r.leases == nil {
		return free, nil
	}
	for cursor := ""; ; {
		page, err := r.leases.ListRunnableRuns(ctx, ListRunnableParams{
			Filter: RunnableFilter{Statuses: statusNames(nonTerminalRunStatuses())}, Limit: MaxPageLimit, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("list runs without a live lease: %w", err)
		}
		for _, run := range page.Runs {
			free[run.RunID] = true
		}
		if cursor = page.NextCursor; cursor == "" {
			return free, nil
		}
	}
}

// listedRun is what recovery keeps of a run it listed.
type listedRun struct {
	RunID    string
	Status   RunStatus
	Priority int
}

func (rep *RecoveryReport) add(rec RecoveredRun) {
	rep.Runs = append(rep.Runs, rec)
	switch rec.Outcome {
	case OutcomeInterrupted:
		rep.Interrupted++
	case OutcomeFailed:
		rep.Failed++
	case OutcomeRequeued:
		rep.Requeued++
	case OutcomeSkipped:
		rep.Skipped++
	}
}

// holdAtOnce is how many runs recovery claims at once.
const holdAtOnce = 50

// pendingRun is one run of a batch on its way to its outcome.
type pendingRun struct {
	listed listedRun
	cur    RunSnapshot
	token  int64 // recovery's lease on the run; 0 when it holds none
	done   bool
	rec    RecoveredRun // the outcome, once done without err
	err    error
}

func (p *pendingRun) finish(rec RecoveredRun) { p.rec, p.done = rec, true }
func (p *pendingRun) fail(err error)          { p.err, p.done = err, true }

func (p *pendingRun) skip(run RunSnapshot, why string) {
	p.finish(RecoveredRun{RunID: run.RunID, From: p.listed.Status, To: run.Status, Priority: run.Priority, Outcome: OutcomeSkipped, Detail: why})
}

// settleBatch recovers a batch of runs listed as non-terminal: it holds each
// run (claims it, or reads it without leases), settles the orphaned running
// ones in one UpdateRuns call, and releases what it claimed. Each run's
// outcome is decided as if it were alone. It returns the outcomes in listing
// order and the first run's error: a run that cannot be held stops recovery
// there, as it did one run at a time, while the runs held before it are
// still settled; a failed write does not undo the writes that landed beside
// it, so those are reported too.
//
// It holds runs holdAtOnce at a time (a store that groups concurrent
// writes claims them in a few writes), for a quarter of its lease at
// most, so that a slow store cannot let the first leases expire before the
// write, and answers how many of listed it took on.
func (r *recoverer) settleBatch(ctx context.Context, listed []listedRun) (int, []RecoveredRun, error) {
	runs := make([]pendingRun, 0, len(listed))
	defer func() { r.release(ctx, runs) }()
	began := time.Now() // the monotonic clock the leases run by, not opts.Clock
	for len(runs) < len(listed) {
		if len(runs) > 0 && time.Since(began) > r.opts.LeaseTTL/4 {
			break
		}
		group := make([]pendingRun, min(holdAtOnce, len(listed)-len(runs)))
		var wg sync.WaitGroup
		for i := range group {
			group[i].listed = listed[len(runs)+i]
			wg.Go(func() {
				if err := r.hold(ctx, &group[i]); err != nil {
					group[i].fail(err)
				}
			})
		}
		wg.Wait()
		// The first run that could not be held stops recovery there; runs
		// after it are released unsettled.
		failed := slices.IndexFunc(group, func(p pendingRun) bool { return p.err != nil })
		if failed < 0 {
			runs = append(runs, group...)
			continue
		}
		runs = append(runs, group[:failed+1]...)
		r.release(ctx, group[failed+1:])
		break
	}
	r.settleHeld(ctx, runs)
	var out []RecoveredRun
	var first error
	for _, p := range runs {
		switch {
		case p.err != nil && first == nil:
			first = fmt.Errorf("recover run %s: %w", p.listed.RunID, p.err)
		case p.err == nil:
			out = append(out, p.rec)
		}
	}
	return len(runs), out, first
}

// hold gets a run ready to settle: with leases it claims the run, so that
// runs held by other live workers are left alone; without, it reads it.
// A run left alone is done; an error is one recovery cannot go on after.
func (r *recoverer) hold(ctx context.Context, p *pendingRun) error {
	asListed := RunSnapshot{RunID: p.listed.RunID, Status: p.listed.Status, Priority: p.listed.Priority}
	if r.leases == nil {
		cur, err := r.runs.GetRun(ctx, p.listed.RunID)
		if errors.Is(err, ErrNotFound) {
			p.skip(asListed, "removed meanwhile")
			return nil
		}
		p.cur = cur
		return err
	}
	claim, err := r.leases.ClaimRun(ctx, ClaimRunParams{RunID: p.listed.RunID, Owner: r.opts.Owner,
		TTL: r.opts.LeaseTTL, Statuses: statusNames(nonTerminalRunStatuses())})
	switch {
	case errors.Is(err, ErrLeaseHeld): // another worker's live lease (REC-005)
		p.skip(asListed, "held by a live lease of another worker")
		return nil
	case errors.Is(err, ErrNotClaimable), errors.Is(err, ErrNotFound):
		p.skip(asListed, "finished or removed meanwhile")
		return nil
	case err != nil:
		return err
	}
	// The claim took over any lease of an earlier incarnation of
	// opts.Owner without waiting (REC-006).
	p.cur, p.token = claim.Run, claim.Lease.Token
	return nil
}

// settleHeld decides each held run and writes the settlements of a round in
// one UpdateRuns call. A run that someone wrote since recovery read it (an
// unfenced operator write) is read again and decided afresh in the next
// round, up to maxSettleWrites writes per run.
func (r *recoverer) settleHeld(ctx context.Context, runs []pendingRun) {
	for tried := 0; ; tried++ {
		var updates []UpdateRunParams
		var at []int // the run of each update
		for i := range runs {
			if p := &runs[i]; !p.done && r.decide(p) {
				updates = append(updates, r.settlePatch(p.cur, p.token))
				at = append(at, i)
			}
		}
		if len(updates) == 0 {
			return
		}
		res, err := UpdateRuns(ctx, r.runs, UpdateRunsParams{Updates: updates})
		if err == nil && len(res.Items) != len(updates) {
			err = fmt.Errorf("the store answered %d items for %d updates", len(res.Items), len(updates))
		}
		for k, i := range at {
			p := &runs[i]
			switch {
			case err != nil: // nothing was written
				p.fail(err)
			case res.Items[k].Err == nil:
				p.token = 0 // the settling write released it
				updated := res.Items[k].Run
				outcome := OutcomeInterrupted
				if updated.Status == StatusFailed {
					outcome = OutcomeFailed
				}
				p.finish(RecoveredRun{RunID: p.cur.RunID, From: p.cur.Status, To: updated.Status, Priority: updated.Priority, Outcome: outcome})
			case !errors.Is(res.Items[k].Err, ErrVersionConflict) || tried+1 >= maxSettleWrites:
				p.fail(res.Items[k].Err)
			default:
				cur, readErr := r.runs.GetRun(ctx, p.cur.RunID)
				if readErr != nil {
					p.fail(readErr)
				}
				p.cur = cur
			}
		}
	}
}

// decide settles a held run that needs no write, and reports whether it needs one.
func (r *recoverer) decide(p *pendingRun) bool {
	if p.cur.Status.Terminal() { // REC-008, REC-010
		p.skip(p.cur, "finished meanwhile")
		return false
	}
	// Left unchanged (with leases, the release frees it) and reported
	// re-queued (REC-004, REC-011).
	if p.cur.Status != StatusRunning || r.opts.Policy == RecoverTakeover {
		p.finish(RecoveredRun{RunID: p.cur.RunID, From: p.cur.Status, To: p.cur.Status, Priority: p.cur.Priority, Outcome: OutcomeRequeued})
		return false
	}
	return true
}

// release ends recovery's leases, holdAtOnce at a time: a re-queued run is
// claimable at once; a settled run's write released its lease already.
func (r *recoverer) release(ctx context.Context, runs []pendingRun) {
	limit := make(chan struct{}, holdAtOnce)
	var wg sync.WaitGroup
	for _, p := range runs {
		if p.token == 0 {
			continue
		}
		limit <- struct{}{}
		wg.Go(func() {
			defer func() { <-limit }()
			if err := r.leases.ReleaseLease(ctx, ReleaseLeaseParams{RunID: p.cur.RunID, Token: p.token}); err != nil {
				r.log.Warn("recovery could not release its lease", "run_id", p.cur.RunID, "error", err)
			}
		})
	}
	wg.Wait()
}

// settlePatch moves an orphaned running run, with its running steps and
// hosts, to interrupted or failed by CRASH_RECOVERY (REC-001, REC-002, REC-003).
func (r *recoverer) settlePatch(cur RunSnapshot, token int64) UpdateRunParams {
	to, stepTo := StatusInterrupted, StepInterrupted
	if r.opts.Policy == RecoverFail {
		to, stepTo = StatusFailed, StepFailed
	}
	p := UpdateRunParams{RunID: cur.RunID, ExpectedVersion: cur.Version, LeaseToken: token, Status: string(to),
		Actor: r.opts.Actor, Reason: ReasonCrashRecovery + ": the run was running when its worker stopped",
		Steps: StepsFollowingRun(cur, stepTo), ReleaseLease: token != 0}
	if to == StatusInterrupted {
		p.InterruptedReason = ReasonCrashRecovery
	} else {
		p.Diagnostic = &Diagnostic{ErrorCode: ReasonCrashRecovery, Retryable: true,
			Message: "the run was running when its worker stopped; crash recovery marked it failed"}
	}
	return p
}

// StepsFollowingRun returns the step patches that move run's running steps
// and hosts to to, for a write that ends the run: when a run is
// interrupted, fails or is canceled, the steps and hosts it was executing
// end with it, and the others keep their state (REC-003).
func StepsFollowingRun(run RunSnapshot, to StepStatus) []StepPatch {
	var out []StepPatch
	for _, st := range run.Steps {
		sp := StepPatch{Name: st.Name}
		if st.Status == StepRunning {
			sp.Status = string(to)
		}
		for _, h := range st.Hosts {
			if h.Status == StepRunning {
				sp.Hosts = append(sp.Hosts, HostPatch{Host: h.Host, Status: string(to)})
			}
		}
		if sp.Status != "" || len(sp.Hosts) > 0 {
			out = append(out, sp)
		}
	}
	return out
}

// wallClock is the time recovery measures by when RecoveryOptions.Clock is nil.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
