package runstate

import (
	"slices"
	"strings"
)

// RunStatus is the lifecycle status of a run.
type RunStatus string

// Run statuses: queued, running and waiting are non-terminal; a run that
// reaches any other never changes status again.
const (
	StatusQueued      RunStatus = "queued"
	StatusRunning     RunStatus = "running"
	StatusWaiting     RunStatus = "waiting"
	StatusSuccess     RunStatus = "success"
	StatusFailed      RunStatus = "failed"
	StatusDenied      RunStatus = "denied"
	StatusTimeout     RunStatus = "timeout"
	StatusCanceled    RunStatus = "canceled"
	StatusInterrupted RunStatus = "interrupted"
)

// runStatuses lists every run status in lifecycle order.
var runStatuses = []RunStatus{
	StatusQueued, StatusRunning, StatusWaiting,
	StatusSuccess, StatusFailed, StatusDenied, StatusTimeout, StatusCanceled, StatusInterrupted,
}

// statusAliases are accepted on input and stored as their target
// ("created" from requirement 001-1, "pending" from 003-1; docs/requirements.md). Rule FSM-006.
var statusAliases = map[string]RunStatus{
	"created": StatusQueued,
	"pending": StatusQueued,
}

// runTransitions is the run-level transition table: the one place it is
// written down. Everything else, including the conformance suite, reads it.
// Every store accepts exactly these pairs and refuses the rest (FSM-001, FSM-002).
var runTransitions = map[RunStatus][]RunStatus{
	StatusQueued:  {StatusRunning, StatusCanceled},
	StatusRunning: {StatusWaiting, StatusSuccess, StatusFailed, StatusDenied, StatusTimeout, StatusCanceled, StatusInterrupted},
	StatusWaiting: {StatusRunning, StatusCanceled},
}

// RunStatuses returns every run status, non-terminal first.
func RunStatuses() []RunStatus { return slices.Clone(runStatuses) }

// nonTerminalRunStatuses returns queued, running and waiting.
func nonTerminalRunStatuses() []RunStatus {
	return []RunStatus{StatusQueued, StatusRunning, StatusWaiting}
}

// ParseRunStatus returns the status s names, resolving the input aliases
// created and pending (FSM-006). Names are case-sensitive (BAD-002): "Queued" or
// "PENDING" is an unknown name, an ErrInvalidArgument.
func ParseRunStatus(s string) (RunStatus, error) {
	if target, ok := statusAliases[s]; ok {
		return target, nil
	}
	st := RunStatus(s)
	if !slices.Contains(runStatuses, st) {
		return "", unknownStatus("status", s)
	}
	return st, nil
}

func unknownStatus(field, s string) error {
	return InvalidArgument(field, "unknown run status %q (want one of %s, or the aliases created, pending)", s, joinStatuses(runStatuses))
}

// Valid reports whether s is a run status (aliases are not).
func (s RunStatus) Valid() bool { return slices.Contains(runStatuses, s) }

// Terminal reports whether s is a terminal status.
func (s RunStatus) Terminal() bool { return s.Valid() && !slices.Contains(nonTerminalRunStatuses(), s) }

// RequiresDiagnostic reports whether entering s requires a Diagnostic (docs/requirements.md#001-7, DIAG-001).
func (s RunStatus) RequiresDiagnostic() bool {
	return s == StatusFailed || s == StatusDenied || s == StatusTimeout
}

// CanTransition reports whether the table allows from -> to.
func CanTransition(from, to RunStatus) bool { return slices.Contains(runTransitions[from], to) }

// StepStatus is the status of a step, and of one host within a step.
type StepStatus string

// Step and host statuses.
const (
	StepQueued      StepStatus = "queued"
	StepRunning     StepStatus = "running"
	StepSuccess     StepStatus = "success"
	StepFailed      StepStatus = "failed"
	StepSkipped     StepStatus = "skipped"
	StepCanceled    StepStatus = "canceled"
	StepInterrupted StepStatus = "interrupted"
)

var stepStatuses = []StepStatus{
	StepQueued, StepRunning, StepSuccess, StepFailed, StepSkipped, StepCanceled, StepInterrupted,
}

// stepTransitions is the step- and host-level table (FSM-007, FSM-008). Besides running's
// outcomes, a step that never started may be skipped or canceled.
var stepTransitions = map[StepStatus][]StepStatus{
	StepQueued:  {StepRunning, StepSkipped, StepCanceled},
	StepRunning: {StepSuccess, StepFailed, StepSkipped, StepCanceled, StepInterrupted},
}

// StepStatuses returns every step status.
func StepStatuses() []StepStatus { return slices.Clone(stepStatuses) }

// ParseStepStatus returns the step status s names; "pending" and "created"
// are accepted as aliases of queued, as for runs. An unknown name is an
// ErrInvalidArgument (BAD-002).
func ParseStepStatus(s string) (StepStatus, error) {
	if _, ok := statusAliases[s]; ok {
		return StepQueued, nil
	}
	st := StepStatus(s)
	if !slices.Contains(stepStatuses, st) {
		return "", InvalidArgument("step status", "unknown step status %q", s)
	}
	return st, nil
}

// Valid reports whether s is a step status.
func (s StepStatus) Valid() bool { return slices.Contains(stepStatuses, s) }

// Terminal reports whether s is a final step status.
func (s StepStatus) Terminal() bool { return s.Valid() && s != StepQueued && s != StepRunning }

// CanStepTransition reports whether the step table allows from -> to.
func CanStepTransition(from, to StepStatus) bool { return slices.Contains(stepTransitions[from], to) }

func joinStatuses(list []RunStatus) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
