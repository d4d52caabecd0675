// Package tracker bridges a workflow engine's events to a runstate store:
// it creates the run, writes run, step and host state as execution goes
// (compare-and-set patches, fenced by the run's lease when it has one, host
// output truncated to the contract's limit) and fans every change out to
// notifiers. An engine that reports through a tracker never writes to a
// store itself.
package tracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runstate/runstate/spec"
)

// Event is one change, with the fields of seed 002's callback payload.
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
	Actor  spec.Actor
	Logger *slog.Logger
}

// Tracker writes runs to a store and notifies.
type Tracker struct {
	store spec.RunStateStore
	opts  Options
}

// New returns a tracker over store.
func New(store spec.RunStateStore, opts Options) *Tracker {
	if opts.Actor.Kind == "" {
		opts.Actor = spec.Actor{Kind: spec.ActorWorker}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Tracker{store: store, opts: opts}
}

// ErrRunEnded: the run reached a terminal status by someone else's write
// (an operator's cancel, recovery); the engine must stop working on it.
var ErrRunEnded = errors.New("tracker: the run was ended elsewhere")

func (t *Tracker) notify(s spec.RunSnapshot, step, host, errText string) {
	ev := Event{RunID: s.RunID, WorkflowName: s.WorkflowName, Status: string(s.Status), Step: step, Host: host,
		Timestamp: s.UpdatedAt, Error: errText, Version: s.Version}
	for _, n := range t.opts.Notifiers {
		n.Notify(ev)
	}
}

// Create makes a queued run and notifies.
func (t *Tracker) Create(ctx context.Context, p spec.CreateRunParams) (spec.RunSnapshot, error) {
	if p.Actor.Kind == "" {
		p.Actor = t.opts.Actor
	}
	s, err := t.store.CreateRun(ctx, p)
	if err == nil {
		t.notify(s, "", "", "")
	}
	return s, err
}

// Attach returns the handle an engine drives a run through. token is the
// run's lease token (0 when the run is not leased).
func (t *Tracker) Attach(run spec.RunSnapshot, token int64) *Run {
	return &Run{t: t, snap: run, token: token}
}

// Run is one run being executed. Its methods are safe for concurrent use
// (hosts of a step report in parallel); writes are serialised.
type Run struct {
	t     *Tracker
	mu    sync.Mutex
	snap  spec.RunSnapshot
	token int64
}

// Snapshot returns the run as last written or read.
func (r *Run) Snapshot() spec.RunSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap.Clone()
}

// patch prepares an update against the current snapshot; skip says there is
// nothing to write (the run is already where the caller wants it).
type patch func(cur spec.RunSnapshot, p *spec.UpdateRunParams) (skip bool)

// write applies a patch, re-reading once after a version conflict (an
// operator's write in between) and applying it again on the new version.
func (r *Run) write(ctx context.Context, step, host, errText string, fn patch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if r.snap.Status.Terminal() {
			return fmt.Errorf("%w: it is %s", ErrRunEnded, r.snap.Status)
		}
		p := spec.UpdateRunParams{RunID: r.snap.RunID, ExpectedVersion: r.snap.Version, LeaseToken: r.token, Actor: r.t.opts.Actor}
		if fn(r.snap, &p) {
			return nil
		}
		next, err := r.t.store.UpdateRun(ctx, p)
		if err == nil {
			r.snap = next
			r.t.notify(next, step, host, errText)
			return nil
		}
		if !errors.Is(err, spec.ErrVersionConflict) || attempt > 0 {
			return err
		}
		if r.snap, err = r.t.store.GetRun(ctx, r.snap.RunID); err != nil {
			return err
		}
	}
}

