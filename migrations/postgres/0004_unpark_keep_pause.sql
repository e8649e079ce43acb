-- A parked row (its error set: it cannot run) is un-parked by a change to any of its definition
-- or policy columns, not only schedule, zone, command and argv: fixing `env`, `workdir`, a
-- policy value, `pool` or a bad `enabled` re-prepares it at the next poll.
-- toml_enabled remembers the `enabled` the TOML last wrote, so that an apply changes a job's
-- `enabled` only when the TOML's value changed: a pause made with `sqlcron pause` survives.
ALTER TABLE cron_table ADD COLUMN toml_enabled BIGINT;

CREATE FUNCTION cron_table_unpark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.error := NULL;
    IF NEW.exec_by IS NULL THEN
        NEW.next_exec := NULL;
        NEW.dirty := 0;
    ELSE
        NEW.dirty := 1;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER cron_table_unpark BEFORE UPDATE OF env, workdir, enabled, pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, timeout, kill_grace, jitter, on_lease_lost, rerun_lost ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND (NEW.env IS DISTINCT FROM OLD.env
          OR NEW.workdir IS DISTINCT FROM OLD.workdir
          OR NEW.enabled IS DISTINCT FROM OLD.enabled
          OR NEW.pool IS DISTINCT FROM OLD.pool
          OR NEW.misfire IS DISTINCT FROM OLD.misfire
          OR NEW.starting_deadline IS DISTINCT FROM OLD.starting_deadline
          OR NEW.max_catch_up IS DISTINCT FROM OLD.max_catch_up
          OR NEW.retries IS DISTINCT FROM OLD.retries
          OR NEW.retry_backoff IS DISTINCT FROM OLD.retry_backoff
          OR NEW.retry_backoff_max IS DISTINCT FROM OLD.retry_backoff_max
          OR NEW.timeout IS DISTINCT FROM OLD.timeout
          OR NEW.kill_grace IS DISTINCT FROM OLD.kill_grace
          OR NEW.jitter IS DISTINCT FROM OLD.jitter
          OR NEW.on_lease_lost IS DISTINCT FROM OLD.on_lease_lost
          OR NEW.rerun_lost IS DISTINCT FROM OLD.rerun_lost))
    EXECUTE FUNCTION cron_table_unpark();
