package postgres

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

// SQL of the adapter, in one place. Values are always bound parameters;
// the only text assembled at run time is a repetition of fixed fragments
// (one EXISTS per label, one part per kind of claim candidate), never
// input. Statements are written with ? and numbered ($1, $2, …) by
// numbered, once for the fixed ones.

// numbered turns the ? placeholders of a statement into PostgreSQL's $n.
func numbered(query string) string { return sqlx.Rebind(sqlx.DOLLAR, query) }

// clock is the database clock, or the time of the store's Options.Clock
// when a test set one (a bound parameter that is NULL in production).
// statement_timestamp is one instant for the whole statement.
const clock = `COALESCE(CAST(? AS timestamptz), statement_timestamp())`

// writeClock is clock in the lean write (qWriteRuns), which numbers its
// parameters by hand: the clock is its last.
const writeClock = `COALESCE(CAST($20 AS timestamptz), statement_timestamp())`

// The queue column holds driver.QueueOf of the run: where claims look for
// it, so that each claim candidate search reads one partial index. These
// are its numbers as SQL text; the partial indexes name the same ones.
const (
	inQueueUnleased = "1"
	inQueueLeased   = "2"
	inQueueParked   = "3"
)

// runColumns are read for every write: the row is locked while the store
// decides, with the database time of the decision.
const runColumns = `r.run_id, r.version, r.last_seq, r.snapshot, r.lease_token, r.lease_worker, r.lease_incarnation,
	r.lease_acquired_at, r.lease_expires_at, r.lease_released, ` + clock + ` AS now, ` + rowVersion + ` AS row_version`

// rowVersion is the version of a row as read: its xmin, the transaction
// that wrote this version of it, which every UPDATE of the row changes (a
// lease-only one too), and never back within a lean write's read and write.
const rowVersion = `CAST(CAST(r.xmin AS text) AS bigint)`

