// Package tracker bridges a workflow engine's events to a runstate store:
// it creates the run, writes run, step and host state as execution goes
// (compare-and-set patches, fenced by the run's lease when it has one, host
// output truncated to the contract's limit), keeps the lease, and fans every
// change out to notifiers. An engine that reports through a tracker never
// writes to a store itself.
package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/runstate/runstate"
)

// Event is one change, with the fields of the callback payload
// (docs/spec.md, seed coverage: callbacks).
type Event struct {
	RunID        string    `json:"run_id"`
	WorkflowName string    `json:"workflow_name"`
	Status       string    `json:"status"`
	Step         string    `json:"step,omitempty"`
	Host         string    `json:"host,omitempty"`
	Timestamp    time.Time `json:"timestamp"`
	Error        string    `json:"error,omitempty"`
	Version      int64     `json:"version"`
}

// Notifier receives events. Notify must return at once: delivery is the
// notifier's business and never holds up or changes a run.
type Notifier interface {
	Notify(Event)
}

// Options configure a Tracker.
type Options struct {
	Notifiers []Notifier
	// Actor is recorded in the audit trail (default: a worker).
	Actor  runstate.Actor
	Logger *slog.Logger
	// Leases is the store's lease side, required to attach a run with a
	// lease: the tracker renews the lease, and checks it wherever a write
	// would change nothing, so that no step of a leased run goes ahead
	// without a write or a check carrying its token.
	Leases runstate.LeaseStore
	// OnRenewal, when set, is told of every lease renewal that failed
	// (refused or not answered) or that the store accepted late, for
	// metrics; the tracker logs each of them too.
	OnRenewal func(Renewal)
	// TracerProvider makes the tracer of the run, step and host spans
	// (docs/tracing.md); nil means the global one, a no-op until a
	// program installs an SDK.
	TracerProvider trace.TracerProvider
}

// Tracker writes runs to a store and notifies.
type Tracker struct {
	store  runstate.RunStateStore
	opts   Options
	tracer trace.Tracer
}

// New returns a tracker over store.
func New(store runstate.RunStateStore, opts Options) *Tracker {
	if opts.Actor.Kind == "" {
		opts.Actor = runstate.Actor{Kind: runstate.ActorWorker}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
	}
	return &Tracker{store: store, opts: opts, tracer: opts.TracerProvider.Tracer(ScopeName)}
}

// ErrRunEnded: the run reached a terminal status by someone else's write
// (an operator's cancel, recovery); the engine must stop working on it.
var ErrRunEnded = errors.New("tracker: the run was ended elsewhere")

func (t *Tracker) notify(s runstate.RunSnapshot, step, host, errText string) {
	notifyAll(t.opts.Notifiers, s, step, host, errText)
}

func notifyAll(notifiers []Notifier, s runstate.RunSnapshot, step, host, errText string) {
	ev := Event{RunID: s.RunID, WorkflowName: s.WorkflowName, Status: string(s.Status), Step: step, Host: host,
		Timestamp: s.UpdatedAt, Error: errText, Version: s.Version}
	for _, n := range notifiers {
		n.Notify(ev)
	}
}

// Create makes a queued run and notifies.
func (t *Tracker) Create(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if p.Actor.Kind == "" {
		p.Actor = t.opts.Actor
	}
	s, err := t.store.CreateRun(ctx, p)
	if err == nil {
		t.notify(s, "", "", "")
	}
	return s, err
}

// Lease is the lease a run is executed under; the zero Lease means none
// (a store without leases, used by one process).
type Lease struct {
	Token int64
	// TTL is the lease duration each renewal asks for.
	TTL time.Duration
	// ExpiresAt is when the claim's lease expires, in the store's clock
	// (runstate.Lease.ExpiresAt): with it the first renewal too is judged
	// on time or late. Zero: unknown.
	ExpiresAt time.Time
}

