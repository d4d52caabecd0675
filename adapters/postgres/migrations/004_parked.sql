-- runstate schema, version 4. Parked runs (runstate.RunSnapshot.WakeAt,
-- WAKE-001) are queue 3, claimable from their wake time on: wake_at is
-- the snapshot's wake time for them, computed by the server from the
-- snapshot it already stores (NULL in every other queue, so other rows
-- cost nothing), and the partial index parked gives a claim the due ones
-- alone, however many wait. Every write sets queue and snapshot, so no
-- statement names wake_at. The snapshot's times are UTC in RFC 3339, which
-- reads the same under any session time zone: the function is immutable
-- as a generated column needs. Adding the column rewrites the table once.
-- (The function is one line: a migration splits on a line's ";".)
CREATE OR REPLACE FUNCTION runstate_wake_at(snapshot text) RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT CAST(CAST(snapshot AS jsonb) ->> 'wake_at' AS timestamptz) $$;
ALTER TABLE runstate_runs ADD COLUMN IF NOT EXISTS wake_at timestamptz GENERATED ALWAYS AS (CASE WHEN queue = 3 THEN runstate_wake_at(snapshot) END) STORED;
CREATE INDEX IF NOT EXISTS runstate_runs_parked ON runstate_runs (wake_at) WHERE queue = 3;
