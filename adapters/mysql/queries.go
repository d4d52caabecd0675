package mysql

// SQL of the adapter, in one place. Values are always bound parameters;
// the only text assembled at run time is a repetition of fixed fragments
// (one placeholder per status, one EXISTS per label), never input.

// clock is the database clock plus the store's TimeShift (0 in production).
const clock = `UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND`

const (
	qNow = `SELECT ` + clock

	// runColumns are read for every write: the row is locked while the
	// store decides, with the database time of the decision.
	runColumns = `r.run_id, r.version, r.last_seq, r.snapshot, r.lease_token, r.lease_worker, r.lease_incarnation,
		r.lease_acquired_at, r.lease_expires_at, r.lease_released, ` + clock + ` AS now`

	qLockRun   = `SELECT ` + runColumns + ` FROM runstate_runs r WHERE r.run_id = ? FOR UPDATE`
	qGetRun    = `SELECT snapshot FROM runstate_runs WHERE run_id = ?`
	qRunExists = `SELECT COUNT(*) FROM runstate_runs WHERE run_id = ?`

	qInsertRun = `INSERT INTO runstate_runs
		(run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qUpdateRun = `UPDATE runstate_runs SET workflow_name = ?, status = ?, priority = ?, version = ?, last_seq = ?,
		snapshot = ?, queue = ? WHERE run_id = ? AND version = ? AND lease_token = ?`
	qUpdateSeq   = `UPDATE runstate_runs SET last_seq = ? WHERE run_id = ?`
	qUpdateLease = `UPDATE runstate_runs SET lease_token = ?, lease_worker = ?, lease_incarnation = ?,
		lease_acquired_at = ?, lease_expires_at = ?, lease_released = ?, queue = ? WHERE run_id = ?`

	qDeleteLabels = `DELETE FROM runstate_labels WHERE run_id = ?`
	qInsertLabel  = `INSERT INTO runstate_labels (run_id, label_key, label_value, created_at) VALUES (?, ?, ?, ?)`
	qInsertEvent  = `INSERT INTO runstate_audit (run_id, seq, event) VALUES (?, ?, ?)`
	qListEvents   = `SELECT event FROM runstate_audit WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`

	// Listing fragments, combined by listSQL and runnableSQL.
	fromRuns      = ` FROM runstate_runs r`
	byCreated     = ` ORDER BY r.created_at, r.run_id`
	afterCreated  = ` AND (r.created_at > ? OR (r.created_at = ? AND r.run_id > ?))`
	hasLabel      = ` AND EXISTS (SELECT 1 FROM runstate_labels l WHERE l.run_id = r.run_id AND l.label_key = ? AND l.label_value = ?)`
	byClaimOrder  = ` ORDER BY r.priority DESC, r.created_at, r.run_id`
	afterClaimPos = ` AND (r.priority < ? OR (r.priority = ? AND (r.created_at > ? OR (r.created_at = ? AND r.run_id > ?))))`

	// Claim candidates, each locked and read whole in one statement: the
	// head of the unleased queue (claim_order, no sorting), the expired
	// leases (lease_expiry) and the leases of the claimant worker's earlier
	// incarnations (by_lease_owner); the last two sort only their few rows.
	// SKIP LOCKED passes over rows other claimers hold.
	// The head is pinned to claim_order: reading whole rows, the optimizer
	// may otherwise prefer a scan and a sort when many runs are queued.
	qUnleasedHead = `SELECT ` + runColumns + fromRuns + ` FORCE INDEX (claim_order) WHERE r.queue = 1 AND r.status IN (?)`
	qExpiredLease = `SELECT ` + runColumns + fromRuns + ` WHERE r.queue = 2 AND r.lease_expires_at <= ` + clock + ` AND r.status IN (?)`
	qEarlierLife  = `SELECT ` + runColumns + fromRuns + ` WHERE r.lease_worker = ? AND r.queue = 2 AND r.lease_incarnation <> ? AND r.status IN (?)`
	forClaim      = byClaimOrder + ` LIMIT 1 FOR UPDATE SKIP LOCKED`
)