// Renewal is a lease renewal that failed or came late (Options.OnRenewal).
type Renewal struct {
	RunID string
	// Err is why the renewal failed; nil: the store renewed the lease.
	Err error
	// Late is, for a renewal the store accepted, how long after the
	// lease's expiry it did (by the store's times: the lease had lapsed
	// and nobody had claimed the run meanwhile); 0 when on time. After
	// failed renewals it is at most that: one of them may have reached the
	// store, its answer lost, and moved the expiry it was judged by.
	Late time.Duration
	// Failures is how many renewals in a row failed, this one included.
	Failures int
	// SinceRenewed is how long ago, on this worker's clock, the last
	// renewal that succeeded was sent (the claim, before the first).
	SinceRenewed time.Duration
	// Left is how long the lease had left by this worker's reckoning when
	// the renewal ended: negative once it may have lapsed.
	Left time.Duration
}

// Attach returns the handle an engine drives a run through.
func (t *Tracker) Attach(run runstate.RunSnapshot, lease Lease) (*Run, error) {
	if lease.Token != 0 {
		if t.opts.Leases == nil {
			return nil, errors.New("tracker: a run attached with a lease needs Options.Leases")
		}
		if err := runstate.ValidateTTL(lease.TTL); err != nil {
			return nil, err
		}
	}
	return &Run{t: t, id: run.RunID, snap: run, lease: lease, changed: make(chan struct{}), spans: newSpans(t.tracer, run, lease),
		renewedAt: time.Now(), storeExpiry: lease.ExpiresAt}, nil
}

// AttachStarted is Attach for a run that its claim moved to running in the
// claim's own write (runstate.ClaimRuns with Start). That write was the
// run's begin, so the engine's Begin writes nothing more and tells the
// notifiers, as its own write would have; it checks no lease either, as
// the claim just proved it.
func (t *Tracker) AttachStarted(run runstate.RunSnapshot, lease Lease) (*Run, error) {
	r, err := t.Attach(run, lease)
	if err == nil {
		r.started = run.Status == runstate.StatusRunning
	}
	return r, err
}

// Run is one run being executed. Its methods are safe for concurrent use
// (hosts of a step report in parallel); writes are serialised.
type Run struct {
	t     *Tracker
	id    string // the run's ID, which never changes
	lease Lease
	spans *spans

	mu   sync.Mutex
	snap runstate.RunSnapshot
	// started: the claim began the run, and Begin has yet to announce it.
	started bool
	// released: the write that ended the run released its lease too; set
	// from before that write is sent, so that a renewal refused meanwhile
	// is not taken for another worker's takeover.
	released atomic.Bool

	leaseMu sync.Mutex
	// validUntil is when the lease ends at the earliest, on this process's
	// monotonic clock: the start of the last renewal that succeeded plus
	// the TTL. Zero until the first renewal.
	validUntil time.Time
	changed    chan struct{} // closed and replaced when validUntil moves
	// renewedAt is when the last renewal that succeeded was sent, on this
	// process's clock (attach time before the first); storeExpiry the
	// expiry the store gave it; failures the renewals failed since.
	renewedAt   time.Time
	storeExpiry time.Time
	failures    int
}

// Snapshot returns the run as last written or read.
func (r *Run) Snapshot() runstate.RunSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap.Clone()
}

// LeaseReleased reports whether the write that ended the run released its
// lease with it: nothing is left to release.
func (r *Run) LeaseReleased() bool { return r.released.Load() }

// Token is the lease token the run's writes carry (0: not leased).
func (r *Run) Token() int64 { return r.lease.Token }

// Lease is the lease the run is executed under (zero: none).
func (r *Run) Lease() Lease { return r.lease }

// patch prepares an update against the current snapshot; skip says there is
// nothing to write (the run is already where the caller wants it).
type patch func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) (skip bool)