var (
	qNow      = numbered(`SELECT ` + clock)
	qLockRun  = numbered(`SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id = ? FOR UPDATE`)
	qGetRun   = numbered(`SELECT snapshot FROM runstate_runs WHERE run_id = ?`)
	qGetLease = numbered(`SELECT r.lease_token, r.lease_worker, r.lease_incarnation, r.lease_acquired_at, r.lease_expires_at, r.lease_released
		FROM runstate_runs r WHERE r.run_id = ?`)

	qInsertRun = numbered(`INSERT INTO runstate_runs
		(run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	// A change of both the run and its lease (a claim, a release that ends
	// the run) is one row version: PostgreSQL writes a new version of the
	// row, and an entry in each of its indexes, per UPDATE.
	qUpdateRunAndLease = numbered(`UPDATE runstate_runs SET workflow_name = ?, status = ?, priority = ?, version = ?, last_seq = ?,
		snapshot = ?, queue = ?, lease_token = ?, lease_worker = ?, lease_incarnation = ?, lease_acquired_at = ?, lease_expires_at = ?,
		lease_released = ? WHERE run_id = ? AND version = ? AND lease_token = ?`)
	qUpdateSeq   = numbered(`UPDATE runstate_runs SET last_seq = ? WHERE run_id = ?`)
	qUpdateLease = numbered(`UPDATE runstate_runs SET lease_token = ?, lease_worker = ?, lease_incarnation = ?,
		lease_acquired_at = ?, lease_expires_at = ?, lease_released = ?, queue = ?, last_seq = ?
		WHERE run_id = ? AND version = ? AND lease_token = ?`)

	// Workers of the same schema listen on one channel (watch.go); the
	// payload names the schema, so that a database's schemas stay apart.
	// The notice is sent at commit, once per transaction.
	qNotifyRunnable = `SELECT pg_notify('` + runnableChannel + `', current_schema())`
	qListen         = `LISTEN ` // and the channel
	// The parked index's news for a watch of runnable runs, in the
	// database's time: the seconds until the earliest wake time to come
	// (NULL: none), whether a parked run came due since the previous read
	// ($1) and is still parked, and the time of this read.
	qParkedNews = `SELECT EXTRACT(EPOCH FROM (SELECT min(wake_at) FROM runstate_runs WHERE queue = ` + inQueueParked +
		` AND wake_at > statement_timestamp()) - statement_timestamp()),
		EXISTS (SELECT 1 FROM runstate_runs WHERE queue = ` + inQueueParked + ` AND wake_at > $1 AND wake_at <= statement_timestamp()),
		statement_timestamp()`
	qCurrentSchema = `SELECT current_schema()`

	qDeleteLabels = numbered(`DELETE FROM runstate_labels WHERE run_id = ?`)
	qInsertLabel  = numbered(`INSERT INTO runstate_labels (run_id, label_key, label_value, created_at) VALUES (?, ?, ?, ?)`)
	qInsertEvent  = numbered(`INSERT INTO runstate_audit (run_id, seq, event) VALUES (?, ?, ?)`)
	// AUD-006: events after a Seq, in Seq order, from the primary key; with
	// the run, in one snapshot: no row when the run does not exist, one
	// NULL event when it has none after the Seq. Numbered by hand: the
	// run_id is bound first.
	qListEvents = `SELECT a.event FROM runstate_runs r LEFT JOIN LATERAL
		(SELECT event FROM runstate_audit WHERE run_id = r.run_id AND seq > $2 ORDER BY seq LIMIT $3) a ON TRUE
		WHERE r.run_id = $1`

	// Batches (sqlkit's batch.go). Rows are locked in run_id order, so
	// that batches sharing runs wait for each other, never deadlock. The
	// run_ids are one text[].
	qLockRuns       = `SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id = ANY (CAST(? AS text[])) ORDER BY r.run_id FOR UPDATE`
	qExistingRuns   = `SELECT run_id FROM runstate_runs WHERE run_id = ANY (CAST(? AS text[]))`
	qDeleteLabelsOf = `DELETE FROM runstate_labels WHERE run_id = ANY (CAST(? AS text[]))`

	// The waiting pass of claim-next waits for a row lock at most this
	// long (a text such as 3000ms), for the rest of its transaction.
	qSetLockWait = numbered(`SELECT set_config('lock_timeout', ?, true)`)
)

// Lean writes (sqlkit.LeanStatements): each write is one statement of
// fixed text that binds whole columns as arrays (unnest), so that the
// server prepares and plans it once per connection whatever the batch.
var (
	qReadRuns = numbered(`SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id = ANY (CAST(? AS text[]))`)
	// The UPDATE writes a row only where its xmin is still the version
	// read (or known: sqlkit's known.go), and a known row only where the
	// database time is not earlier than the one its change was decided on;
	// the events of the rows it wrote go in with it, so a row lost to
	// another writer leaves no event. An empty snapshot keeps the one
	// stored (a lease-only change). A row another transaction holds is
	// passed over (free locks the others, SKIP LOCKED), as one written
	// meanwhile: it is read again, and in the end written the locking way,
	// which waits for it. So the statement never waits for a row lock, and
	// cannot deadlock. It returns each row's new xmin, and its time.
	qWriteRuns = `WITH v AS (
		SELECT * FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[]), CAST($4 AS integer[]),
			CAST($5 AS bigint[]), CAST($6 AS bigint[]), CAST($7 AS text[]), CAST($8 AS smallint[]), CAST($9 AS bigint[]),
			CAST($10 AS text[]), CAST($11 AS text[]), CAST($12 AS timestamptz[]), CAST($13 AS timestamptz[]),
			CAST($14 AS boolean[]), CAST($15 AS bigint[]), CAST($16 AS timestamptz[]))
		AS v (run_id, workflow_name, status, priority, version, last_seq, snapshot, queue, lease_token, lease_worker,
			lease_incarnation, lease_acquired_at, lease_expires_at, lease_released, row_version, not_before)
	), free AS (
		SELECT run_id FROM runstate_runs WHERE run_id = ANY (CAST($1 AS text[])) FOR UPDATE SKIP LOCKED
	), written AS (
		UPDATE runstate_runs r SET workflow_name = v.workflow_name, status = v.status, priority = v.priority,
			version = v.version, last_seq = v.last_seq, snapshot = COALESCE(NULLIF(v.snapshot, ''), r.snapshot), queue = v.queue,
			lease_token = v.lease_token, lease_worker = v.lease_worker, lease_incarnation = v.lease_incarnation,
			lease_acquired_at = v.lease_acquired_at, lease_expires_at = v.lease_expires_at, lease_released = v.lease_released
		FROM v JOIN free ON free.run_id = v.run_id
		WHERE r.run_id = v.run_id AND r.xmin = CAST(CAST(v.row_version AS text) AS xid)
			AND (v.not_before IS NULL OR ` + writeClock + ` >= v.not_before)
		RETURNING r.run_id, ` + rowVersion + ` AS row_version, ` + writeClock + ` AS now
	), events AS (
		INSERT INTO runstate_audit (run_id, seq, event)
		SELECT e.run_id, e.seq, e.event FROM unnest(CAST($17 AS text[]), CAST($18 AS bigint[]), CAST($19 AS text[])) AS e (run_id, seq, event)
		WHERE e.run_id IN (SELECT run_id FROM written)
	)
	SELECT run_id, row_version, now FROM written`
	// A run_id that exists fails the INSERT of runs on its key, and with
	// it the whole statement. Where $17 says so, it announces runnable
	// runs as qNotifyRunnable does: a notice is sent at the commit.
	qInsertRuns = `WITH runs AS (
		INSERT INTO runstate_runs (run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue)
		SELECT * FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[]), CAST($4 AS integer[]),
			CAST($5 AS timestamptz[]), CAST($6 AS bigint[]), CAST($7 AS bigint[]), CAST($8 AS text[]), CAST($9 AS smallint[]))
	), labels AS (
		INSERT INTO runstate_labels (run_id, label_key, label_value, created_at)
		SELECT * FROM unnest(CAST($10 AS text[]), CAST($11 AS text[]), CAST($12 AS text[]), CAST($13 AS timestamptz[]))
	), events AS (
		INSERT INTO runstate_audit (run_id, seq, event)
		SELECT * FROM unnest(CAST($14 AS text[]), CAST($15 AS bigint[]), CAST($16 AS text[]))
	)
	SELECT pg_notify('` + runnableChannel + `', current_schema()) WHERE CAST($17 AS boolean)`
)

// Listing and claim fragments, combined by the kit (sqlkit.Driver.ListSQL,
// ClaimCandidates, Runnable). ListRuns
// orders by (created_at, run_id) (LIST-005) and continues after a keyset
// position (LIST-006); claim order is priority, created_at, run_id
// (LEASE-003). Statements built of these are numbered when assembled.
const (
	fromRuns     = ` FROM runstate_runs r`
	byCreated    = ` ORDER BY r.created_at, r.run_id`
	afterCreated = ` AND (r.created_at, r.run_id) > (?, ?)`
	hasLabel     = ` AND EXISTS (SELECT 1 FROM runstate_labels l WHERE l.run_id = r.run_id AND l.label_key = ? AND l.label_value = ?)`
	byWorkflow   = ` AND r.workflow_name = ?`
	byStatus     = ` AND r.status = ?`
	// leasedInStatuses filters leased runs by status as an expression, not
	// the column, so that the server never reads by_status for it: ANDed
	// with the lease indexes, by_status gave every queued run the table
	// held, and the versions of them not yet vacuumed (a claim's read took
	// 1.6 ms with 10,000 runs, against 0.2 ms from the lease indexes).
	leasedInStatuses = ` AND (r.status || '') = ANY (CAST(? AS text[]))`
	byClaimOrder     = ` ORDER BY r.priority DESC, r.created_at, r.run_id`
	afterClaimPos    = ` AND (r.priority < ? OR (r.priority = ? AND (r.created_at, r.run_id) > (?, ?)))`
	createdFrom      = ` AND r.created_at >= ?`
	createdBefore    = ` AND r.created_at < ?`
	whereTrue        = ` WHERE TRUE`
	limitRows        = ` LIMIT ?`

	// Listings read snapshots with their order keys.
	listColumns = `SELECT r.snapshot, r.created_at, r.run_id` + fromRuns

	// Claim candidates, read whole in one statement of two parts: the head
	// of the unleased queue (the claim_order partial index, in order, no
	// sorting), and the leased runs a claim may take, those whose lease has
	// expired (lease_expiry) or that an earlier incarnation of the
	// claimant's worker holds (by_lease_owner). The first pass locks them,
	// skipping rows other transactions hold (SKIP LOCKED); the second, run
	// only when the first finds nothing, reads them without locking and
	// then locks the best by its key (qLockRun). A run is claimed only
	// under its row lock, so concurrent claimers never share a run
	// (LEASE-002). A lease has expired at expires_at <= now (LEASE-018).
	qUnleasedHead = `SELECT ` + runColumns + fromRuns + ` WHERE r.queue = ` + inQueueUnleased + byStatus
	qTakeable     = `SELECT ` + runColumns + fromRuns + ` WHERE r.queue = ` + inQueueLeased + leasedInStatuses +
		` AND (r.lease_expires_at <= ` + clock + ` OR ` + earlierLife + `)`
	// Parked runs are claimable from their wake time on (WAKE-001): the
	// parked index gives the due ones, sorted into claim order (they are
	// the few whose time came since the last claims).
	qDue             = `SELECT ` + runColumns + fromRuns + ` WHERE r.queue = ` + inQueueParked + ` AND r.wake_at <= ` + clock + leasedInStatuses
	forClaimSkipping = byClaimOrder + ` LIMIT 1 FOR UPDATE OF r SKIP LOCKED`
	forClaimReading  = byClaimOrder + ` LIMIT 1`
	// A batch claim locks up to its size of each kind.
	forClaimSkippingMany = byClaimOrder + ` LIMIT ? FOR UPDATE OF r SKIP LOCKED`
	// A lean claim reads up to its size of each kind, without locking.
	forClaimReadingMany = byClaimOrder + ` LIMIT ?`

	// Runnable lists the same three kinds of run, each in claim order.
	qListUnleased    = listColumns + ` WHERE r.queue = ` + inQueueUnleased + byStatus
	qListExpired     = listColumns + ` WHERE r.queue = ` + inQueueLeased + ` AND r.lease_expires_at <= ` + clock + leasedInStatuses
	qListEarlierLife = listColumns + ` WHERE r.queue = ` + inQueueLeased + ` AND (` + earlierLife + `)` + leasedInStatuses
	qListDue         = listColumns + ` WHERE r.queue = ` + inQueueParked + ` AND r.wake_at <= ` + clock + leasedInStatuses

	// earlierLife is a lease of worker ? held by an incarnation other than
	// ? (both given twice), as two ranges of by_lease_owner: a B-tree
	// cannot search for <>, and would walk every lease the worker's
	// current incarnation holds.
	earlierLife = `(r.lease_worker = ? AND r.lease_incarnation < ?) OR (r.lease_worker = ? AND r.lease_incarnation > ?)`
)

// Statements of many rows (sqlkit.Bulk), numbered when assembled. One
// UPDATE writes a batch's rows from a VALUES list, checking each row's
// locked version and lease token as qUpdateRunAndLease does.
var (
	bulkUpdateRuns = sqlkit.Bulk{
		Head: `UPDATE runstate_runs r SET workflow_name = v.workflow_name, status = v.status, priority = v.priority, version = v.version,
		last_seq = v.last_seq, snapshot = v.snapshot, queue = v.queue, lease_token = v.lease_token, lease_worker = v.lease_worker,
		lease_incarnation = v.lease_incarnation, lease_acquired_at = v.lease_acquired_at, lease_expires_at = v.lease_expires_at,
		lease_released = v.lease_released FROM (VALUES `,
		Row: `(CAST(? AS text), CAST(? AS text), CAST(? AS text), CAST(? AS integer), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text),
		CAST(? AS smallint), CAST(? AS bigint), CAST(? AS text), CAST(? AS text), CAST(? AS timestamptz), CAST(? AS timestamptz),
		CAST(? AS boolean), CAST(? AS bigint), CAST(? AS bigint))`,
		Sep: `, `,
		Tail: `) AS v (run_id, workflow_name, status, priority, version, last_seq, snapshot, queue, lease_token, lease_worker,
		lease_incarnation, lease_acquired_at, lease_expires_at, lease_released, locked_version, locked_token)
		WHERE r.run_id = v.run_id AND r.version = v.locked_version AND r.lease_token = v.locked_token`,
	}
)

// Migrations, under a transaction-scoped advisory lock of the database
// (one process migrates a schema at a time).
var (
	qMigrationLockWait     = `SELECT set_config('lock_timeout', '60s', true)`
	qMigrationLock         = numbered(`SELECT pg_advisory_xact_lock(hashtext(?))`)
	qSchemaExists          = numbered(`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ?)`)
	qCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS runstate_schema_migrations (
		version integer NOT NULL PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT statement_timestamp())`
	qAppliedMigrations = `SELECT version FROM runstate_schema_migrations ORDER BY version`
	qRecordMigration   = numbered(`INSERT INTO runstate_schema_migrations (version, name) VALUES (?, ?)`)
)

