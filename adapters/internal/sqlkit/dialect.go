// Package sqlkit is the SQL adapters' (MySQL, PostgreSQL) algorithm, once:
// a driver.Driver on a database/sql pool that locks a run's row, writes a
// change (snapshot, audit rows, labels, lease columns) in one transaction
// with retries, claims the next run in rounds and reads listings. What an
// engine does differently, its statements, placeholders, locking clauses,
// error classification and the hooks that really differ, it gives as a
// Dialect.
package sqlkit

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// Dialect is what one engine brings. Every field is required unless its
// comment says otherwise.
type Dialect struct {
	// Name is the engine's name in messages ("mysql", "postgres").
	Name string
	// Statements are the engine's SQL, with its placeholders where fixed.
	Statements Statements
	// Bind readies a statement the kit assembled from fragments written
	// with ? placeholders: the engine's placeholders, and lists expanded
	// where the engine binds no arrays.
	Bind func(query string, args []any) (string, []any, error)
	// Union joins the parts of a claim-candidate or Runnable read (each a
	// SELECT in claim order, which may lock its rows) into one statement,
	// so that all parts read one snapshot of the table.
	Union func(parts []string) string
	// ReadByKey, optional, makes the reads of claim candidates and
	// listings two steps of one statement: their statements (UnleasedHead,
	// Takeable, Due, ListColumns and the List parts) select only the key,
	// run_id (and for candidates the clock, as now), and ReadByKey wraps
	// the statement of keys into one that reads each key's whole row (rows
	// says which columns) by primary key. So whatever plan the engine
	// picks, no sort or temporary table of it holds a snapshot: MariaDB
	// keeps such a table in its Aria engine, not in memory. locking: the
	// parts lock their rows, and the read of the rows reads them locked.
	ReadByKey func(keys string, rows RowsOf, locking bool) string
	// Retryable reports an error after which the server rolled the
	// transaction back and running it again is safe (a deadlock).
	Retryable func(error) bool
	// Interpret maps the engine's errors to the contract's (runstate.Error
	// codes); errors that are already the contract's, or a context's, pass.
	Interpret func(error) error
	// LockTimedOut reports the error of a lock wait that reached the
	// bound Statements.SetLockWait set.
	LockTimedOut func(error) bool
	// LockWaitArg is the argument of Statements.SetLockWait for a bound
	// of limit.
	LockWaitArg func(limit time.Duration) any
	// OnRunnable, optional, runs in the transaction of a write that makes
	// a run claimable without a lease (created so, or moved there from a
	// lease or another status): PostgreSQL announces it with NOTIFY. A
	// batch runs it once; a lean write runs it after its commit, on the
	// pool.
	OnRunnable func(ctx context.Context, tx sqlx.ExecerContext) error
	// UnleasedByStatus makes the kit read the head of the unleased queue
	// one status at a time, a part per status (Statements.UnleasedHead and
	// ListUnleased then bind one status, not a list), and merge the parts
	// in claim order: an index that leads with the status gives each part
	// in claim order by an equality, which a planner reads in order even
	// before it has statistics of the table (PostgreSQL).
	UnleasedByStatus bool
	// LeanArgs, optional, readies a lean statement (Statements.Lean's
	// WriteRuns or InsertRuns) and its arguments for the engine, which may
	// choose another statement for them and add arguments of its own:
	// MySQL sends each Columns as one JSON text of rows, a write's tag, and
	// a write of one row as scalars to a statement of its own. Without it,
	// each column of a Columns binds as an array of its own (PostgreSQL).
	LeanArgs func(query string, args []any) (string, []any, error)
	// MaxParams and MaxBulkBytes bound one statement of a Bulk: its bound
	// values, and the bytes of its text values (the engine's packet).
	// A row larger than MaxBulkBytes still goes alone.
	MaxParams, MaxBulkBytes int
}

// RowsOf names the columns a read returns (Dialect.ReadByKey).
type RowsOf int

const (
	// CandidateRows: a claim candidate's row, as Statements.LockRun reads it.
	CandidateRows RowsOf = iota
	// ListingRows: snapshot, created_at and run_id.
	ListingRows
)

