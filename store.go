package runstate

import (
	"context"
	"time"
)

// RunStateStore keeps run snapshots and their audit trails.
//
// Every method takes a context first; a store returns ctx's error (matching
// context.Canceled or context.DeadlineExceeded) when the context ends before
// the call completes, and a call that fails changes nothing unless its
// documentation says otherwise. Input is validated before anything is read
// or written: malformed input is an ErrInvalidArgument naming the field.
// Implementations must be safe for concurrent use, also by several handles
// (processes) on the same data.
type RunStateStore interface {
	// CreateRun stores a new run in status queued at version 1 and writes its
	// first audit event (kind created, seq 1) in the same atomic write.
	//
	// An empty RunID gets a generated ULID; a caller-supplied one must satisfy
	// ValidateRunID. An existing RunID is an ErrAlreadyExists and leaves the
	// existing run untouched. RetryOf, when set, must name an existing terminal
	// run (else ErrInvalidArgument); the new run's Attempt is that run's plus
	// one, and the retried run is not modified. Without RetryOf, Attempt is 1.
	CreateRun(ctx context.Context, p CreateRunParams) (RunSnapshot, error)

	// UpdateRun applies p to the run as one compare-and-set write, with the
	// outcome of the checks of docs/spec.md §1.6, in that order:
	//   - unknown run: ErrNotFound;
	//   - p.LeaseToken set but not the run's current, unreleased token: ErrLeaseLost;
	//   - p.ExpectedVersion not the current version: ErrVersionConflict;
	// each of which writes nothing. An accepted write increments the version
	// by one and stores the new snapshot together with its audit events.
	// A transition the table forbids returns ErrInvalidTransition and, in the
	// same atomic write, records a rejected audit event and moves a
	// non-terminal run to failed with diagnostic INVALID_STATE_TRANSITION
	// (plus that transition's event); a terminal run stays exactly as it was.
	UpdateRun(ctx context.Context, p UpdateRunParams) (RunSnapshot, error)

	// GetRun returns the run's snapshot, or ErrNotFound.
	GetRun(ctx context.Context, runID string) (RunSnapshot, error)

	// ListRuns returns runs matching every filter in p, ordered by created_at
	// then run_id ascending, one page at a time. Paging with NextCursor never
	// skips or repeats a run that existed when the first page was read, even
	// while other runs are created.
	ListRuns(ctx context.Context, p ListRunsParams) (RunPage, error)

	// ListAuditEvents returns a run's audit events in Seq order; ErrNotFound
	// when the run does not exist.
	ListAuditEvents(ctx context.Context, p ListAuditParams) (AuditPage, error)

	// Features returns what the store can do beyond this interface: its
	// lease side, batches, watches (Features). It is asked each time a call
	// needs a feature, and a wrapper keeps the features of the store it
	// wraps, so no layer can drop one unseen. A store that implements the
	// optional interfaces as methods of its own returns FeaturesOf(itself).
	Features() Features
}

// LeaseStore hands out leases so that several workers can share one store
// without executing a run twice. It is optional: a store without it serves
// a single process, and Recover then relies on compare-and-set alone.
//
// Lease expiry is decided by the store's clock, one clock for every worker.
// Lease operations do not change a run's version and write no audit events.
type LeaseStore interface {
	// ClaimRun gives p.Owner a lease on one run for p.TTL. It fails with
	// ErrNotFound for an unknown run, ErrNotClaimable when the run is terminal
	// or not in one of p.Statuses, and ErrLeaseHeld while another owner holds
	// a live lease (a later incarnation of the same worker is not blocked).
	// The new lease's token is larger than every earlier token of the run.
	ClaimRun(ctx context.Context, p ClaimRunParams) (Claim, error)

	// ClaimNextRun claims the runnable run matching p.Filter with the highest
	// priority, then the oldest created_at, then the smallest run_id. Workers
	// claiming concurrently never receive the same run. ErrNotFound when no
	// run is runnable.
	ClaimNextRun(ctx context.Context, p ClaimNextParams) (Claim, error)

	// RenewLease extends the lease to now + p.TTL, keeping owner and token.
	// It fails with ErrLeaseLost once the token is no longer the run's current
	// one (another owner claimed the run) or the lease was released. A lease
	// that expired but was not claimed by anyone since is still renewable.
	RenewLease(ctx context.Context, p RenewLeaseParams) (Lease, error)

	// ReleaseLease ends the lease: the run is claimable at once if it is not
	// terminal. ErrLeaseLost when the token is stale or already released.
	ReleaseLease(ctx context.Context, p ReleaseLeaseParams) error

	// ListRunnableRuns returns runnable runs (non-terminal, in one of the
	// filter's statuses, without a live lease) in claim order, paged.
	ListRunnableRuns(ctx context.Context, p ListRunnableParams) (RunPage, error)
}

// Store is a store with leases, as the reference adapters provide.
type Store interface {
	RunStateStore
	LeaseStore
}

// LeaseReader is optional: a store that tells who holds a run's lease. A
// gateway needs it to let each worker act only under its own leases; the
// reference adapters have it.
type LeaseReader interface {
	// GetLease returns the last lease issued on the run: Token 0 when it was
	// never leased; it may have expired or been released since. Unknown
	// run: ErrNotFound.
	GetLease(ctx context.Context, runID string) (Lease, error)
}

// RunnableWatcher is optional: a store that tells idle workers when a run
// may have become runnable, so that one claims it at once rather than at
// its next poll. Without it, workers poll; with it, they still should, at
// a longer interval: a lease that expires notifies nobody, and a notice
// may be lost with a connection.
type RunnableWatcher interface {
	// WatchRunnable returns a channel that receives a value soon after a
	// run was created in the store, or became claimable without a lease (a
	// release, a move back to a claimable status, a parked run woken), by a
	// handle that sends such notices. A store may also send one when a
	// parked run comes due, which no write announces (memory and Badger
	// keep an alarm for it; PostgreSQL's watch reads the parked index for
	// the next wake time, at least every 5s). Values coalesce: one may stand for many changes, and
	// one may come with no run to claim. The channel is closed when ctx
	// ends or the store is closed.
	WatchRunnable(ctx context.Context, p WatchRunnableParams) (<-chan struct{}, error)
}

// WatchRunnableParams configure RunnableWatcher.WatchRunnable; there is
// nothing to configure yet.
type WatchRunnableParams struct{}

// RunWatcher is optional: a store that tells whoever follows one run (an
// operator's page) soon after the run changed, so that it reads the run
// again at once rather than at its next poll. It is the per-run sibling of
// RunnableWatcher and makes the same promise: wake-ups are at least once
// and carry nothing, and the store stays the truth (the follower reads
// the run). Without it, followers poll (Follow does both); with it, they
// may poll at a long interval, since a notice may be lost with a
// connection.
type RunWatcher interface {
	// WatchRun returns a channel that receives a value soon after a write
	// to the run p.RunID (a create, an update, a rejected update's audit
	// event, a lease taken, renewed or released) by a handle that sends
	// such notices. Values coalesce: one may stand for many changes, and
	// one may come with no change (for instance after a lost connection),
	// or for another run. The run need not exist yet. A malformed RunID is
	// an ErrInvalidArgument. The channel is closed when ctx ends or the
	// store is closed.
	WatchRun(ctx context.Context, p WatchRunParams) (<-chan struct{}, error)
}

// WatchRunParams configure RunWatcher.WatchRun.
type WatchRunParams struct {
	// RunID is the run to watch.
	RunID string
}

// Clock tells the time. Adapters take one so that tests can control time.
type Clock interface {
	Now() time.Time
}
