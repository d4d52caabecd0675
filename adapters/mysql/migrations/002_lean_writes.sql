-- runstate schema, version 2: lean writes (docs/mysql.md, "Writes").

-- row_version names a row's last write: every UPDATE of a run changes it
-- (a lean write sets a tag of its own, the others add one), so that a lean
-- write can write a row only where it is still the version it read. A
-- lean write is one call of a procedure below: one round trip, its own
-- transaction.
ALTER TABLE runstate_runs ADD COLUMN IF NOT EXISTS row_version BIGINT NOT NULL DEFAULT 0;

DROP PROCEDURE IF EXISTS runstate_write_run;

-- runstate_write_run writes one run's row, in one transaction, if it is
-- still at the row_version read (p_row_version) and no other transaction
-- holds it, and where p_not_before is set, if the database time is not
-- earlier; the row takes p_tag, a random number the client drew for this
-- write, as its row_version, and the events of p_events ([run_id, seq,
-- event]) go in with it. It commits and returns the row written (run_id,
-- row_version, now), or no row. Any error rolls it all back. A row another
-- transaction holds is passed over (SKIP LOCKED), as one written
-- meanwhile: the client reads it again, and in the end writes it the
-- locking way, which waits for it. So a call never waits for a row lock,
-- and cannot deadlock. Its parameters are scalars: MariaDB joins a table
-- to JSON_TABLE at several times the cost of this whole call.
CREATE PROCEDURE runstate_write_run(
  IN p_run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_workflow_name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  IN p_status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_priority INT, IN p_version BIGINT, IN p_last_seq BIGINT,
  IN p_snapshot LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  IN p_queue TINYINT, IN p_lease_token BIGINT,
  IN p_lease_worker VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  IN p_lease_incarnation VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  IN p_lease_acquired_at DATETIME(6), IN p_lease_expires_at DATETIME(6), IN p_lease_released BOOLEAN,
  IN p_row_version BIGINT, IN p_not_before DATETIME(6),
  IN p_events LONGTEXT, IN p_clock DATETIME(6), IN p_tag BIGINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT COALESCE(p_clock, UTC_TIMESTAMP(6));
  DECLARE v_free INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;
  IF p_not_before IS NULL OR v_now >= p_not_before THEN
    START TRANSACTION;
    SELECT COUNT(*) INTO v_free FROM runstate_runs
      WHERE run_id = p_run_id AND row_version = p_row_version FOR UPDATE SKIP LOCKED;
    IF v_free = 1 THEN
      UPDATE runstate_runs SET workflow_name = p_workflow_name, status = p_status, priority = p_priority,
        version = p_version, last_seq = p_last_seq, snapshot = IF(p_snapshot = '', snapshot, p_snapshot),
        queue = p_queue, lease_token = p_lease_token, lease_worker = p_lease_worker,
        lease_incarnation = p_lease_incarnation, lease_acquired_at = p_lease_acquired_at,
        lease_expires_at = p_lease_expires_at, lease_released = p_lease_released, row_version = p_tag
        WHERE run_id = p_run_id;
      INSERT INTO runstate_audit (run_id, seq, event)
        SELECT e.run_id, e.seq, e.event FROM JSON_TABLE(p_events, '$[*]' COLUMNS (
          run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
          seq BIGINT PATH '$[1]',
          event TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) e;
    END IF;
    COMMIT;
  END IF;
  SELECT p_run_id AS run_id, p_tag AS row_version, v_now AS now FROM DUAL WHERE v_free = 1;
END;

DROP PROCEDURE IF EXISTS runstate_write_runs;

-- runstate_write_runs is runstate_write_run for many rows, in one
-- transaction: p_rows is a JSON array of rows, each [run_id,
-- workflow_name, status, priority, version, last_seq, snapshot or "" to
-- keep it, queue, lease_token, lease_worker, lease_incarnation,
-- lease_acquired_at, lease_expires_at, lease_released, row_version read,
-- not_before] (no two name one run); it returns each row written. The
-- rows it may write are locked first, in one statement that passes over
-- those others hold or wrote since the read; once locked at the version
-- read, each is written, so the events and the answer need no second
-- look at the table (each join of the table to JSON_TABLE costs MariaDB
-- more than a single row's whole call).
CREATE PROCEDURE runstate_write_runs(IN p_rows LONGTEXT, IN p_events LONGTEXT, IN p_clock DATETIME(6), IN p_tag BIGINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT COALESCE(p_clock, UTC_TIMESTAMP(6));
  DECLARE v_free, v_written LONGTEXT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;
  START TRANSACTION;
  SELECT GROUP_CONCAT(v.ord), JSON_ARRAYAGG(v.run_id) INTO v_free, v_written
    FROM JSON_TABLE(p_rows, '$[*]' COLUMNS (
      ord FOR ORDINALITY,
      run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
      row_version BIGINT PATH '$[14]',
      not_before DATETIME(6) PATH '$[15]')) v
    STRAIGHT_JOIN runstate_runs r FORCE INDEX (PRIMARY) ON r.run_id = v.run_id AND r.row_version = v.row_version
    WHERE v.not_before IS NULL OR v_now >= v.not_before
    FOR UPDATE SKIP LOCKED;
  IF v_free IS NOT NULL THEN
    UPDATE JSON_TABLE(p_rows, '$[*]' COLUMNS (
        ord FOR ORDINALITY,
        run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
        workflow_name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
        status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin PATH '$[2]',
        priority INT PATH '$[3]',
        version BIGINT PATH '$[4]',
        last_seq BIGINT PATH '$[5]',
        snapshot LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[6]',
        queue TINYINT PATH '$[7]',
        lease_token BIGINT PATH '$[8]',
        lease_worker VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[9]',
        lease_incarnation VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[10]',
        lease_acquired_at DATETIME(6) PATH '$[11]',
        lease_expires_at DATETIME(6) PATH '$[12]',
        lease_released BOOLEAN PATH '$[13]')) v
      STRAIGHT_JOIN runstate_runs r FORCE INDEX (PRIMARY) ON r.run_id = v.run_id
      SET r.workflow_name = v.workflow_name, r.status = v.status, r.priority = v.priority, r.version = v.version,
        r.last_seq = v.last_seq, r.snapshot = IF(v.snapshot = '', r.snapshot, v.snapshot), r.queue = v.queue,
        r.lease_token = v.lease_token, r.lease_worker = v.lease_worker, r.lease_incarnation = v.lease_incarnation,
        r.lease_acquired_at = v.lease_acquired_at, r.lease_expires_at = v.lease_expires_at,
        r.lease_released = v.lease_released, r.row_version = p_tag
      WHERE FIND_IN_SET(v.ord, v_free) > 0;
    INSERT INTO runstate_audit (run_id, seq, event)
      SELECT e.run_id, e.seq, e.event FROM JSON_TABLE(p_events, '$[*]' COLUMNS (
        run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
        seq BIGINT PATH '$[1]',
        event TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) e
      WHERE JSON_CONTAINS(v_written, JSON_QUOTE(e.run_id));
  END IF;
  COMMIT;
  SELECT w.run_id, p_tag AS row_version, v_now AS now FROM JSON_TABLE(COALESCE(v_written, '[]'), '$[*]' COLUMNS (
      run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) w;
END;

DROP PROCEDURE IF EXISTS runstate_insert_runs;

-- runstate_insert_runs inserts, in one transaction, the runs of p_runs
-- ([run_id, workflow_name, status, priority, created_at, version,
-- last_seq, snapshot, queue]), their labels (p_labels: [run_id, key,
-- value, created_at]) and their created events (p_events: [run_id, seq,
-- event]), all or none: a run_id that exists fails it, with nothing stored.
CREATE PROCEDURE runstate_insert_runs(IN p_runs LONGTEXT, IN p_labels LONGTEXT, IN p_events LONGTEXT)
MODIFIES SQL DATA
BEGIN
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;
  START TRANSACTION;
  INSERT INTO runstate_runs (run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue)
    SELECT * FROM JSON_TABLE(p_runs, '$[*]' COLUMNS (
      run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
      workflow_name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
      status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin PATH '$[2]',
      priority INT PATH '$[3]',
      created_at DATETIME(6) PATH '$[4]',
      version BIGINT PATH '$[5]',
      last_seq BIGINT PATH '$[6]',
      snapshot LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[7]',
      queue TINYINT PATH '$[8]')) v;
  INSERT INTO runstate_labels (run_id, label_key, label_value, created_at)
    SELECT * FROM JSON_TABLE(p_labels, '$[*]' COLUMNS (
      run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
      label_key VARCHAR(63) CHARACTER SET ascii COLLATE ascii_bin PATH '$[1]',
      label_value VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
      created_at DATETIME(6) PATH '$[3]')) l;
  INSERT INTO runstate_audit (run_id, seq, event)
    SELECT * FROM JSON_TABLE(p_events, '$[*]' COLUMNS (
      run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
      seq BIGINT PATH '$[1]',
      event TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) e;
  COMMIT;
END;
