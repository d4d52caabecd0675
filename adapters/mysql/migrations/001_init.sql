-- runstate schema, version 1. Statements are idempotent: DDL is not
-- transactional, so a migration interrupted half-way must be able to run again.
-- One row per run: the snapshot as JSON plus the columns that queries filter,
-- order and lock on. Text columns that hold ids compare byte for byte.

CREATE TABLE IF NOT EXISTS runstate_runs (
  run_id            VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  workflow_name     VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  status            VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  priority          INT NOT NULL,
  created_at        DATETIME(6) NOT NULL,
  version           BIGINT NOT NULL,
  last_seq          BIGINT NOT NULL,
  snapshot          LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  -- queue: 0 terminal, 1 non-terminal without a lease, 2 non-terminal with a lease.
  queue             TINYINT NOT NULL,
  lease_token       BIGINT NOT NULL DEFAULT 0,
  lease_worker      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  lease_incarnation VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  lease_acquired_at DATETIME(6) NULL,
  lease_expires_at  DATETIME(6) NULL,
  lease_released    BOOLEAN NOT NULL DEFAULT FALSE,
  PRIMARY KEY (run_id),
  KEY by_created (created_at, run_id),
  KEY by_status (status, created_at, run_id),
  KEY by_workflow (workflow_name, created_at, run_id),
  -- Claim-next reads the head of queue 1 in claim order without sorting,
  -- plus the few leased runs it may take: expired ones, and those of an
  -- earlier incarnation of its own worker, each through its own index.
  KEY claim_order (queue, priority DESC, created_at, run_id),
  KEY lease_expiry (queue, lease_expires_at),
  KEY by_lease_owner (lease_worker, queue, lease_incarnation)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS runstate_labels (
  run_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  label_key   VARCHAR(63) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  label_value VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (run_id, label_key),
  KEY by_label (label_key, label_value, created_at, run_id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS runstate_audit (
  run_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  seq    BIGINT NOT NULL,
  event  TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (run_id, seq)
) ENGINE=InnoDB;