// write applies a patch, re-reading once after a version conflict (an
// operator's write in between) and applying it again on the new version.
// When there is nothing to write, the lease is checked instead: whoever
// calls a tracker method is about to act on the run, and another worker may
// have written the very state this one wanted (after taking the run over).
func (r *Run) write(ctx context.Context, step, host, errText string, fn patch) error {
	ctx = r.spans.context(ctx, step, host, true)
	r.mu.Lock()
	defer r.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if r.snap.Status.Terminal() {
			return fmt.Errorf("%w: it is %s", ErrRunEnded, r.snap.Status)
		}
		p := runstate.UpdateRunParams{RunID: r.snap.RunID, ExpectedVersion: r.snap.Version, LeaseToken: r.lease.Token, Actor: r.t.opts.Actor}
		if fn(r.snap, &p) {
			return r.Confirm(ctx)
		}
		// The write that ends the run ends its lease too: one write, not
		// a second for the release (LEASE-022); so does one that parks it.
		p.ReleaseLease = p.LeaseToken != 0 && (p.ReleaseLease || runstate.RunStatus(p.Status).Terminal())
		if p.ReleaseLease {
			r.released.Store(true)
		}
		next, err := r.t.store.UpdateRun(ctx, p)
		if err != nil && !errors.Is(err, runstate.ErrUnavailable) {
			r.released.Store(false) // refused: the lease stands
		}
		if err == nil {
			r.snap = next
			r.t.notify(next, step, host, errText)
			if next.Status.Terminal() {
				r.spans.endAll(next.Status)
			}
			return nil
		}
		if !errors.Is(err, runstate.ErrVersionConflict) || attempt > 0 {
			return err
		}
		if r.snap, err = r.t.store.GetRun(ctx, r.snap.RunID); err != nil {
			return err
		}
	}
}

// Refresh re-reads the run from the store.
func (r *Run) Refresh(ctx context.Context) (runstate.RunSnapshot, error) {
	ctx = r.spans.context(ctx, "", "", false)
	s, err := r.t.store.GetRun(ctx, r.id)
	if err != nil {
		return s, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Version >= r.snap.Version {
		r.snap = s
	}
	return r.snap.Clone(), nil
}

// Confirm proves, with a renewal carrying the run's token, that the lease
// is still this worker's, and extends it. An engine calls it right before a
// side effect outside the store: a refused renewal (runstate.ErrLeaseLost)
// stops it before the side effect. A run without a lease has nothing to
// confirm.
// It does not wait for the run's writes: hosts confirm side by side.
func (r *Run) Confirm(ctx context.Context) error {
	if r.lease.Token == 0 {
		return nil
	}
	return r.renew(r.spans.context(ctx, "", "", false))
}

// renew extends the lease and records how long it is valid for certain.
// A renewal that takes longer than the lease proves nothing, so it is not
// waited for longer than that. A renewal that failed or came late is
// logged and reported (Options.OnRenewal), every one of them.
func (r *Run) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.lease.TTL)
	defer cancel()
	start := time.Now()
	lease, err := r.t.opts.Leases.RenewLease(ctx, runstate.RenewLeaseParams{RunID: r.id, Token: r.lease.Token, TTL: r.lease.TTL})
	if err != nil && (errors.Is(ctx.Err(), context.Canceled) || r.released.Load()) {
		// The run is over here: the caller gave up, or this worker's own
		// write ended the run and released its lease.
		return err
	}
	rep := r.recordRenewal(start, lease, err)
	if rep.Err != nil || rep.Late > 0 || rep.Failures > 0 {
		r.reportRenewal(rep)
	}
	return err
}

// recordRenewal records a renewal sent at start that returned lease or
// err, and returns what it says of the lease.
func (r *Run) recordRenewal(start time.Time, lease runstate.Lease, err error) Renewal {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	rep := Renewal{RunID: r.id, Err: err, SinceRenewed: time.Since(r.renewedAt)}
	if err != nil {
		r.failures++
		rep.Failures, rep.Left = r.failures, r.lease.TTL-rep.SinceRenewed
		if !r.validUntil.IsZero() {
			rep.Left = time.Until(r.validUntil)
		}
		return rep
	}
	// The store decided the renewal at its expiry less the TTL, in its own
	// clock; the lease it extended expired at storeExpiry.
	if accepted := lease.ExpiresAt.Add(-r.lease.TTL); !r.storeExpiry.IsZero() && accepted.After(r.storeExpiry) {
		rep.Late = accepted.Sub(r.storeExpiry)
	}
	rep.Failures, r.failures = r.failures, 0
	// Renewals may answer out of order (the keeper's and a Confirm): what
	// is known of the lease only moves forward.
	if start.After(r.renewedAt) {
		r.renewedAt = start
	}
	if lease.ExpiresAt.After(r.storeExpiry) {
		r.storeExpiry = lease.ExpiresAt
	}
	if until := start.Add(r.lease.TTL); until.After(r.validUntil) {
		r.validUntil = until
		close(r.changed)
		r.changed = make(chan struct{})
	}
	rep.Left = time.Until(r.validUntil)
	return rep
}

