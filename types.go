package runstate

import (
	"maps"
	"slices"
	"time"
)

// RunSnapshot is the current state of one run. Stores return copies: changing
// a returned snapshot never changes stored state.
type RunSnapshot struct {
	RunID        string            `json:"run_id"`
	WorkflowName string            `json:"workflow_name"`
	Status       RunStatus         `json:"status"`
	Message      string            `json:"message,omitempty"`
	Priority     int               `json:"priority"`
	Labels       map[string]string `json:"labels,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
	// StartedAt is set when the run first enters running.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is set when the run enters a terminal status.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// WakeAt parks a queued or waiting run: no claim takes it, and the
	// runnable listing passes it by, before this instant of the store's
	// clock (WAKE-001). Zero: the run is not parked. An update sets it
	// (UpdateRunParams.WakeAt); a run that leaves queued and waiting loses
	// it. A parked run holds no lease, so a wait or a timer costs no
	// worker anything until the run wakes.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// Version starts at 1 and grows by one with every successful write.
	Version           int64       `json:"version"`
	Diagnostic        *Diagnostic `json:"diagnostic,omitempty"`
	InterruptedReason string      `json:"interrupted_reason,omitempty"`
	// RetryOf is the run this run retries; Attempt counts from 1.
	RetryOf string `json:"retry_of,omitempty"`
	Attempt int    `json:"attempt"`
	Steps   []Step `json:"steps,omitempty"`
}

// Step is the state of one step of a run. Step names are unique within a run.
type Step struct {
	Name       string      `json:"name"`
	Status     StepStatus  `json:"status"`
	StartedAt  time.Time   `json:"started_at,omitzero"`
	FinishedAt time.Time   `json:"finished_at,omitzero"`
	Hosts      []HostState `json:"hosts,omitempty"`
}

// HostState is the state of one step on one host. Host names are unique within a step.
type HostState struct {
	Host   string     `json:"host"`
	Status StepStatus `json:"status"`
	// OutputSummary is at most MaxHostOutputBytes (tracker.Truncate cuts it to size).
	OutputSummary string    `json:"output_summary,omitempty"`
	Error         string    `json:"error,omitempty"`
	StartedAt     time.Time `json:"started_at,omitzero"`
	FinishedAt    time.Time `json:"finished_at,omitzero"`
}

// Diagnostic explains a failure (docs/requirements.md#001-7). ErrorCode and Message are required.
type Diagnostic struct {
	ErrorCode  string            `json:"error_code"`
	Message    string            `json:"message"`
	Retryable  bool              `json:"retryable"`
	SourceStep string            `json:"source_step,omitempty"`
	SourceHost string            `json:"source_host,omitempty"`
	Details    map[string]string `json:"details,omitempty"`
}

// ActorKind says who caused a change.
type ActorKind string

// Actor kinds.
const (
	ActorWorker   ActorKind = "worker"
	ActorRecovery ActorKind = "recovery"
	ActorOperator ActorKind = "operator"
)

// Actor identifies who caused a change. An empty Kind is stored as operator.
//
// Principal, when set, is the authenticated identity that made the write
// (a gateway's token, a console's login), recorded beside Kind and ID in
// every audit event the write causes (AUD-010). Kind and ID are then who
// the principal acted on behalf of, as the call named them: an operator
// that recovers a worker's runs names the worker, and the trail still
// shows which principal did it. Empty: the writer was not authenticated
// (an in-process store), and the event has no principal.
type Actor struct {
	Kind      ActorKind `json:"kind"`
	ID        string    `json:"id,omitempty"`
	Principal string    `json:"principal,omitempty"`
}

// AuditKind classifies an audit event.
type AuditKind string

// Audit event kinds.
const (
	// AuditCreated records the creation of a run (From is empty).
	AuditCreated AuditKind = "created"
	// AuditTransition records an accepted status change.
	AuditTransition AuditKind = "transition"
	// AuditRejected records a rejected invalid transition; To is the status
	// that was asked for, and the run's status did not become To.
	AuditRejected AuditKind = "rejected"
)

// AuditEvent is one entry of a run's audit trail.
type AuditEvent struct {
	RunID string `json:"run_id"`
	// Seq numbers a run's events 1, 2, 3, … in the order they happened.
	Seq       int64     `json:"seq"`
	Kind      AuditKind `json:"kind"`
	From      RunStatus `json:"from,omitempty"`
	To        RunStatus `json:"to"`
	Time      time.Time `json:"time"`
	Actor     Actor     `json:"actor"`
	Reason    string    `json:"reason,omitempty"`
	ErrorCode string    `json:"error_code,omitempty"`
	// Version is the run's version after the event: unchanged for a
	// rejected attempt on a terminal run.
	Version int64 `json:"version"`
	// LeaseToken is the lease token the write carried (0 for an unfenced
	// write): which lease the writer acted under, for telling apart two
	// incarnations of one worker, or a worker from the one that took over.
	LeaseToken int64 `json:"lease_token,omitempty"`
}

// Owner identifies a lease holder. Worker is stable across restarts of the
// same worker; Incarnation changes with every start. A live lease blocks every
// claimant except a later incarnation of the same worker, so a restarted
// worker never waits for its own previous life's leases.
type Owner struct {
	Worker      string `json:"worker"`
	Incarnation string `json:"incarnation"`
}

func (o Owner) String() string { return o.Worker + "/" + o.Incarnation }

// Lease is a worker's time-bounded right to execute one run.
type Lease struct {
	RunID string `json:"run_id"`
	Owner Owner  `json:"owner"`
	// Token is the fencing token: larger than every token issued earlier for this run.
	Token      int64     `json:"token"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// Clone returns a deep copy of s.
func (s RunSnapshot) Clone() RunSnapshot {
	c := s
	c.Labels = maps.Clone(s.Labels)
	if s.Diagnostic != nil {
		d := *s.Diagnostic
		d.Details = maps.Clone(s.Diagnostic.Details)
		c.Diagnostic = &d
	}
	if s.Steps != nil {
		c.Steps = make([]Step, len(s.Steps))
		for i, st := range s.Steps {
			st.Hosts = slices.Clone(st.Hosts)
			c.Steps[i] = st
		}
	}
	return c
}

// Step returns the step called name, if present.
func (s *RunSnapshot) Step(name string) (*Step, bool) {
	for i := range s.Steps {
		if s.Steps[i].Name == name {
			return &s.Steps[i], true
		}
	}
	return nil, false
}

// Host returns the state of host within the step, if present.
func (st *Step) Host(host string) (*HostState, bool) {
	for i := range st.Hosts {
		if st.Hosts[i].Host == host {
			return &st.Hosts[i], true
		}
	}
	return nil, false
}
