package mysql

import (
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate/adapters/internal/sqlkit"
)

// SQL of the adapter, in one place. Values are always bound parameters;
// the only text assembled at run time is a repetition of fixed fragments
// (one placeholder per status, one EXISTS per label), never input.

// clock is the database clock, or the time of the store's Options.Clock
// when a test set one (a bound parameter that is NULL in production).
const clock = `CAST(COALESCE(?, UTC_TIMESTAMP(6)) AS DATETIME(6))`

// The queue column holds driver.QueueOf of the run: where claims look for
// it, so that each claim candidate search reads one index range. These are
// its numbers as SQL text, for the statements below.
const (
	inQueueUnleased = "1"
	inQueueLeased   = "2"
	inQueueParked   = "3"
)

const (
	qNow = `SELECT ` + clock

	// runColumns are read for every write: the row is locked while the
	// store decides, with the database time of the decision.
	runColumns = rowColumns + `, ` + clock + ` AS now, r.row_version`
	rowColumns = `r.run_id, r.version, r.last_seq, r.snapshot, r.lease_token, r.lease_worker, r.lease_incarnation,
		r.lease_acquired_at, r.lease_expires_at, r.lease_released`

	qLockRun  = `SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id = ? FOR UPDATE`
	qGetRun   = `SELECT snapshot FROM runstate_runs WHERE run_id = ?`
	qGetLease = `SELECT r.lease_token, r.lease_worker, r.lease_incarnation, r.lease_acquired_at, r.lease_expires_at, r.lease_released
		FROM runstate_runs r WHERE r.run_id = ?`
	qRunExists = `SELECT COUNT(*) FROM runstate_runs WHERE run_id = ?`

	qInsertRun = `INSERT INTO runstate_runs
		(run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qUpdateRun = `UPDATE runstate_runs SET workflow_name = ?, status = ?, priority = ?, version = ?, last_seq = ?,
		snapshot = ?, queue = ?, row_version = row_version + 1 WHERE run_id = ? AND version = ? AND lease_token = ?`
	qUpdateSeq   = `UPDATE runstate_runs SET last_seq = ?, row_version = row_version + 1 WHERE run_id = ?`
	qUpdateLease = `UPDATE runstate_runs SET lease_token = ?, lease_worker = ?, lease_incarnation = ?,
		lease_acquired_at = ?, lease_expires_at = ?, lease_released = ?, queue = ?, row_version = row_version + 1 WHERE run_id = ?`

	qDeleteLabels = `DELETE FROM runstate_labels WHERE run_id = ?`
	qInsertLabel  = `INSERT INTO runstate_labels (run_id, label_key, label_value, created_at) VALUES (?, ?, ?, ?)`
	qInsertEvent  = `INSERT INTO runstate_audit (run_id, seq, event) VALUES (?, ?, ?)`
	// Batches (sqlkit's batch.go). Rows are locked in run_id order (the
	// primary key's), so that batches sharing runs wait for each other,
	// never deadlock. IN (?) lists are expanded, one placeholder per run.
	qLockRuns       = `SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id IN (?) ORDER BY r.run_id FOR UPDATE`
	qExistingRuns   = `SELECT run_id FROM runstate_runs WHERE run_id IN (?)`
	qDeleteLabelsOf = `DELETE FROM runstate_labels WHERE run_id IN (?)`

	qListEvents = `SELECT event FROM runstate_audit WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?` // AUD-006

	// Listing fragments, combined by the kit (sqlkit.Driver.ListSQL, Runnable). Text filters
	// compare lengths too: MySQL's binary collations pad with spaces, so
	// "deploy " = "deploy" unless the lengths differ. ListRuns orders by
	// (created_at, run_id) (LIST-005) and continues after a keyset position
	// (LIST-006); claim order is priority, created_at, run_id (LEASE-003).
	fromRuns      = ` FROM runstate_runs r`
	byCreated     = ` ORDER BY r.created_at, r.run_id`
	afterCreated  = ` AND (r.created_at > ? OR (r.created_at = ? AND r.run_id > ?))`
	hasLabel      = ` AND EXISTS (SELECT 1 FROM runstate_labels l WHERE l.run_id = r.run_id AND l.label_key = ? AND l.label_value = ? AND LENGTH(l.label_value) = LENGTH(?))`
	byWorkflow    = ` AND r.workflow_name = ? AND LENGTH(r.workflow_name) = LENGTH(?)`
	byClaimOrder  = ` ORDER BY r.priority DESC, r.created_at, r.run_id`
	afterClaimPos = ` AND (r.priority < ? OR (r.priority = ? AND (r.created_at > ? OR (r.created_at = ? AND r.run_id > ?))))`

	// Claim candidates, read whole in one statement of two parts: the head
	// of the unleased queue (claim_order, no sorting), and the leased runs
	// a claim may take, those whose lease has expired (lease_expiry) or
	// that an earlier incarnation of the claimant's worker holds
	// (by_lease_owner), merged by the server from both indexes and sorted
	// (they are few). One part for the leased runs, not one per kind, saves
	// the server a fifth of a claim's CPU (docs/mysql.md).
	// The first pass locks them, skipping rows other transactions hold (SKIP
	// LOCKED); the second, run only when the first finds nothing, reads them
	// without locking and then locks the best by its key (qLockRun). A run
	// is claimed only under its row lock, so concurrent claimers never share
	// a run (LEASE-002). A lease has expired at expires_at <= now (LEASE-018).
	// The indexes are pinned: the optimizer may otherwise prefer a scan
	// and a sort for the head, or walk claim_order through every leased
	// run for the leased part, to avoid a sort. The parts read keys, with
	// the database time of the read (candidateKeys); readByKey reads the
	// rows.
	qUnleasedHead = `SELECT ` + candidateKeys + fromRuns + ` FORCE INDEX (claim_order) WHERE r.queue = ` + inQueueUnleased + ` AND r.status IN (?)`
	qTakeable     = `SELECT ` + candidateKeys + fromRuns + ` FORCE INDEX (lease_expiry, by_lease_owner) WHERE r.queue = ` + inQueueLeased +
		` AND r.status IN (?) AND (r.lease_expires_at <= ` + clock + ` OR (r.lease_worker = ? AND r.lease_incarnation <> ?))`

	// Parked runs are claimable from their wake time on (WAKE-001): the
	// parked index gives the due ones of each status, sorted into claim
	// order (they are the few whose time came since the last claims).
	qDue = `SELECT ` + candidateKeys + fromRuns + ` FORCE INDEX (parked) WHERE r.queue = ` + inQueueParked +
		` AND r.status IN (?) AND r.wake_at <= ` + clock

	// Listings read keys; readByKey reads the snapshots with their order
	// keys.
	listKeys = `SELECT r.run_id` + fromRuns

	// A read of keys, wrapped by readByKey: the keys' rows read by primary
	// key, locked as the parts locked them when they did.
	candidateKeys = `r.run_id, ` + clock + ` AS now`
	byKeyHead     = ` FROM (`
	byKeyTail     = `) k STRAIGHT_JOIN runstate_runs r FORCE INDEX (PRIMARY) ON r.run_id = k.run_id`
	candidateRows = `SELECT ` + rowColumns + `, k.now AS now, r.row_version` + byKeyHead
	listingRows   = `SELECT r.snapshot, r.created_at, r.run_id` + byKeyHead
	lockingRows   = ` FOR UPDATE`

	// ListRuns reads the index of its filter in (created_at, run_id)
	// order and stops after a page. The index is pinned: after a burst of
	// inserts the optimizer may otherwise scan and sort the whole table
	// for the first page (4 ms instead of 0.7 with 10,000 runs).
	byCreatedIndex   = ` FORCE INDEX (by_created)`
	byStatusIndex    = ` FORCE INDEX (by_status)`
	byWorkflowIndex  = ` FORCE INDEX (by_workflow)`
	whereTrue        = ` WHERE TRUE`
	byStatus         = ` AND r.status = ?`
	qListUnleased    = listKeys + ` WHERE r.queue = ` + inQueueUnleased + ` AND r.status IN (?)`
	qListExpired     = listKeys + ` WHERE r.queue = ` + inQueueLeased + ` AND r.lease_expires_at <= ` + clock + ` AND r.status IN (?)`
	qListEarlierLife = listKeys + ` WHERE r.lease_worker = ? AND r.queue = ` + inQueueLeased + ` AND r.lease_incarnation <> ? AND r.status IN (?)`
	qListDue         = listKeys + ` FORCE INDEX (parked) WHERE r.queue = ` + inQueueParked + ` AND r.wake_at <= ` + clock + ` AND r.status IN (?)`
	createdFrom      = ` AND r.created_at >= ?`
	createdBefore    = ` AND r.created_at < ?`
	limitRows        = ` LIMIT ?`

	// Migrations run under a lock of the database, one process at a time.
	qCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS runstate_schema_migrations (
		version INT NOT NULL PRIMARY KEY,
		name VARCHAR(255) NOT NULL,
		applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB`
	qMigrationLock     = `SELECT GET_LOCK(CONCAT('runstate.migrate.', DATABASE()), 60)`
	qMigrationUnlock   = `SELECT RELEASE_LOCK(CONCAT('runstate.migrate.', DATABASE()))`
	qAppliedMigrations = `SELECT version FROM runstate_schema_migrations ORDER BY version`
	qRecordMigration   = `INSERT INTO runstate_schema_migrations (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`

	// Scratch databases (Options.ScratchDatabase), followed by the quoted name.
	qCreateDatabase          = `CREATE DATABASE `
	qCreateDatabaseIfMissing = `CREATE DATABASE IF NOT EXISTS `
	qDropDatabase            = `DROP DATABASE IF EXISTS `
	// The waiting pass waits for row locks at most this many seconds, then
	// the session's default applies again.
	qSetLockWait   = `SET SESSION innodb_lock_wait_timeout = ?`
	qResetLockWait = `SET SESSION innodb_lock_wait_timeout = DEFAULT`

	// Every connection's transactions are READ COMMITTED: each statement
	// reads the latest committed rows, and locking reads lock only the rows
	// they return.
	qSessionReadCommitted = `SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`

	forClaimSkipping = byClaimOrder + ` LIMIT 1 FOR UPDATE SKIP LOCKED`
	forClaimReading  = byClaimOrder + ` LIMIT 1`
	// A batch claim locks up to its size of each kind.
	forClaimSkippingMany = byClaimOrder + ` LIMIT ? FOR UPDATE SKIP LOCKED`

	// Lean writes (sqlkit's lean.go, migration 002): a lean claim reads
	// its candidates without locking them; a write reads its rows so, and
	// is then one call of a stored procedure, which writes the rows still
	// at the row_version read, with their events, in one transaction.
	forClaimReadingMany = byClaimOrder + ` LIMIT ?`
	qReadRuns           = `SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id IN (?)`
	qWriteRuns          = `CALL runstate_write_runs(?, ?, ?, ?)`
	qWriteRun           = `CALL runstate_write_run(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qInsertRuns         = `CALL runstate_insert_runs(?, ?, ?)`
)

// Statements of many rows (sqlkit.Bulk). One UPDATE writes a batch's
// rows, joined by key to a derived table of one SELECT per row, the
// derived table first (STRAIGHT_JOIN) and the runs by primary key: with
// the runs table first, 32 writers of their own runs (conformance-runner
// bench, cas-update at 32) deadlocked through every retry. It checks
// each row's locked version and lease token as qUpdateRun does. Its
// run_id is cast to the column's character set and binary collation, so
// that the join compares bytes whatever the connection's collation.
var (
	bulkUpdateRuns = sqlkit.Bulk{
		Head: `UPDATE (`,
		Row: `SELECT CAST(? AS CHAR(128) CHARACTER SET ascii) COLLATE ascii_bin AS run_id, ? AS workflow_name, ? AS status,
		CAST(? AS SIGNED) AS priority, CAST(? AS SIGNED) AS version, CAST(? AS SIGNED) AS last_seq, ? AS snapshot, CAST(? AS SIGNED) AS queue,
		CAST(? AS SIGNED) AS lease_token, ? AS lease_worker, ? AS lease_incarnation, CAST(? AS DATETIME(6)) AS lease_acquired_at,
		CAST(? AS DATETIME(6)) AS lease_expires_at, CAST(? AS SIGNED) AS lease_released, CAST(? AS SIGNED) AS locked_version,
		CAST(? AS SIGNED) AS locked_token`,
		Sep: ` UNION ALL `,
		Tail: `) v STRAIGHT_JOIN runstate_runs r FORCE INDEX (PRIMARY) ON r.run_id = v.run_id AND r.version = v.locked_version AND r.lease_token = v.locked_token
		SET r.workflow_name = v.workflow_name, r.status = v.status, r.priority = v.priority, r.version = v.version,
		r.last_seq = v.last_seq, r.snapshot = v.snapshot, r.queue = v.queue, r.lease_token = v.lease_token,
		r.lease_worker = v.lease_worker, r.lease_incarnation = v.lease_incarnation, r.lease_acquired_at = v.lease_acquired_at,
		r.lease_expires_at = v.lease_expires_at, r.lease_released = v.lease_released, r.row_version = r.row_version + 1`,
	}
)

// dialect is the adapter's SQL for the kit. Text filters bind their value
// twice, for its length; IN (?) lists are expanded by sqlx.In, one
// placeholder per status.
var dialect = sqlkit.Dialect{
	Name: "mysql",
	Statements: sqlkit.Statements{
		Now: qNow, LockRun: qLockRun, GetRun: qGetRun, GetLease: qGetLease,
		InsertRun: qInsertRun, InsertLabel: qInsertLabel, InsertEvent: qInsertEvent, DeleteLabels: qDeleteLabels,
		UpdateSeq: qUpdateSeq, UpdateLease: qUpdateLease, UpdateRun: qUpdateRun,
		RunExists: qRunExists, ListEvents: qListEvents,

		LockRuns: qLockRuns, ExistingRuns: qExistingRuns, DeleteLabelsOf: qDeleteLabelsOf,
		UpdateRuns:        bulkUpdateRuns,
		ClaimSkippingMany: forClaimSkippingMany,
		SetLockWait:       qSetLockWait, ResetLockWait: qResetLockWait,
		Lean: sqlkit.LeanStatements{ReadRuns: qReadRuns, WriteRuns: qWriteRuns, InsertRuns: qInsertRuns,
			ClaimReadingMany: forClaimReadingMany},

		ListColumns:    listKeys,
		ListHints:      sqlkit.IndexHints{ByStatus: byStatusIndex, ByWorkflow: byWorkflowIndex, ByCreated: byCreatedIndex},
		WhereTrue:      whereTrue,
		ByStatus:       byStatus,
		CreatedFrom:    createdFrom,
		CreatedBefore:  createdBefore,
		ByWorkflow:     sqlkit.Clause{SQL: byWorkflow, Bind: []int{0, 0}},
		HasLabel:       sqlkit.Clause{SQL: hasLabel, Bind: []int{0, 1, 1}},
		AfterCreated:   sqlkit.Clause{SQL: afterCreated, Bind: []int{0, 0, 1}},
		ByCreatedLimit: byCreated + limitRows,

		UnleasedHead:  sqlkit.Clause{SQL: qUnleasedHead, Bind: []int{0, 1}},
		Takeable:      sqlkit.Clause{SQL: qTakeable, Bind: []int{0, 1, 0, 2, 3}},
		Due:           sqlkit.Clause{SQL: qDue, Bind: []int{0, 1, 0}},
		ClaimSkipping: forClaimSkipping,
		ClaimReading:  forClaimReading,

		ListUnleased:      sqlkit.Clause{SQL: qListUnleased, Bind: []int{0}},
		ListExpired:       sqlkit.Clause{SQL: qListExpired, Bind: []int{0, 1}},
		ListEarlierLife:   sqlkit.Clause{SQL: qListEarlierLife, Bind: []int{0, 1, 2}},
		ListDue:           sqlkit.Clause{SQL: qListDue, Bind: []int{0, 1}},
		AfterClaimPos:     sqlkit.Clause{SQL: afterClaimPos, Bind: []int{0, 0, 1, 1, 2}},
		ByClaimOrderLimit: byClaimOrder + limitRows,
	},
	Bind:      func(query string, args []any) (string, []any, error) { return sqlx.In(query, args...) },
	Union:     func(parts []string) string { return "(" + strings.Join(parts, ") UNION ALL (") + ")" },
	ReadByKey: readByKey,
	LeanArgs:  leanArgs,
	// Values are interpolated by the client (Options: InterpolateParams),
	// so a statement is bounded by the server's max_allowed_packet (16 MB
	// by default on MariaDB, 64 MB on MySQL 8): a quarter of the smaller,
	// leaving room for escaping. 65535 is the bound of a prepared one.
	MaxParams:    65535,
	MaxBulkBytes: 4 << 20,
	Retryable:    retryable,
	Interpret:    interpretError,
	LockTimedOut: func(err error) bool { return isErrorNumber(err, errLockWaitTimeout) },
	LockWaitArg:  func(limit time.Duration) any { return int(limit / time.Second) },
}

// readByKey wraps a read of keys (claim candidates, listings) into one
// statement that reads their rows by primary key. A label filter lets the
// optimizer start from the labels table and sort what it joins in a
// temporary table; MariaDB keeps a temporary table with a snapshot (a
// LONGTEXT) in its Aria engine, on disk, and dropping thousands of those a
// minute is where a 10.11 server died (docs/mysql.md). A temporary table of
// keys stays in memory. The statement reads one snapshot of the table, as
// the unwrapped one did; where the parts lock their rows, the rows are read
// locked too, so they are the latest committed, not older than the locks.
func readByKey(keys string, rows sqlkit.RowsOf, locking bool) string {
	head := listingRows
	if rows == sqlkit.CandidateRows {
		head = candidateRows
	}
	query := head + keys + byKeyTail
	if locking {
		query += lockingRows
	}
	return query
}
