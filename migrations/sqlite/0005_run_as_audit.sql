-- Jobs run as a user with limits, and an audit trail.
-- run_user / run_group: the account a job runs as; env_file: a file of KEY=VALUE lines read by
-- the daemon at each run (a job's own secrets); inherit_env: JSON array of the daemon's variables
-- a job also gets; limits: JSON object of resource limits.
-- changed_by: who last changed the row's definition through sqlcron (a fresh value per change),
-- so that the audit triggers record only the changes made with plain SQL.
-- cron_audit: one row per operator action (sqlcron run / pause / resume / apply, lock broken) and
-- per definition change made with SQL, as the triggers below see it.
ALTER TABLE cron_table ADD COLUMN run_user TEXT;
ALTER TABLE cron_table ADD COLUMN run_group TEXT;
ALTER TABLE cron_table ADD COLUMN env_file TEXT;
ALTER TABLE cron_table ADD COLUMN inherit_env TEXT;
ALTER TABLE cron_table ADD COLUMN limits TEXT;
ALTER TABLE cron_table ADD COLUMN changed_by TEXT;

CREATE TABLE cron_audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    action TEXT NOT NULL,
    job    TEXT,
    who    TEXT NOT NULL,
    host   TEXT,
    pid    INTEGER,
    detail TEXT
);
CREATE INDEX cron_audit_at ON cron_audit (at);
CREATE INDEX cron_audit_job ON cron_audit (job, at);

CREATE TRIGGER cron_table_unpark_run AFTER UPDATE OF run_user, run_group, env_file, inherit_env, limits ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND (NEW.run_user IS NOT OLD.run_user
    OR NEW.run_group IS NOT OLD.run_group
    OR NEW.env_file IS NOT OLD.env_file
    OR NEW.inherit_env IS NOT OLD.inherit_env
    OR NEW.limits IS NOT OLD.limits)
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TRIGGER cron_table_types_run_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.run_user must be text or NULL') WHERE NEW.run_user IS NOT NULL AND typeof(NEW.run_user) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.run_group must be text or NULL') WHERE NEW.run_group IS NOT NULL AND typeof(NEW.run_group) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.env_file must be text or NULL') WHERE NEW.env_file IS NOT NULL AND typeof(NEW.env_file) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.inherit_env must be text or NULL') WHERE NEW.inherit_env IS NOT NULL AND typeof(NEW.inherit_env) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.limits must be text or NULL') WHERE NEW.limits IS NOT NULL AND typeof(NEW.limits) <> 'text';
END;

CREATE TRIGGER cron_table_types_run_update BEFORE UPDATE OF run_user, run_group, env_file, inherit_env, limits ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.run_user must be text or NULL') WHERE NEW.run_user IS NOT NULL AND typeof(NEW.run_user) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.run_group must be text or NULL') WHERE NEW.run_group IS NOT NULL AND typeof(NEW.run_group) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.env_file must be text or NULL') WHERE NEW.env_file IS NOT NULL AND typeof(NEW.env_file) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.inherit_env must be text or NULL') WHERE NEW.inherit_env IS NOT NULL AND typeof(NEW.inherit_env) <> 'text';
    SELECT RAISE(ABORT, 'cron_table.limits must be text or NULL') WHERE NEW.limits IS NOT NULL AND typeof(NEW.limits) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_insert AFTER INSERT ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS NULL
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'sql_insert', NEW.name, 'sql', NULL);
END;

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
    VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed ' || rtrim(
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

CREATE TRIGGER cron_audit_sql_delete AFTER DELETE ON cron_table
FOR EACH ROW WHEN OLD.changed_by IS NULL OR OLD.changed_by NOT LIKE 'removing %'
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'sql_delete', OLD.name, 'sql', NULL);
END;