// Statements are a dialect's SQL. Fixed statements are ready to run; the
// fragments a statement is assembled from use ? placeholders and pass
// through Dialect.Bind. Every statement's arguments come in the order its
// comment gives; a Clause says which of its values each placeholder binds.
type Statements struct {
	// Now reads the clock (clock).
	Now string
	// LockRun reads and locks a run's row with the database time (clock,
	// run_id), as the columns of row.
	LockRun string
	// GetRun reads a run's snapshot (run_id).
	GetRun string
	// GetLease reads a run's lease columns without a lock (run_id).
	GetLease string

	// InsertRun (run_id, workflow_name, status, priority, created_at,
	// version, last_seq, snapshot, queue).
	InsertRun string
	// InsertLabel (run_id, key, value, created_at).
	InsertLabel string
	// InsertEvent (run_id, seq, event).
	InsertEvent string
	// DeleteLabels (run_id).
	DeleteLabels string
	// UpdateSeq (last_seq, run_id).
	UpdateSeq string

	// A write changes the run's row in one of two ways. With
	// UpdateRunAndLease set, a change is one UPDATE that checks the locked
	// row's version and lease token: UpdateLease then also sets last_seq
	// and checks them. Without, the lease columns are updated on their
	// own (UpdateLease, then UpdateSeq for events) and a run change is
	// UpdateRun after them.

	// UpdateLease (lease_token, lease_worker, lease_incarnation,
	// lease_acquired_at, lease_expires_at, lease_released, queue, run_id);
	// with UpdateRunAndLease set: (…, queue, last_seq, run_id, version,
	// locked lease_token).
	UpdateLease string
	// UpdateRun (workflow_name, status, priority, version, last_seq,
	// snapshot, queue, run_id, locked version, new lease_token); unused
	// with UpdateRunAndLease set.
	UpdateRun string
	// UpdateRunAndLease, optional (workflow_name, status, priority,
	// version, last_seq, snapshot, queue, lease_token, lease_worker,
	// lease_incarnation, lease_acquired_at, lease_expires_at,
	// lease_released, run_id, locked version, locked lease_token).
	UpdateRunAndLease string

	// RunExists, optional, counts a run's rows (run_id): when set,
	// ListAudit runs it and ListEvents in one transaction; else ListEvents
	// reads both at once, no row for a missing run and one NULL event for
	// a run with no events after the seq.
	RunExists string
	// ListEvents reads events after a seq, in seq order (run_id, seq, limit).
	ListEvents string

	// Batches (batch.go). LockRuns reads and locks runs' rows in run_id
	// order with the database time (clock, run_ids), as the columns of
	// row; ExistingRuns reads which of run_ids exist (run_ids);
	// DeleteLabelsOf drops the labels of runs (run_ids). Each binds its
	// run_ids as one list (?), which Dialect.Bind expands or binds as an
	// array.
	LockRuns, ExistingRuns, DeleteLabelsOf string
	// UpdateRuns, optional, writes many locked rows in one statement, each
	// row (run_id, workflow_name, status, priority, version, last_seq,
	// snapshot, queue, lease_token, lease_worker, lease_incarnation,
	// lease_acquired_at, lease_expires_at, lease_released, locked
	// version, locked lease_token) and checked by the last two. Without
	// it a batch writes each row as Modify does.
	UpdateRuns Bulk
	// ClaimSkippingMany is ClaimSkipping for up to (limit) runs of each
	// part.
	ClaimSkippingMany string

	// SetLockWait bounds the waits for row locks of claim-next's waiting
	// pass (Dialect.LockWaitArg); ResetLockWait, optional, ends the bound
	// after the lock when it would outlive the transaction.
	SetLockWait, ResetLockWait string

	// Lean, optional, makes every write one statement (lean.go).
	Lean LeanStatements

	// ListRuns fragments: ListColumns [hint] WhereTrue [ByStatus]
	// [ByWorkflow] [HasLabel…] [CreatedFrom] [CreatedBefore]
	// [AfterCreated] ByCreatedLimit. The statement reads snapshot,
	// created_at and run_id (with Dialect.ReadByKey, run_id).
	ListColumns   string
	ListHints     IndexHints
	WhereTrue     string
	ByStatus      string // (status)
	CreatedFrom   string // (time)
	CreatedBefore string // (time)
	// ByWorkflow (workflow_name), HasLabel (key, value), AfterCreated
	// (created_at, run_id): the filters of listings and claims.
	ByWorkflow, HasLabel, AfterCreated Clause
	// ByCreatedLimit orders by (created_at, run_id) and limits (limit).
	ByCreatedLimit string

	// Claim-next candidates: UnleasedHead (clock, statuses; with
	// Dialect.UnleasedByStatus, clock, status) and Takeable
	// (clock, statuses, worker, incarnation), each followed by the filters
	// and a locking tail, ClaimSkipping (lock, passing over rows other
	// transactions hold) or ClaimReading (a plain read).
	UnleasedHead, Takeable      Clause
	ClaimSkipping, ClaimReading string
	// Due reads the parked runs (queue 3) whose wake time has come
	// (clock, statuses), as claim candidates; ListDue (clock, statuses)
	// lists them in Runnable (WAKE-001). Each is followed by the filters
	// and the tail of its kind.
	Due, ListDue Clause

	// Runnable's parts: ListUnleased (statuses; with
	// Dialect.UnleasedByStatus, status), ListExpired (clock,
	// statuses), ListEarlierLife (worker, incarnation, statuses), each
	// followed by the filters, [AfterClaimPos (priority, created_at,
	// run_id)] and ByClaimOrderLimit (limit).
	ListUnleased, ListExpired, ListEarlierLife Clause
	AfterClaimPos                              Clause
	ByClaimOrderLimit                          string
}

// Bulk is a statement of many rows: Head, then Row once per row joined by
// Sep, then Tail. Row has a ? per value of a row; the kit binds rows in
// order and splits them into statements within Dialect.MaxParams and
// MaxBulkBytes.
type Bulk struct {
	Head, Row, Sep, Tail string
}

// IndexHints pin the index a ListRuns query reads (MySQL's FORCE INDEX),
// by its filter; empty where the planner chooses well.
type IndexHints struct {
	ByStatus, ByWorkflow, ByCreated string
}

// Clause is a fragment of SQL whose placeholders bind values the kit
// gives in a fixed order: the i-th placeholder binds values[Bind[i]]. An
// engine may compare one value twice (MySQL: a text and its length) or
// not at all where a row comparison does the work (PostgreSQL).
type Clause struct {
	SQL  string
	Bind []int
}

// Values returns the sequence Bind asks for (0, 1, …, n-1), for a clause
// that binds each of n values once.
func Values(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// write appends the clause to b and its arguments to args.
func (c Clause) write(b *strings.Builder, args []any, values ...any) []any {
	b.WriteString(c.SQL)
	for _, i := range c.Bind {
		args = append(args, values[i])
	}
	return args
}

// Statement is an assembled statement with its arguments.
type Statement struct {
	Query string
	Args  []any
}
