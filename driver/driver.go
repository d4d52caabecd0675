package driver

import (
	"context"
	"time"

	"github.com/runstate/runstate"
)

// Driver is the storage a store author writes. Wrap turns it into a
// runstate.Store; the kit does everything else once, for every store: the
// context check, validation and normalisation, the FSM, compare-and-set and
// fencing decisions, audit events, paging and cursors, the claim-next
// answer, and errors.
//
// Every method receives input the kit has validated, and reads it only:
// queries, their slices and maps included. A driver reports the contract's
// conditions with runstate.ErrNotFound or runstate.ErrAlreadyExists (the kit words
// them), and returns any other failure as it is: errors that carry a
// runstate.Code (runstate.Unavailable, runstate.InvalidArgument) pass to the caller, and
// the kit reports errors without one as runstate.ErrUnavailable, with the
// driver's error as the cause. A driver must be safe for concurrent use.
//
// A driver that keeps values in memory stores copies of what it receives
// and returns copies of what it keeps (runstate.RunSnapshot.Clone), so that no
// caller shares its state. The one exception is Current: the kit never
// changes it and copies what it returns of it, so Modify may pass what it
// keeps as it is.
//
// The functions the kit passes to Modify, NextClaimer.ClaimNext and their
// batch forms (ModifyMany, ClaimNextMany) decide only: they never call the
// driver, block or fail, so a driver may call them holding a lock or
// inside a transaction; and they decide on the Current they are given
// alone, so that called again with the same Current they return the same
// Change.
type Driver interface {
	// Now returns the store's time, which stamps creations: the same clock
	// Modify reports (Current.Now) and Runnable and ClaimNext judge leases
	// by, so that one clock decides for every worker. A driver given a
	// clock (runstate.Clock: plugin.TestClock, conformance.ManualClock)
	// reads it in all four. Return it at any precision and in any location:
	// the kit passes it through Timestamp (UTC, whole microseconds) before
	// it stamps the run's created_at and updated_at and its created event,
	// so InsertParams carries the normalised time.
	Now(ctx context.Context) (time.Time, error)

	// Insert stores a new run with its created event (Seq 1) in one atomic
	// write. A run with the same RunID exists: runstate.ErrAlreadyExists, and
	// nothing written.
	Insert(ctx context.Context, p InsertParams) error

	// Modify is the atomic read-modify-write of one run: it reads the run's
	// snapshot, lease and last audit Seq, calls change with them and the
	// store's time, and stores the Change it returns, so that no other write
	// of the run comes in between (CAS-003, LEASE-002), also when the
	// Change only appends events: a refused write to a terminal run changes
	// no snapshot, so a guard on the snapshot's version alone lets two
	// refusals append at the same Seq (AUD-009). An empty Change
	// writes nothing. Unknown run: an error matching runstate.ErrNotFound.
	// change may run more than once (a store that retries optimistic
	// conflicts calls it afresh); only the last call's Change is stored.
	Modify(ctx context.Context, runID string, change func(Current) Change) error

	// Get returns the run's snapshot; unknown run: runstate.ErrNotFound.
	Get(ctx context.Context, runID string) (runstate.RunSnapshot, error)

	// ListRuns returns at most q.Limit runs that q.Filter matches and that
	// come after q.After (nil: from the start), in RunPosition order, as
	// one consistent read.
	ListRuns(ctx context.Context, q RunQuery) ([]runstate.RunSnapshot, error)

	// ListAudit returns at most q.Limit events of q.RunID with Seq greater
	// than q.AfterSeq, in Seq order. Unknown run: runstate.ErrNotFound.
	ListAudit(ctx context.Context, q AuditQuery) ([]runstate.AuditEvent, error)

	// Runnable returns at most q.Limit runs that q.Admits and that come
	// after q.After (nil: from the start), in claim order: the claim
	// candidate search. It reads the store at one instant, not in chunks
	// each read at its own (LEASE-020), and judges
	// leases at that instant by the clock Modify reports: the kit's
	// claim-next answers "nothing runnable" when Runnable finds nothing,
	// which is then true (LEASE-017), and claims the first candidate that
	// is still admitted when Modify reads it.
	//
	// The now q.Admits compares lease expiry with is the store's time, read
	// from the same clock as Now and Current.Now. A driver that reads
	// time.Now() here while Modify reads the clock it was given (a test
	// clock that certification moves) lists as held a lease the store's
	// clock has let expire, or as free one it still holds: claim-next then
	// answers "nothing runnable" while a run whose lease expired waits
	// (LEASE-010, LEASE-017), or offers candidates that Modify, on the
	// store's clock, finds still held, and gives up with
	// runstate.ErrUnavailable after passing over them all.
	Runnable(ctx context.Context, q RunnableQuery) ([]runstate.RunSnapshot, error)
}

