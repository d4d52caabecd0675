-- runstate schema, version 3. Parked runs (runstate.RunSnapshot.WakeAt,
-- WAKE-001) are queue 3, claimable from their wake time on: wake_at is
-- the snapshot's wake time for them, computed by the server from the
-- snapshot it already stores (NULL in every other queue, so other rows
-- cost nothing), and the index parked gives a claim the due ones alone,
-- however many wait. Every write, the lean procedures' too, sets queue and
-- snapshot, so no statement names wake_at. The snapshot's times are UTC
-- in RFC 3339 without trailing zeros: a time of whole seconds is given
-- its fraction before it is read. Adding the column rebuilds the table once.
ALTER TABLE runstate_runs ADD COLUMN IF NOT EXISTS wake_at DATETIME(6) AS (IF(queue = 3,
    STR_TO_DATE(REPLACE(JSON_UNQUOTE(JSON_EXTRACT(snapshot, '$.wake_at')), 'Z',
      IF(LOCATE('.', JSON_UNQUOTE(JSON_EXTRACT(snapshot, '$.wake_at'))) = 0, '.0', '')), '%Y-%m-%dT%H:%i:%s.%f'),
    NULL)) STORED;
CREATE INDEX IF NOT EXISTS parked ON runstate_runs (queue, status, wake_at);
