package spec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// RecoveryPolicy says what recovery does with an orphaned running run.
type RecoveryPolicy string

// Recovery policies.
const (
	// RecoverInterrupt moves orphaned running runs to interrupted with reason
	// CRASH_RECOVERY (seed 000). The default; it suits a single process.
	RecoverInterrupt RecoveryPolicy = "interrupt"
	// RecoverFail moves them to failed with a retryable CRASH_RECOVERY diagnostic (seed 003).
	RecoverFail RecoveryPolicy = "fail"
	// RecoverTakeover leaves them running and releases them, so a worker that
	// claims running runs continues them under a new lease (seed 004). It
	// suits shared stores whose steps are safe to resume.
	RecoverTakeover RecoveryPolicy = "takeover"
)

// ReasonCrashRecovery is the interrupted_reason, diagnostic error_code and
// audit error_code of runs that recovery settles.
const ReasonCrashRecovery = "CRASH_RECOVERY"

// DefaultRecoveryLeaseTTL is how long recovery holds a run while settling it.
const DefaultRecoveryLeaseTTL = 30 * time.Second

// RecoveryOptions configures Recover.
type RecoveryOptions struct {
	// Policy defaults to RecoverInterrupt.
	Policy RecoveryPolicy
	// Owner is the recovering worker. Required when the store is a
	// LeaseStore: recovery claims each run before settling it, so runs held
	// by other live workers are left alone, while runs held by an earlier
	// incarnation of Owner.Worker are taken over. It must be unique to this process.
	Owner Owner
	// LeaseTTL defaults to DefaultRecoveryLeaseTTL.
	LeaseTTL time.Duration
	// Logger receives one line per run and a summary; defaults to slog.Default().
	Logger *slog.Logger
	// OnFinish, when set, receives the report (for metrics: count and duration),
	// also when recovery stops on an error.
	OnFinish func(RecoveryReport)
	// Clock measures the duration; defaults to the system clock.
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
	// OutcomeRequeued: the run is claimable again with its status and priority.
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
	Duration    time.Duration  `json:"duration"`
}

// Recovered is the number of runs whose state recovery changed or released.
func (r RecoveryReport) Recovered() int { return r.Interrupted + r.Failed + r.Requeued }

// maxRecoveryAttempts bounds re-reads of one run that keeps changing under recovery.
const maxRecoveryAttempts = 5

// Recover settles the runs a crashed process left behind, using only the
// store's interfaces. It considers every non-terminal run without a live
// lease (runs a live worker holds are skipped):
//   - running runs become interrupted (or failed, or are released for
//     takeover, by policy); their running steps and hosts follow;
//   - queued and waiting runs are left claimable, status and priority unchanged.
//
// Every write is a compare-and-set, fenced by recovery's own lease when the
// store has leases, so a run that finishes meanwhile is never overwritten,
// a second pass changes nothing, and two processes recovering at once settle
// each run exactly once.
func Recover(ctx context.Context, store RunStateStore, opts RecoveryOptions) (RecoveryReport, error) {
	r, err := newRecoverer(store, opts)
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
	if opts.OnFinish != nil {
		opts.OnFinish(report)
	}
	return report, err
}

type recoverer struct {
	store  RunStateStore
	leases LeaseStore
	opts   RecoveryOptions
	log    *slog.Logger
	clock  Clock
}

func newRecoverer(store RunStateStore, opts RecoveryOptions) (*recoverer, error) {
	switch opts.Policy {
	case "":
		opts.Policy = RecoverInterrupt
	case RecoverInterrupt, RecoverFail, RecoverTakeover:
	default:
		return nil, InvalidArgument("policy", "unknown recovery policy %q (want interrupt, fail or takeover)", opts.Policy)
	}
	r := &recoverer{store: store, opts: opts, log: opts.Logger, clock: opts.Clock}
	if ls, ok := store.(LeaseStore); ok {
		r.leases = ls
		if err := ValidateOwner(opts.Owner); err != nil {
			return nil, err
		}
	}
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
		r.clock = SystemClock{}
	}
	if r.opts.Actor.Kind == "" {
		r.opts.Actor = Actor{Kind: ActorRecovery, ID: opts.Owner.String()}
	}
	return r, nil
}