// NextClaimer is a Driver's own claim-next, for stores that can search and
// claim in one atomic step (a lock, SKIP LOCKED). It is optional: without
// it, the kit calls Runnable and then Modify on each candidate in turn.
type NextClaimer interface {
	// ClaimNext finds the run that q.Admits and that comes first in claim
	// order and, in one atomic write, calls take with it and stores the
	// Change take returns. q.Claimant is set, q.Limit is 1 and q.After is
	// nil. It may pass over a run another call holds at that instant, but
	// it answers false (no run claimed) only when no run matching q was
	// claimable (LEASE-017).
	//
	// The run is admitted at the instant take receives as Current.Now, the
	// store's time from the clock Now and Modify read: ClaimNext compares
	// lease expiry with it, so a driver that judges candidates by
	// time.Now() while Current.Now comes from the clock it was given (a
	// test clock) offers take runs whose lease that clock says is live, or
	// passes over runs whose lease it says expired.
	//
	// take refuses a run q does not admit at Current.Now: it returns an
	// empty Change, and the driver stores nothing (an empty Change writes
	// nothing, as in Modify) and returns true and no error, since it did
	// offer a run. The kit then answers the caller runstate.ErrUnavailable
	// ("the store offered a run it may not claim"), with the refusal as the
	// cause, and claims nothing; that is the driver's mistake (most often
	// two clocks), never a contention to retry. Returning false instead
	// would make the kit answer "nothing runnable" (runstate.ErrNotFound),
	// which is untrue while that run waits. A driver that calls take again
	// (a retry after an optimistic conflict) is judged by take's last call.
	ClaimNext(ctx context.Context, q RunnableQuery, take func(Current) Change) (bool, error)
}

// LeaseReader is a Driver's plain read of a run's lease, for stores where
// Modify costs more than a read (a row lock). It is optional: without it,
// the kit reads the lease with a Modify that writes nothing.
type LeaseReader interface {
	// GetLease returns the run's lease state as Modify would read it now,
	// released or expired leases included (LEASE-021); unknown run:
	// runstate.ErrNotFound.
	GetLease(ctx context.Context, runID string) (LeaseState, error)
}

// InsertParams is a run to insert: its first snapshot and its created
// event, both complete, to store as they are. The kit has set the run's
// RunID, and the event's RunID (the run's) and Seq (1); their times are
// the store's Now through Timestamp.
type InsertParams struct {
	Run     runstate.RunSnapshot
	Created runstate.AuditEvent
}

// Current is one run as Modify read it.
type Current struct {
	Run   runstate.RunSnapshot
	Lease LeaseState
	// LastSeq is the Seq of the run's last audit event.
	LastSeq int64
	// Now is the store's time of this write (for a SQL store, its
	// server's), from the clock Now reads. The driver passes it as it reads
	// it: every decision the kit takes on it passes it through Timestamp
	// first, and every time the Change carries (updated_at, lease times,
	// event times) is so normalised.
	Now time.Time
}

// Change is what Modify stores. Fields left nil are unchanged.
type Change struct {
	// Run replaces the snapshot.
	Run *runstate.RunSnapshot
	// Lease replaces the lease.
	Lease *LeaseState
	// Events are appended to the audit trail as they are, complete: the
	// kit has set each one's RunID (the run's) and Seq, numbered
	// Current.LastSeq+1, +2, … from the Current it was given, so the last
	// one's Seq is the run's new LastSeq, and its Time (Current.Now through
	// Timestamp). The driver stores them unchanged and assigns nothing.
	// Seq numbers have no gaps, so a store may find event n at position n
	// of the trail. A change function called again (an optimistic retry)
	// numbers its events afresh from the Current of that call.
	Events []runstate.AuditEvent
}

// Empty reports whether c writes nothing.
func (c Change) Empty() bool { return c.Run == nil && c.Lease == nil && len(c.Events) == 0 }

// AuditQuery is a validated audit listing.
type AuditQuery struct {
	RunID    string
	AfterSeq int64
	Limit    int
}
