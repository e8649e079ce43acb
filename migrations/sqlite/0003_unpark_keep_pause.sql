-- A parked row (its error set: it cannot run) is un-parked by a change to any of its definition
-- or policy columns, not only schedule, zone, command and argv: fixing `env`, `workdir`, a
-- policy value, `pool` or a bad `enabled` re-prepares it at the next poll.
-- toml_enabled remembers the `enabled` the TOML last wrote, so that an apply changes a job's
-- `enabled` only when the TOML's value changed: a pause made with `sqlcron pause` survives.
ALTER TABLE cron_table ADD COLUMN toml_enabled INTEGER;

CREATE TRIGGER cron_table_unpark AFTER UPDATE OF env, workdir, enabled, pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, timeout, kill_grace, jitter, on_lease_lost, rerun_lost ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND (NEW.env IS NOT OLD.env
    OR NEW.workdir IS NOT OLD.workdir
    OR NEW.enabled IS NOT OLD.enabled
    OR NEW.pool IS NOT OLD.pool
    OR NEW.misfire IS NOT OLD.misfire
    OR NEW.starting_deadline IS NOT OLD.starting_deadline
    OR NEW.max_catch_up IS NOT OLD.max_catch_up
    OR NEW.retries IS NOT OLD.retries
    OR NEW.retry_backoff IS NOT OLD.retry_backoff
    OR NEW.retry_backoff_max IS NOT OLD.retry_backoff_max
    OR NEW.timeout IS NOT OLD.timeout
    OR NEW.kill_grace IS NOT OLD.kill_grace
    OR NEW.jitter IS NOT OLD.jitter
    OR NEW.on_lease_lost IS NOT OLD.on_lease_lost
    OR NEW.rerun_lost IS NOT OLD.rerun_lost)
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;