// reportRenewal logs a renewal that failed, came late, or succeeded after
// failures, and tells Options.OnRenewal of the first two.
func (r *Run) reportRenewal(rep Renewal) {
	log := r.t.opts.Logger
	attrs := []any{"run_id", r.id, "token", r.lease.Token, "since_renewed", rep.SinceRenewed.Round(time.Millisecond)}
	switch {
	case rep.Err != nil && errors.Is(rep.Err, runstate.ErrLeaseLost):
		log.Warn("lease renewal refused: the lease is no longer this worker's", append(attrs, "error", rep.Err)...)
	case rep.Err != nil && rep.Left > 0:
		log.Warn("lease renewal failed; retrying", append(attrs, "failures", rep.Failures, "lease_left", rep.Left.Round(time.Millisecond), "error", rep.Err)...)
	case rep.Err != nil:
		log.Warn("lease renewal failed, and the lease may have lapsed: another worker may claim the run; retrying",
			append(attrs, "failures", rep.Failures, "lapsed_for", (-rep.Left).Round(time.Millisecond), "error", rep.Err)...)
	case rep.Late > 0 && rep.Failures > 0:
		log.Warn("lease renewed late: the store accepted the renewal after the lease had expired, unless a renewal whose answer was lost had moved it (nobody had claimed the run meanwhile)",
			append(attrs, "late_at_most", rep.Late.Round(time.Millisecond), "failures_before", rep.Failures)...)
	case rep.Late > 0:
		log.Warn("lease renewed late: the store accepted the renewal after the lease had expired (nobody had claimed the run meanwhile)",
			append(attrs, "late", rep.Late.Round(time.Millisecond), "failures_before", rep.Failures)...)
	default:
		log.Info("lease renewed again after failed renewals", append(attrs, "failures_before", rep.Failures)...)
		return
	}
	if r.t.opts.OnRenewal != nil {
		r.t.opts.OnRenewal(rep)
	}
}

// LastRenewed returns when the last renewal that succeeded was sent, on
// this process's clock (when the run was attached, before the first).
func (r *Run) LastRenewed() time.Time {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	return r.renewedAt
}

// LeaseValidUntil returns when the lease ends at the earliest (monotonic
// time; zero before the first renewal), and a channel that closes when
// that moves. ok is false for a run without a lease, which has no end.
func (r *Run) LeaseValidUntil() (until time.Time, changed <-chan struct{}, ok bool) {
	if r.lease.Token == 0 {
		return time.Time{}, nil, false
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	return r.validUntil, r.changed, true
}

// KeepLease renews the lease every interval until ctx ends, and watches the
// run. It calls stop with runstate.ErrLeaseLost when a renewal is refused
// (another worker owns the run now) and with ErrRunEnded when someone else
// ended the run, then returns. A renewal that fails otherwise is tried
// again at the next tick: the lease is lost only if none succeeds for a
// whole TTL and someone else claims the run.
func (r *Run) KeepLease(ctx context.Context, interval time.Duration, stop func(error)) {
	if r.lease.Token == 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Renewals do not wait for the run's writes, nor writes for them.
		err := r.renew(r.spans.context(ctx, "", "", false))
		switch {
		case errors.Is(err, runstate.ErrLeaseLost) && r.released.Load():
			// This worker's own write ended the run and its lease.
			stop(fmt.Errorf("%w: it ended with its lease released", ErrRunEnded))
			return
		case errors.Is(err, runstate.ErrLeaseLost):
			stop(err)
			return
		case err != nil:
			continue // renew logged it
		}
		if cur, err := r.t.store.GetRun(r.spans.context(ctx, "", "", false), r.id); err == nil && cur.Status.Terminal() {
			stop(fmt.Errorf("%w: it is %s", ErrRunEnded, cur.Status))
			return
		}
	}
}

// Begin moves the run to running.
func (r *Run) Begin(ctx context.Context) error {
	r.spans.context(ctx, "", "", true)
	if r.announceStarted() {
		return nil
	}
	return r.move(ctx, runstate.StatusRunning, nil, "")
}