// Schemas (Options.Schema), followed by the quoted name.
const (
	qCreateSchema       = `CREATE SCHEMA `
	qCreateSchemaIfNone = `CREATE SCHEMA IF NOT EXISTS `
	qDropSchema         = `DROP SCHEMA IF EXISTS `
	cascade             = ` CASCADE`
)

// dialect is the adapter's SQL for the kit (without OnRunnable, which Open
// sets for Options.NotifyRunnable). Statuses are bound as one text[].
var dialect = sqlkit.Dialect{
	Name: "postgres",
	Statements: sqlkit.Statements{
		Now: qNow, LockRun: qLockRun, GetRun: qGetRun, GetLease: qGetLease,
		InsertRun: qInsertRun, InsertLabel: qInsertLabel, InsertEvent: qInsertEvent, DeleteLabels: qDeleteLabels,
		UpdateSeq: qUpdateSeq, UpdateLease: qUpdateLease, UpdateRunAndLease: qUpdateRunAndLease,
		ListEvents: qListEvents,

		LockRuns: qLockRuns, ExistingRuns: qExistingRuns, DeleteLabelsOf: qDeleteLabelsOf,
		UpdateRuns:        bulkUpdateRuns,
		ClaimSkippingMany: forClaimSkippingMany,
		SetLockWait:       qSetLockWait, // for the rest of the transaction, which writes only the row it locks
		Lean: sqlkit.LeanStatements{ReadRuns: qReadRuns, WriteRuns: qWriteRuns, InsertRuns: qInsertRuns,
			ClaimReadingMany: forClaimReadingMany},

		ListColumns:    listColumns,
		WhereTrue:      whereTrue,
		ByStatus:       byStatus,
		CreatedFrom:    createdFrom,
		CreatedBefore:  createdBefore,
		ByWorkflow:     sqlkit.Clause{SQL: byWorkflow, Bind: sqlkit.Values(1)},
		HasLabel:       sqlkit.Clause{SQL: hasLabel, Bind: sqlkit.Values(2)},
		AfterCreated:   sqlkit.Clause{SQL: afterCreated, Bind: sqlkit.Values(2)},
		ByCreatedLimit: byCreated + limitRows,

		UnleasedHead:  sqlkit.Clause{SQL: qUnleasedHead, Bind: sqlkit.Values(2)},
		Takeable:      sqlkit.Clause{SQL: qTakeable, Bind: []int{0, 1, 0, 2, 3, 2, 3}},
		Due:           sqlkit.Clause{SQL: qDue, Bind: []int{0, 0, 1}},
		ClaimSkipping: forClaimSkipping,
		ClaimReading:  forClaimReading,

		ListUnleased:      sqlkit.Clause{SQL: qListUnleased, Bind: sqlkit.Values(1)},
		ListExpired:       sqlkit.Clause{SQL: qListExpired, Bind: sqlkit.Values(2)},
		ListEarlierLife:   sqlkit.Clause{SQL: qListEarlierLife, Bind: []int{0, 1, 0, 1, 2}},
		ListDue:           sqlkit.Clause{SQL: qListDue, Bind: []int{0, 1}},
		AfterClaimPos:     sqlkit.Clause{SQL: afterClaimPos, Bind: []int{0, 0, 1, 2}},
		ByClaimOrderLimit: byClaimOrder + limitRows,
	},
	Bind:  func(query string, args []any) (string, []any, error) { return numbered(query), args, nil },
	Union: withParts,
	// The protocol's bound on a statement's parameters; PostgreSQL takes
	// a message of up to 1 GB.
	MaxParams:    65535,
	MaxBulkBytes: 64 << 20,
	// claim_by_status leads with the status: a part per status reads it
	// in claim order (no sort), even on a table the server has not yet
	// analysed, where a list of statuses led it to sort the whole queue.
	UnleasedByStatus: true,
	Retryable:        retryable,
	Interpret:        interpretError,
	LockTimedOut:     func(err error) bool { return hasState(err, stateLockNotAvailable) },
	LockWaitArg:      func(limit time.Duration) any { return strconv.FormatInt(limit.Milliseconds(), 10) + "ms" },
}

// withParts is one statement of parts: they are common table expressions
// of one statement, so the whole reads one snapshot of the table, and
// each part may lock its rows (a locking clause is not allowed on a part
// of a UNION itself).
func withParts(parts []string) string {
	var b strings.Builder
	b.WriteString("WITH ")
	for i, part := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "part%d AS (%s)", i, part)
	}
	for i := range parts {
		if i > 0 {
			b.WriteString(" UNION ALL")
		}
		fmt.Fprintf(&b, " SELECT * FROM part%d", i)
	}
	return b.String()
}
