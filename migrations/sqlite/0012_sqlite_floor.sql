-- SQLite 3.31 is the floor (Ubuntu 20.04; Debian 12 ships 3.40, RHEL 9 3.34): the audit
-- triggers run inside whatever SQLite edits the file, the distribution's `sqlite3` included, so
-- they must not use what a newer SQLite added. `unixepoch('subsec')` (3.42) gave NULL on older
-- ones and every SQL insert failed; the time is now `julianday('now')` arithmetic (milliseconds,
-- every version).

DROP TRIGGER cron_audit_sql_insert;
CREATE TRIGGER cron_audit_sql_insert AFTER INSERT ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS NULL
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_insert', NEW.name, 'sql', NULL);
END;

DROP TRIGGER cron_audit_sql_update;
CREATE TRIGGER cron_audit_sql_update AFTER UPDATE OF name, schedule, timezone, command, argv, env, workdir, enabled, pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, timeout, kill_grace, jitter, on_lease_lost, rerun_lost, run_user, run_group, env_file, inherit_env, limits ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND (NEW.name IS NOT OLD.name
    OR NEW.schedule IS NOT OLD.schedule
    OR NEW.timezone IS NOT OLD.timezone
    OR NEW.command IS NOT OLD.command
    OR NEW.argv IS NOT OLD.argv
    OR NEW.env IS NOT OLD.env
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
    OR NEW.rerun_lost IS NOT OLD.rerun_lost
    OR NEW.run_user IS NOT OLD.run_user
    OR NEW.run_group IS NOT OLD.run_group
    OR NEW.env_file IS NOT OLD.env_file
    OR NEW.inherit_env IS NOT OLD.inherit_env
    OR NEW.limits IS NOT OLD.limits)
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed ' || rtrim(
        CASE WHEN NEW.name IS NOT OLD.name THEN 'name,' ELSE '' END ||
        CASE WHEN NEW.schedule IS NOT OLD.schedule THEN 'schedule,' ELSE '' END ||
        CASE WHEN NEW.timezone IS NOT OLD.timezone THEN 'timezone,' ELSE '' END ||
        CASE WHEN NEW.command IS NOT OLD.command THEN 'command,' ELSE '' END ||
        CASE WHEN NEW.argv IS NOT OLD.argv THEN 'argv,' ELSE '' END ||
        CASE WHEN NEW.env IS NOT OLD.env THEN 'env,' ELSE '' END ||
        CASE WHEN NEW.workdir IS NOT OLD.workdir THEN 'workdir,' ELSE '' END ||
        CASE WHEN NEW.enabled IS NOT OLD.enabled THEN 'enabled,' ELSE '' END ||
        CASE WHEN NEW.pool IS NOT OLD.pool THEN 'pool,' ELSE '' END ||
        CASE WHEN NEW.misfire IS NOT OLD.misfire THEN 'misfire,' ELSE '' END ||
        CASE WHEN NEW.starting_deadline IS NOT OLD.starting_deadline THEN 'starting_deadline,' ELSE '' END ||
        CASE WHEN NEW.max_catch_up IS NOT OLD.max_catch_up THEN 'max_catch_up,' ELSE '' END ||
        CASE WHEN NEW.retries IS NOT OLD.retries THEN 'retries,' ELSE '' END ||
        CASE WHEN NEW.retry_backoff IS NOT OLD.retry_backoff THEN 'retry_backoff,' ELSE '' END ||
        CASE WHEN NEW.retry_backoff_max IS NOT OLD.retry_backoff_max THEN 'retry_backoff_max,' ELSE '' END ||
        CASE WHEN NEW.timeout IS NOT OLD.timeout THEN 'timeout,' ELSE '' END ||
        CASE WHEN NEW.kill_grace IS NOT OLD.kill_grace THEN 'kill_grace,' ELSE '' END ||
        CASE WHEN NEW.jitter IS NOT OLD.jitter THEN 'jitter,' ELSE '' END ||
        CASE WHEN NEW.on_lease_lost IS NOT OLD.on_lease_lost THEN 'on_lease_lost,' ELSE '' END ||
        CASE WHEN NEW.rerun_lost IS NOT OLD.rerun_lost THEN 'rerun_lost,' ELSE '' END ||
        CASE WHEN NEW.run_user IS NOT OLD.run_user THEN 'run_user,' ELSE '' END ||
        CASE WHEN NEW.run_group IS NOT OLD.run_group THEN 'run_group,' ELSE '' END ||
        CASE WHEN NEW.env_file IS NOT OLD.env_file THEN 'env_file,' ELSE '' END ||
        CASE WHEN NEW.inherit_env IS NOT OLD.inherit_env THEN 'inherit_env,' ELSE '' END ||
        CASE WHEN NEW.limits IS NOT OLD.limits THEN 'limits,' ELSE '' END, ','));
END;

DROP TRIGGER cron_audit_sql_delete;
CREATE TRIGGER cron_audit_sql_delete AFTER DELETE ON cron_table
FOR EACH ROW WHEN OLD.changed_by IS NULL OR OLD.changed_by NOT LIKE 'removing %'
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_delete', OLD.name, 'sql', NULL);
END;

DROP TRIGGER cron_audit_sql_alerts;
CREATE TRIGGER cron_audit_sql_alerts AFTER UPDATE OF alerts ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.alerts IS NOT OLD.alerts
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed alerts');
END;

DROP TRIGGER cron_audit_sql_placement;
CREATE TRIGGER cron_audit_sql_placement AFTER UPDATE OF placement, overlap ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND (NEW.placement IS NOT OLD.placement OR NEW.overlap IS NOT OLD.overlap)
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed placement or overlap');
END;

DROP TRIGGER cron_audit_sql_http;
CREATE TRIGGER cron_audit_sql_http AFTER UPDATE OF http ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.http IS NOT OLD.http
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed http');
END;
