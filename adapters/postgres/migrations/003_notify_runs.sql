-- runstate schema, version 3. A session with runstate.notify_runs = on
-- (Options.NotifyRuns) announces every write of a run, for the watchers
-- of that run (Store.WatchRun): the payload is the schema and the run id.
-- A trigger sees every write, whatever statement makes it (single,
-- batched, lean); a session without the setting pays one comparison per
-- row. (The function is one line: a migration splits on a line's ";".)
CREATE OR REPLACE FUNCTION runstate_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('runstate_run', current_schema() || ' ' || NEW.run_id); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS runstate_runs_notify ON runstate_runs;
CREATE TRIGGER runstate_runs_notify AFTER INSERT OR UPDATE ON runstate_runs FOR EACH ROW
  WHEN (current_setting('runstate.notify_runs', true) = 'on')
  EXECUTE FUNCTION runstate_notify_run();