// Refresh re-reads the run from the store.
func (r *Run) Refresh(ctx context.Context) (spec.RunSnapshot, error) {
	s, err := r.t.store.GetRun(ctx, r.Snapshot().RunID)
	if err != nil {
		return s, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snap = s
	return s.Clone(), nil
}

// Begin moves the run to running.
func (r *Run) Begin(ctx context.Context) error { return r.move(ctx, spec.StatusRunning, nil, "") }

// Wait moves the run to waiting, with why as its message.
func (r *Run) Wait(ctx context.Context, why string) error {
	return r.move(ctx, spec.StatusWaiting, nil, why)
}

// Resume moves a waiting run back to running; a run something else already
// resumed is left as it is.
func (r *Run) Resume(ctx context.Context) error { return r.move(ctx, spec.StatusRunning, nil, "") }

// Finish ends the run in a terminal status; failed, denied and timeout
// need a diagnostic.
func (r *Run) Finish(ctx context.Context, status spec.RunStatus, diag *spec.Diagnostic, message string) error {
	return r.move(ctx, status, diag, message)
}

// Interrupt ends the run as interrupted, for reason (a code such as
// WORKER_SHUTDOWN, then an explanation); its running steps and hosts follow.
func (r *Run) Interrupt(ctx context.Context, reason string) error {
	return r.write(ctx, "", "", reason, func(cur spec.RunSnapshot, p *spec.UpdateRunParams) bool {
		p.Status, p.InterruptedReason = string(spec.StatusInterrupted), reason
		for _, st := range cur.Steps {
			sp := spec.StepPatch{Name: st.Name}
			if st.Status == spec.StepRunning {
				sp.Status = string(spec.StepInterrupted)
			}
			for _, h := range st.Hosts {
				if h.Status == spec.StepRunning {
					sp.Hosts = append(sp.Hosts, spec.HostPatch{Host: h.Host, Status: string(spec.StepInterrupted)})
				}
			}
			if sp.Status != "" || len(sp.Hosts) > 0 {
				p.Steps = append(p.Steps, sp)
			}
		}
		return false
	})
}

func (r *Run) move(ctx context.Context, to spec.RunStatus, diag *spec.Diagnostic, message string) error {
	errText := ""
	if diag != nil {
		errText = diag.ErrorCode + ": " + diag.Message
	}
	return r.write(ctx, "", "", errText, func(cur spec.RunSnapshot, p *spec.UpdateRunParams) bool {
		if cur.Status == to {
			return true
		}
		p.Status, p.Diagnostic = string(to), diag
		if message != "" {
			p.Message = &message
		}
		return false
	})
}

// StepStarted marks a step running.
func (r *Run) StepStarted(ctx context.Context, step string) error {
	return r.stepTo(ctx, step, spec.StepRunning)
}

// StepFinished marks a step success, failed, skipped, canceled or interrupted.
func (r *Run) StepFinished(ctx context.Context, step string, status spec.StepStatus) error {
	return r.stepTo(ctx, step, status)
}

func (r *Run) stepTo(ctx context.Context, step string, to spec.StepStatus) error {
	return r.write(ctx, step, "", "", func(cur spec.RunSnapshot, p *spec.UpdateRunParams) bool {
		if st, ok := cur.Step(step); ok && st.Status == to {
			return true
		}
		p.Steps = []spec.StepPatch{{Name: step, Status: string(to)}}
		return false
	})
}

// HostStarted marks a step's host running.
func (r *Run) HostStarted(ctx context.Context, step, host string) error {
	return r.hostTo(ctx, step, host, spec.StepRunning, nil, nil)
}

// HostFinished records a host's outcome, its output (truncated to
// spec.MaxHostOutputBytes) and its error text.
func (r *Run) HostFinished(ctx context.Context, step, host string, status spec.StepStatus, output, errText string) error {
	out := spec.TruncateOutput(output)
	errOut := spec.TruncateText(errText, spec.MaxHostErrorLen)
	return r.hostTo(ctx, step, host, status, &out, &errOut)
}

func (r *Run) hostTo(ctx context.Context, step, host string, to spec.StepStatus, output, errText *string) error {
	e := ""
	if errText != nil {
		e = *errText
	}
	return r.write(ctx, step, host, e, func(cur spec.RunSnapshot, p *spec.UpdateRunParams) bool {
		if st, ok := cur.Step(step); ok {
			if h, ok := st.Host(host); ok && h.Status == to && output == nil {
				return true
			}
		}
		p.Steps = []spec.StepPatch{{Name: step, Hosts: []spec.HostPatch{{Host: host, Status: string(to), OutputSummary: output, Error: errText}}}}
		return false
	})
}
