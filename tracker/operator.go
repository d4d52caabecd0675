package tracker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/runstate/runstate"
)

// LabelSignal marks a waiting run as signalled. Its value is the name of the
// wait step the signal is for. A signal does not move the run: the worker
// that holds the run (or the next one to claim it) sees the label and
// resumes the run itself, with a write fenced by its lease, so that only
// the current lease holder ever acts on a signal.
const LabelSignal = "runstate/signal"

// Errors of operator actions, refused before anything is written.
var (
	// ErrFinished: the run has reached a terminal status; nothing can move it.
	ErrFinished = errors.New("tracker: the run has finished")
	// ErrNotWaiting: only a run waiting in a wait step can be signalled.
	ErrNotWaiting = errors.New("tracker: the run is not waiting for a signal")
)

// Operator carries out operator actions on runs: unfenced compare-and-set
// writes (an operator holds no lease), decided afresh after a conflict.
// It checks the run's status before it writes, so an action on a run that
// cannot take it is refused without provoking a rejected transition.
type Operator struct {
	Store runstate.RunStateStore
	Actor runstate.Actor
	// Notifiers hear of every status change an action makes, as a
	// Tracker's do.
	Notifiers []Notifier
}

// maxOperatorAttempts bounds the re-reads of a run that keeps changing.
const maxOperatorAttempts = 8

// act reads the run, lets decide build the patch (or refuse), and writes it.
func (o Operator) act(ctx context.Context, runID string, decide func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) (done bool, err error)) (runstate.RunSnapshot, error) {
	for attempt := 0; attempt < maxOperatorAttempts; attempt++ {
		cur, err := o.Store.GetRun(ctx, runID)
		if err != nil {
			return cur, err
		}
		p := runstate.UpdateRunParams{RunID: runID, ExpectedVersion: cur.Version, Actor: o.Actor}
		done, err := decide(cur, &p)
		if err != nil || done {
			return cur, err
		}
		next, err := o.Store.UpdateRun(ctx, p)
		if errors.Is(err, runstate.ErrVersionConflict) {
			continue // it changed meanwhile: look again
		}
		if err == nil && next.Status != cur.Status {
			notifyAll(o.Notifiers, next, "", "", "")
		}
		return next, err
	}
	return runstate.RunSnapshot{}, runstate.Unavailable("run "+runID+" kept changing; try again", nil)
}

// Cancel ends a run that has not finished as canceled, for reason: the
// steps and hosts it was executing end canceled with it, its message says
// why, and a pending signal is dropped. A worker executing the run notices
// and stops. A finished run is refused with ErrFinished.
func (o Operator) Cancel(ctx context.Context, runID, reason string) (runstate.RunSnapshot, error) {
	return o.act(ctx, runID, func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) (bool, error) {
		if cur.Status.Terminal() {
			return false, fmt.Errorf("%w: run %s is %s; only a run that has not finished can be canceled", ErrFinished, runID, cur.Status)
		}
		msg := "canceled: " + reason
		p.Status, p.Reason, p.Message = string(runstate.StatusCanceled), reason, &msg
		p.Steps = runstate.StepsFollowingRun(cur, runstate.StepCanceled)
		p.Labels = withoutSignal(cur.Labels)
		return false, nil
	})
}

// Signal resumes a run waiting in a wait step: it marks the run signalled
// for that step (LabelSignal) and, when the run is parked, wakes it in the
// same write; the worker holding the run, or the next to claim it,
// resumes it.
// A run that is already signalled is left as it is. A run that is not
// waiting is refused with ErrNotWaiting, a finished one with ErrFinished.
func (o Operator) Signal(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	return o.act(ctx, runID, func(cur runstate.RunSnapshot, p *runstate.UpdateRunParams) (bool, error) {
		switch {
		case cur.Status.Terminal():
			return false, fmt.Errorf("%w: run %s is %s", ErrFinished, runID, cur.Status)
		case cur.Status != runstate.StatusWaiting:
			return false, fmt.Errorf("%w: run %s is %s", ErrNotWaiting, runID, cur.Status)
		case cur.Labels[LabelSignal] != "":
			return true, nil
		}
		step := waitingStep(cur)
		if step == "" {
			return false, fmt.Errorf("%w: run %s is waiting, but in no step", ErrNotWaiting, runID)
		}
		labels := maps.Clone(cur.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelSignal] = step
		msg := fmt.Sprintf("step %s signalled by %s", step, o.who())
		p.Labels, p.Message = labels, &msg
		if !cur.WakeAt.IsZero() {
			p.WakeAt = &time.Time{} // a parked run wakes, claimable at once
		}
		return false, nil
	})
}

func (o Operator) who() string {
	if o.Actor.ID == "" {
		return string(o.Actor.Kind)
	}
	return string(o.Actor.Kind) + " " + o.Actor.ID
}

// waitingStep returns the step a waiting run waits in: its running step.
func waitingStep(run runstate.RunSnapshot) string {
	for _, st := range run.Steps {
		if st.Status == runstate.StepRunning {
			return st.Name
		}
	}
	return ""
}

// Signalled reports whether run is waiting with a signal for step.
func Signalled(run runstate.RunSnapshot, step string) bool {
	return run.Status == runstate.StatusWaiting && run.Labels[LabelSignal] == step
}