// announceStarted notifies, once, that the claim began the run (see
// AttachStarted), and reports whether it did.
func (r *Run) announceStarted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return false
	}
	r.started = false
	if r.snap.Status != runstate.StatusRunning {
		return false
	}
	r.t.notify(r.snap, "", "", "")
	return true
}

// Wait moves the run to waiting, with why as its message.
func (r *Run) Wait(ctx context.Context, why string) error {
	return r.move(ctx, runstate.StatusWaiting, nil, why)
}

// ParkParams say how Park parks a run.
type ParkParams struct {
	// Until is when the run wakes by itself (the store's clock).
	Until time.Time
	// Why is the run's message while it is parked.
	Why string
	// Step is the step the run waits in: a signal for it (LabelSignal),
	// or a write that moved the run, leaves it unparked.
	Step string
}

// Park leaves the run waiting in the store until p.Until, and releases its
// lease in the same write (runstate.UpdateRunParams.WakeAt): the worker
// holds nothing while the run waits, and whoever claims it when it wakes
// (at p.Until, or when signalled) goes on with it. It reports false,
// writing nothing, when the run was signalled for p.Step or left waiting
// meanwhile: there is something to do now. A store that cannot park (a
// plugin or gateway of protocol 1.7 or older) answers runstate.ErrUnsupported,
// and the run stays as it was.
func (r *Run) Park(ctx context.Context, p ParkParams) (bool, error) {
	moved := false
	err := r.write(ctx, p.Step, "", "", func(cur runstate.RunSnapshot, up *runstate.UpdateRunParams) bool {
		if moved = (p.Step != "" && Signalled(cur, p.Step)) || (cur.Status != runstate.StatusWaiting && cur.Status != runstate.StatusRunning); moved {
			return true
		}
		if cur.Status != runstate.StatusWaiting {
			up.Status = string(runstate.StatusWaiting)
		}
		until := p.Until
		up.WakeAt, up.Message, up.ReleaseLease = &until, &p.Why, true
		return false
	})
	if err != nil || moved {
		return false, err
	}
	return true, nil
}

// Resume moves a waiting run back to running and consumes the signal that
// resumed it; stepDone, when set, is the wait step to mark success in the
// same write. On a run that is already running only stepDone is marked, or,
// with nothing to write, the lease is checked.
func (r *Run) Resume(ctx context.Context, stepDone string) error {
	err := r.resume(ctx, stepDone)
	if stepDone != "" {
		r.spans.endStep(stepDone, runstate.StepSuccess, err)
	}
	return err
}

func (r *Run) resume(ctx context.Context, stepDone string) error {
	return r.write(ctx, stepDone, "", "", func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) bool {
		if st, ok := cur.Step(stepDone); stepDone != "" && (!ok || st.Status != runstate.StepSuccess) {
			p.Steps = []runstate.StepPatch{{Name: stepDone, Status: string(runstate.StepSuccess)}}
		}
		if cur.Status == runstate.StatusRunning {
			return len(p.Steps) == 0 // only the step is left to finish, if anything
		}
		p.Status = string(runstate.StatusRunning)
		p.Labels = withoutSignal(cur.Labels)
		if cur.Message != "" {
			// The wait's message (who signalled, what it waited for) goes
			// to the event, and the run no longer says it waits.
			none := ""
			p.Reason, p.Message = "resumed: "+cur.Message, &none
		}
		return false
	})
}

// Finish ends the run in a terminal status; failed, denied and timeout
// need a diagnostic. Steps and hosts still running end with the run: as
// failed when it fails (failed, denied, timeout), canceled or interrupted
// like it; a run never finishes with a step left running.
func (r *Run) Finish(ctx context.Context, status runstate.RunStatus, diag *runstate.Diagnostic, message string) error {
	stepTo := runstate.StepStatus(status)
	if status.RequiresDiagnostic() {
		stepTo = runstate.StepFailed
	}
	return r.moveWith(ctx, status, diag, message, func(cur runstate.RunSnapshot) []runstate.StepPatch {
		if status == runstate.StatusSuccess {
			return nil
		}
		return runstate.StepsFollowingRun(cur, stepTo)
	})
}

