-- Type checks on the columns a user writes. SQLite stores any value in any column; a row of the
-- wrong type (`enabled = 'yes'`, `retries = 1.5`, a BLOB command) is now refused when it is
-- written, with the column named. These are triggers rather than CHECK constraints: SQLite adds
-- a CHECK only by rebuilding the table, and a rebuild would fail on a bad row already stored.
-- Rows stored before this migration are still decoded one at a time and parked if bad.
CREATE TRIGGER cron_table_types_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.enabled must be 0 or 1') WHERE NOT (typeof(NEW.enabled) = 'integer' AND NEW.enabled IN (0, 1));
    SELECT RAISE(ABORT, 'cron_table.name must be text') WHERE typeof(NEW.name) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.schedule must be text') WHERE typeof(NEW.schedule) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.timezone must be text or NULL') WHERE NEW.timezone IS NOT NULL AND typeof(NEW.timezone) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.command must be text or NULL') WHERE NEW.command IS NOT NULL AND typeof(NEW.command) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.argv must be text or NULL') WHERE NEW.argv IS NOT NULL AND typeof(NEW.argv) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.env must be text or NULL') WHERE NEW.env IS NOT NULL AND typeof(NEW.env) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.workdir must be text or NULL') WHERE NEW.workdir IS NOT NULL AND typeof(NEW.workdir) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.pool must be text or NULL') WHERE NEW.pool IS NOT NULL AND typeof(NEW.pool) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.misfire must be text or NULL') WHERE NEW.misfire IS NOT NULL AND typeof(NEW.misfire) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.starting_deadline must be text or NULL') WHERE NEW.starting_deadline IS NOT NULL AND typeof(NEW.starting_deadline) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.retry_backoff must be text or NULL') WHERE NEW.retry_backoff IS NOT NULL AND typeof(NEW.retry_backoff) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.retry_backoff_max must be text or NULL') WHERE NEW.retry_backoff_max IS NOT NULL AND typeof(NEW.retry_backoff_max) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.timeout must be text or NULL') WHERE NEW.timeout IS NOT NULL AND typeof(NEW.timeout) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.kill_grace must be text or NULL') WHERE NEW.kill_grace IS NOT NULL AND typeof(NEW.kill_grace) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.jitter must be text or NULL') WHERE NEW.jitter IS NOT NULL AND typeof(NEW.jitter) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.on_lease_lost must be text or NULL') WHERE NEW.on_lease_lost IS NOT NULL AND typeof(NEW.on_lease_lost) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.max_catch_up must be a whole number >= 0 or NULL') WHERE NEW.max_catch_up IS NOT NULL AND NOT (typeof(NEW.max_catch_up) = 'integer' AND NEW.max_catch_up >= 0);
    SELECT RAISE(ABORT, 'cron_table.retries must be a whole number >= 0 or NULL') WHERE NEW.retries IS NOT NULL AND NOT (typeof(NEW.retries) = 'integer' AND NEW.retries >= 0);
    SELECT RAISE(ABORT, 'cron_table.rerun_lost must be 0, 1 or NULL') WHERE NEW.rerun_lost IS NOT NULL AND NOT (typeof(NEW.rerun_lost) = 'integer' AND NEW.rerun_lost IN (0, 1));
END;

CREATE TRIGGER cron_table_types_update BEFORE UPDATE OF enabled, name, schedule, timezone, command, argv, env, workdir, pool, misfire, starting_deadline, retry_backoff, retry_backoff_max, timeout, kill_grace, jitter, on_lease_lost, max_catch_up, retries, rerun_lost ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.enabled must be 0 or 1') WHERE NOT (typeof(NEW.enabled) = 'integer' AND NEW.enabled IN (0, 1));
    SELECT RAISE(ABORT, 'cron_table.name must be text') WHERE typeof(NEW.name) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.schedule must be text') WHERE typeof(NEW.schedule) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.timezone must be text or NULL') WHERE NEW.timezone IS NOT NULL AND typeof(NEW.timezone) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.command must be text or NULL') WHERE NEW.command IS NOT NULL AND typeof(NEW.command) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.argv must be text or NULL') WHERE NEW.argv IS NOT NULL AND typeof(NEW.argv) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.env must be text or NULL') WHERE NEW.env IS NOT NULL AND typeof(NEW.env) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.workdir must be text or NULL') WHERE NEW.workdir IS NOT NULL AND typeof(NEW.workdir) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.pool must be text or NULL') WHERE NEW.pool IS NOT NULL AND typeof(NEW.pool) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.misfire must be text or NULL') WHERE NEW.misfire IS NOT NULL AND typeof(NEW.misfire) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.starting_deadline must be text or NULL') WHERE NEW.starting_deadline IS NOT NULL AND typeof(NEW.starting_deadline) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.retry_backoff must be text or NULL') WHERE NEW.retry_backoff IS NOT NULL AND typeof(NEW.retry_backoff) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.retry_backoff_max must be text or NULL') WHERE NEW.retry_backoff_max IS NOT NULL AND typeof(NEW.retry_backoff_max) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.timeout must be text or NULL') WHERE NEW.timeout IS NOT NULL AND typeof(NEW.timeout) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.kill_grace must be text or NULL') WHERE NEW.kill_grace IS NOT NULL AND typeof(NEW.kill_grace) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.jitter must be text or NULL') WHERE NEW.jitter IS NOT NULL AND typeof(NEW.jitter) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.on_lease_lost must be text or NULL') WHERE NEW.on_lease_lost IS NOT NULL AND typeof(NEW.on_lease_lost) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.max_catch_up must be a whole number >= 0 or NULL') WHERE NEW.max_catch_up IS NOT NULL AND NOT (typeof(NEW.max_catch_up) = 'integer' AND NEW.max_catch_up >= 0);
    SELECT RAISE(ABORT, 'cron_table.retries must be a whole number >= 0 or NULL') WHERE NEW.retries IS NOT NULL AND NOT (typeof(NEW.retries) = 'integer' AND NEW.retries >= 0);
    SELECT RAISE(ABORT, 'cron_table.rerun_lost must be 0, 1 or NULL') WHERE NEW.rerun_lost IS NOT NULL AND NOT (typeof(NEW.rerun_lost) = 'integer' AND NEW.rerun_lost IN (0, 1));
END;
