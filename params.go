package runstate

import "time"

// CreateRunParams describes a new run.
type CreateRunParams struct {
	// RunID is optional: when empty the store generates a ULID.
	RunID        string
	WorkflowName string
	// Status is the initial status: empty or queued (or an alias of queued).
	Status   string
	Message  string
	Priority int
	Labels   map[string]string
	// Steps declares the run's steps (and their hosts) up front, all queued.
	Steps []StepSpec
	// RetryOf names the terminal run this one retries.
	RetryOf string
	Actor   Actor
	Reason  string
}

// StepSpec declares a step and its hosts at creation.
type StepSpec struct {
	Name  string
	Hosts []string
}

// UpdateRunParams is a compare-and-set patch of one run. Fields left at their
// zero value are not changed.
type UpdateRunParams struct {
	RunID string
	// ExpectedVersion is the version the patch was based on (required, >= 1).
	ExpectedVersion int64
	// LeaseToken fences the write: when non-zero it must be the run's current,
	// unreleased lease token. Zero means an unfenced write (an operator's),
	// governed by the version check alone.
	LeaseToken int64
	// Status, when set, is the status to move to (aliases accepted). It must
	// differ from the current one: a self-transition is not in the table.
	Status            string
	Message           *string
	Priority          *int
	Diagnostic        *Diagnostic
	InterruptedReason string
	// Labels, when non-nil, replaces the run's labels.
	Labels map[string]string
	// Steps updates steps and hosts; unknown names are added as queued first.
	Steps  []StepPatch
	Actor  Actor
	Reason string
	// ReleaseLease releases the lease LeaseToken names in the update's own
	// write, once the update applies: a worker's last write of a run, one
	// write where UpdateRun and then ReleaseLease are two (LEASE-022). An
	// update that is refused releases nothing. It needs a LeaseToken.
	ReleaseLease bool
	// WakeAt, when set, parks the run until that instant (a zero time:
	// wakes it now, as a signal does). Only a run that is queued or waiting
	// after the update may be parked, and a run a lease holds only by its
	// holder's write that releases that lease (ReleaseLease), since a
	// parked run holds nothing (WAKE-002). Stores across a process boundary
	// whose far side does not keep the field refuse it with
	// ErrUnsupported rather than drop it.
	WakeAt *time.Time
}

// StepPatch updates one step and, optionally, some of its hosts.
type StepPatch struct {
	Name string
	// Status, when set, is the step's new status (step table).
	Status string
	Hosts  []HostPatch
}

// HostPatch updates one host within a step.
type HostPatch struct {
	Host string
	// Status, when set, is the host's new status (step table).
	Status        string
	OutputSummary *string
	Error         *string
}

// ListRunsParams filters and pages ListRuns. Results are ordered by
// created_at, then run_id, ascending.
type ListRunsParams struct {
	// Statuses, when non-empty, keeps runs in any of these statuses (aliases accepted).
	Statuses     []string
	WorkflowName string
	// Labels keeps runs that carry every one of these key/value pairs.
	Labels map[string]string
	// CreatedFrom (inclusive) and CreatedBefore (exclusive) bound created_at.
	CreatedFrom, CreatedBefore time.Time
	// Limit is the page size: 0 means DefaultPageLimit, at most MaxPageLimit.
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
}

// RunPage is a page of runs.
type RunPage struct {
	Runs []RunSnapshot
	// NextCursor is empty on the last page.
	NextCursor string
}

// ListAuditParams pages the audit events of one run in Seq order.
type ListAuditParams struct {
	RunID string
	// AfterSeq returns events with Seq > AfterSeq.
	AfterSeq int64
	// Limit is the page size: 0 means DefaultPageLimit, at most MaxPageLimit.
	Limit int
}

// AuditPage is a page of audit events. More reports whether further events follow.
type AuditPage struct {
	Events []AuditEvent
	More   bool
}

// RunnableFilter selects runnable runs: non-terminal, in one of Statuses,
// and without a live lease.
type RunnableFilter struct {
	// Statuses defaults to queued and waiting; only non-terminal ones are allowed.
	Statuses     []string
	WorkflowName string
	Labels       map[string]string
}

// ClaimRunParams claims one named run.
type ClaimRunParams struct {
	RunID string
	Owner Owner
	TTL   time.Duration
	// Statuses the run may be in; defaults to queued and waiting.
	Statuses []string
}

// ClaimNextParams claims the best runnable run: highest priority, then oldest.
type ClaimNextParams struct {
	Owner  Owner
	TTL    time.Duration
	Filter RunnableFilter
}

// Claim is the result of a successful claim: the lease and the run as it was
// when claimed.
type Claim struct {
	Lease Lease
	Run   RunSnapshot
}

// RenewLeaseParams extends a lease to now + TTL.
type RenewLeaseParams struct {
	RunID string
	Token int64
	TTL   time.Duration
}

// ReleaseLeaseParams ends a lease.
type ReleaseLeaseParams struct {
	RunID string
	Token int64
}

// ListRunnableParams lists runnable runs in claim order: priority descending,
// then created_at and run_id ascending.
type ListRunnableParams struct {
	Filter RunnableFilter
	Limit  int
	Cursor string
}