// Interrupt ends the run as interrupted, for reason (a code such as
// WORKER_SHUTDOWN, then an explanation); its running steps and hosts follow.
func (r *Run) Interrupt(ctx context.Context, reason string) error {
	return r.write(ctx, "", "", reason, func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) bool {
		p.Status, p.InterruptedReason = string(runstate.StatusInterrupted), reason
		p.Steps = runstate.StepsFollowingRun(cur, runstate.StepInterrupted)
		return false
	})
}

func (r *Run) move(ctx context.Context, to runstate.RunStatus, diag *runstate.Diagnostic, message string) error {
	return r.moveWith(ctx, to, diag, message, nil)
}

// moveWith moves the run to status to; steps, when set, patches its steps
// in the same write.
func (r *Run) moveWith(ctx context.Context, to runstate.RunStatus, diag *runstate.Diagnostic, message string, steps func(runstate.RunSnapshot) []runstate.StepPatch) error {
	errText := ""
	if diag != nil {
		errText = diag.ErrorCode + ": " + diag.Message
	}
	return r.write(ctx, "", "", errText, func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) bool {
		if cur.Status == to {
			return true
		}
		p.Status, p.Diagnostic = string(to), diag
		if message != "" {
			p.Message = &message
		}
		if steps != nil {
			p.Steps = steps(cur)
		}
		return false
	})
}

// StepStarted marks a step running.
func (r *Run) StepStarted(ctx context.Context, step string) error {
	r.spans.startStep(ctx, step)
	return r.stepTo(ctx, step, runstate.StepRunning)
}

// StepFinished marks a step success, failed, skipped, canceled or interrupted.
func (r *Run) StepFinished(ctx context.Context, step string, status runstate.StepStatus) error {
	err := r.stepTo(ctx, step, status)
	r.spans.endStep(step, status, err)
	return err
}

func (r *Run) stepTo(ctx context.Context, step string, to runstate.StepStatus) error {
	return r.write(ctx, step, "", "", func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) bool {
		if st, ok := cur.Step(step); ok && st.Status == to {
			return true
		}
		p.Steps = []runstate.StepPatch{{Name: step, Status: string(to)}}
		return false
	})
}

// HostStarted marks a step's host running.
func (r *Run) HostStarted(ctx context.Context, step, host string) error {
	r.spans.startHost(ctx, step, host)
	return r.hostTo(ctx, step, host, runstate.StepRunning, nil, nil)
}

// HostFinished records a host's outcome, its output (truncated to
// runstate.MaxHostOutputBytes) and its error text.
func (r *Run) HostFinished(ctx context.Context, step, host string, status runstate.StepStatus, output, errText string) error {
	out := Truncate(output, runstate.MaxHostOutputBytes)
	errOut := Truncate(errText, runstate.MaxHostErrorLen)
	err := r.hostTo(ctx, step, host, status, &out, &errOut)
	r.spans.endHost(step, host, status, err)
	return err
}

// End ends the run's spans (docs/tracing.md), as they are when the run
// reaches a terminal status: the engine calls it when it stops working on
// the run otherwise (left waiting, lease lost, shutdown). Once ended, the
// run's calls make no more spans but the store's.
func (r *Run) End() {
	r.spans.endAll(r.Snapshot().Status)
}

func (r *Run) hostTo(ctx context.Context, step, host string, to runstate.StepStatus, output, errText *string) error {
	e := ""
	if errText != nil {
		e = *errText
	}
	return r.write(ctx, step, host, e, func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) bool {
		if st, ok := cur.Step(step); ok {
			if h, ok := st.Host(host); ok && h.Status == to && output == nil {
				return true
			}
		}
		p.Steps = []runstate.StepPatch{{Name: step, Hosts: []runstate.HostPatch{{Host: host, Status: string(to), OutputSummary: output, Error: errText}}}}
		return false
	})
}

// withoutSignal returns the labels to write to drop the signal label (an
// empty map when it was the only one, which clears them), or nil when there
// is no signal, so that the patch leaves the labels alone.
func withoutSignal(labels map[string]string) map[string]string {
	if _, ok := labels[LabelSignal]; !ok {
		return nil
	}
	out := maps.Clone(labels)
	delete(out, LabelSignal)
	return out
}