func (r *recoverer) run(ctx context.Context, report *RecoveryReport) error {
	statuses := make([]string, 0, 3)
	for _, s := range NonTerminalRunStatuses() {
		statuses = append(statuses, string(s))
	}
	cursor := ""
	for {
		// Keyset paging by (created_at, run_id) is unaffected by the status
		// changes recovery itself makes, so no run is skipped or seen twice.
		page, err := r.store.ListRuns(ctx, ListRunsParams{Statuses: statuses, Limit: MaxPageLimit, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("list non-terminal runs: %w", err)
		}
		for _, run := range page.Runs {
			rec, err := r.settle(ctx, run)
			if err != nil {
				return fmt.Errorf("recover run %s: %w", run.RunID, err)
			}
			report.add(rec)
			r.log.Info("recovered run", "run_id", rec.RunID, "from", rec.From, "to", rec.To,
				"outcome", rec.Outcome, "priority", rec.Priority, "detail", rec.Detail)
		}
		if page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
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

// settle recovers one run listed as non-terminal.
func (r *recoverer) settle(ctx context.Context, listed RunSnapshot) (RecoveredRun, error) {
	skip := func(run RunSnapshot, why string) RecoveredRun {
		return RecoveredRun{RunID: run.RunID, From: listed.Status, To: run.Status, Priority: run.Priority, Outcome: OutcomeSkipped, Detail: why}
	}
	cur := listed
	var token int64
	if r.leases != nil {
		claim, err := r.leases.ClaimRun(ctx, ClaimRunParams{RunID: listed.RunID, Owner: r.opts.Owner,
			TTL: r.opts.LeaseTTL, Statuses: []string{string(StatusQueued), string(StatusRunning), string(StatusWaiting)}})
		switch {
		case errors.Is(err, ErrLeaseHeld):
			return skip(listed, "held by a live lease of another worker"), nil
		case errors.Is(err, ErrNotClaimable), errors.Is(err, ErrNotFound):
			return skip(listed, "finished or removed meanwhile"), nil
		case err != nil:
			return RecoveredRun{}, err
		}
		cur, token = claim.Run, claim.Lease.Token
		defer func() {
			// Releasing makes a re-queued run claimable at once; after a
			// terminal write it only ends recovery's ownership.
			if err := r.leases.ReleaseLease(ctx, ReleaseLeaseParams{RunID: cur.RunID, Token: token}); err != nil {
				r.log.Warn("recovery could not release its lease", "run_id", cur.RunID, "error", err)
			}
		}()
	}
	for attempt := 0; ; attempt++ {
		if cur.Status.Terminal() {
			return skip(cur, "finished meanwhile"), nil
		}
		if cur.Status != StatusRunning || r.opts.Policy == RecoverTakeover {
			return RecoveredRun{RunID: cur.RunID, From: cur.Status, To: cur.Status, Priority: cur.Priority, Outcome: OutcomeRequeued}, nil
		}
		updated, err := r.store.UpdateRun(ctx, r.settlePatch(cur, token))
		if err == nil {
			outcome := OutcomeInterrupted
			if updated.Status == StatusFailed {
				outcome = OutcomeFailed
			}
			return RecoveredRun{RunID: cur.RunID, From: cur.Status, To: updated.Status, Priority: updated.Priority, Outcome: outcome}, nil
		}
		if !errors.Is(err, ErrVersionConflict) || attempt+1 >= maxRecoveryAttempts {
			return RecoveredRun{}, err
		}
		// Someone wrote the run since we read it (an unfenced operator write):
		// read it again and decide afresh.
		if cur, err = r.store.GetRun(ctx, cur.RunID); err != nil {
			return RecoveredRun{}, err
		}
	}
}

func (r *recoverer) settlePatch(cur RunSnapshot, token int64) UpdateRunParams {
	to, stepTo := StatusInterrupted, StepInterrupted
	if r.opts.Policy == RecoverFail {
		to, stepTo = StatusFailed, StepFailed
	}
	p := UpdateRunParams{RunID: cur.RunID, ExpectedVersion: cur.Version, LeaseToken: token, Status: string(to),
		Actor: r.opts.Actor, Reason: ReasonCrashRecovery + ": the run was running when its worker stopped"}
	if to == StatusInterrupted {
		p.InterruptedReason = ReasonCrashRecovery
	} else {
		p.Diagnostic = &Diagnostic{ErrorCode: ReasonCrashRecovery, Retryable: true,
			Message: "the run was running when its worker stopped; crash recovery marked it failed"}
	}
	for _, st := range cur.Steps {
		sp := StepPatch{Name: st.Name}
		if st.Status == StepRunning {
			sp.Status = string(stepTo)
		}
		for _, h := range st.Hosts {
			if h.Status == StepRunning {
				sp.Hosts = append(sp.Hosts, HostPatch{Host: h.Host, Status: string(stepTo)})
			}
		}
		if sp.Status != "" || len(sp.Hosts) > 0 {
			p.Steps = append(p.Steps, sp)
		}
	}
	return p
}
