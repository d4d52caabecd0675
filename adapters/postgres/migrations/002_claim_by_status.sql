-- runstate schema, version 2. Claim-next reads the head of the unleased
-- queue one status at a time, from an index that leads with the status:
-- an equality on it gives the runs in claim order, a plan the server
-- chooses even before it has statistics of the table (a new deployment's
-- first burst of runs). With claim_order and a list of statuses, it sorted
-- the whole queue on every claim until the table was analysed.
CREATE INDEX IF NOT EXISTS runstate_runs_claim_by_status ON runstate_runs (status, priority DESC, created_at, run_id) WHERE queue = 1;
DROP INDEX IF EXISTS runstate_runs_claim_order;
