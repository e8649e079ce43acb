-- A parked row (its error set: it cannot run) is un-parked by a change to any of its definition
-- or policy columns, not only schedule, zone, command and argv: fixing `env`, `workdir`, a
-- policy value, `pool` or a bad `enabled` re-prepares it at the next poll.
-- toml_enabled remembers the `enabled` the TOML last wrote, so that an apply changes a job's
-- `enabled` only when the TOML's value changed: a pause made with `sqlcron pause` survives.
ALTER TABLE cron_table ADD COLUMN toml_enabled BIGINT;

DROP TRIGGER cron_table_changed;

CREATE TRIGGER cron_table_changed BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.schedule <=> OLD.schedule) OR NOT (NEW.timezone <=> OLD.timezone)
        OR NOT (NEW.command <=> OLD.command) OR NOT (NEW.argv <=> OLD.argv)
        OR (OLD.error IS NOT NULL AND NOT (NEW.env <=> OLD.env
            AND NEW.workdir <=> OLD.workdir
            AND NEW.enabled <=> OLD.enabled
            AND NEW.pool <=> OLD.pool
            AND NEW.misfire <=> OLD.misfire
            AND NEW.starting_deadline <=> OLD.starting_deadline
            AND NEW.max_catch_up <=> OLD.max_catch_up
            AND NEW.retries <=> OLD.retries
            AND NEW.retry_backoff <=> OLD.retry_backoff
            AND NEW.retry_backoff_max <=> OLD.retry_backoff_max
            AND NEW.timeout <=> OLD.timeout
            AND NEW.kill_grace <=> OLD.kill_grace
            AND NEW.jitter <=> OLD.jitter
            AND NEW.on_lease_lost <=> OLD.on_lease_lost
            AND NEW.rerun_lost <=> OLD.rerun_lost)) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;
