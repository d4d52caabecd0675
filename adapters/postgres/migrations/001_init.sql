-- runstate schema, version 1. A migration runs in one transaction, under
-- the migration lock, so it is applied whole or not at all.
-- One row per run: the snapshot as JSON text (decoded by runstate, never by
-- the server) plus the columns that queries filter, order and lock on.
-- Text that holds ids or names compares byte for byte (COLLATE "C").

CREATE TABLE IF NOT EXISTS runstate_runs (
  run_id            text COLLATE "C" NOT NULL PRIMARY KEY,
  workflow_name     text COLLATE "C" NOT NULL,
  status            text COLLATE "C" NOT NULL,
  priority          integer NOT NULL,
  created_at        timestamptz NOT NULL,
  version           bigint NOT NULL,
  last_seq          bigint NOT NULL,
  snapshot          text NOT NULL,
  -- queue: 0 terminal, 1 non-terminal without a lease, 2 non-terminal with a lease.
  queue             smallint NOT NULL,
  lease_token       bigint NOT NULL DEFAULT 0,
  lease_worker      text COLLATE "C" NOT NULL DEFAULT '',
  lease_incarnation text COLLATE "C" NOT NULL DEFAULT '',
  lease_acquired_at timestamptz NULL,
  lease_expires_at  timestamptz NULL,
  lease_released    boolean NOT NULL DEFAULT false
);

CREATE INDEX IF NOT EXISTS runstate_runs_by_created ON runstate_runs (created_at, run_id);
CREATE INDEX IF NOT EXISTS runstate_runs_by_status ON runstate_runs (status, created_at, run_id);
CREATE INDEX IF NOT EXISTS runstate_runs_by_workflow ON runstate_runs (workflow_name, created_at, run_id);
-- Claim-next reads the head of the unleased queue in claim order without
-- sorting, and the few leased runs it may take (expired ones, and those of
-- an earlier incarnation of its own worker) each through an index of its
-- own. The indexes are partial: finished runs, most of the table in time,
-- are in none of them.
CREATE INDEX IF NOT EXISTS runstate_runs_claim_order ON runstate_runs (priority DESC, created_at, run_id) WHERE queue = 1;
CREATE INDEX IF NOT EXISTS runstate_runs_lease_expiry ON runstate_runs (lease_expires_at) WHERE queue = 2;
CREATE INDEX IF NOT EXISTS runstate_runs_by_lease_owner ON runstate_runs (lease_worker, lease_incarnation) WHERE queue = 2;

CREATE TABLE IF NOT EXISTS runstate_labels (
  run_id      text COLLATE "C" NOT NULL,
  label_key   text COLLATE "C" NOT NULL,
  label_value text COLLATE "C" NOT NULL,
  created_at  timestamptz NOT NULL,
  PRIMARY KEY (run_id, label_key)
);
CREATE INDEX IF NOT EXISTS runstate_labels_by_label ON runstate_labels (label_key, label_value, created_at, run_id);

CREATE TABLE IF NOT EXISTS runstate_audit (
  run_id text COLLATE "C" NOT NULL,
  seq    bigint NOT NULL,
  event  text NOT NULL,
  PRIMARY KEY (run_id, seq)
);
