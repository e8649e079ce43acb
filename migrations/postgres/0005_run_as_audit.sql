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
    id     BIGSERIAL PRIMARY KEY,
    at     BIGINT NOT NULL,
    action TEXT NOT NULL,
    job    TEXT,
    who    TEXT NOT NULL,
    host   TEXT,
    pid    BIGINT,
    detail TEXT
);
CREATE INDEX cron_audit_at ON cron_audit (at);
CREATE INDEX cron_audit_job ON cron_audit (job, at);

CREATE TRIGGER cron_table_unpark_run BEFORE UPDATE OF run_user, run_group, env_file, inherit_env, limits ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND (NEW.run_user IS DISTINCT FROM OLD.run_user
          OR NEW.run_group IS DISTINCT FROM OLD.run_group
          OR NEW.env_file IS DISTINCT FROM OLD.env_file
          OR NEW.inherit_env IS DISTINCT FROM OLD.inherit_env
          OR NEW.limits IS DISTINCT FROM OLD.limits))
    EXECUTE FUNCTION cron_table_unpark();

CREATE FUNCTION cron_audit_sql() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.changed_by IS NULL THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_insert', NEW.name, 'sql', 'database user ' || current_user);
        END IF;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        IF OLD.changed_by IS NULL OR OLD.changed_by NOT LIKE 'removing %' THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_delete', OLD.name, 'sql', 'database user ' || current_user);
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.changed_by IS NOT DISTINCT FROM OLD.changed_by THEN
        changed := concat_ws(',',
            CASE WHEN NEW.name IS DISTINCT FROM OLD.name THEN 'name' END,
            CASE WHEN NEW.schedule IS DISTINCT FROM OLD.schedule THEN 'schedule' END,
            CASE WHEN NEW.timezone IS DISTINCT FROM OLD.timezone THEN 'timezone' END,
            CASE WHEN NEW.command IS DISTINCT FROM OLD.command THEN 'command' END,
            CASE WHEN NEW.argv IS DISTINCT FROM OLD.argv THEN 'argv' END,
            CASE WHEN NEW.env IS DISTINCT FROM OLD.env THEN 'env' END,
            CASE WHEN NEW.workdir IS DISTINCT FROM OLD.workdir THEN 'workdir' END,
            CASE WHEN NEW.enabled IS DISTINCT FROM OLD.enabled THEN 'enabled' END,
            CASE WHEN NEW.pool IS DISTINCT FROM OLD.pool THEN 'pool' END,
            CASE WHEN NEW.misfire IS DISTINCT FROM OLD.misfire THEN 'misfire' END,
            CASE WHEN NEW.starting_deadline IS DISTINCT FROM OLD.starting_deadline THEN 'starting_deadline' END,
            CASE WHEN NEW.max_catch_up IS DISTINCT FROM OLD.max_catch_up THEN 'max_catch_up' END,
            CASE WHEN NEW.retries IS DISTINCT FROM OLD.retries THEN 'retries' END,
            CASE WHEN NEW.retry_backoff IS DISTINCT FROM OLD.retry_backoff THEN 'retry_backoff' END,
            CASE WHEN NEW.retry_backoff_max IS DISTINCT FROM OLD.retry_backoff_max THEN 'retry_backoff_max' END,
            CASE WHEN NEW.timeout IS DISTINCT FROM OLD.timeout THEN 'timeout' END,
            CASE WHEN NEW.kill_grace IS DISTINCT FROM OLD.kill_grace THEN 'kill_grace' END,
            CASE WHEN NEW.jitter IS DISTINCT FROM OLD.jitter THEN 'jitter' END,
            CASE WHEN NEW.on_lease_lost IS DISTINCT FROM OLD.on_lease_lost THEN 'on_lease_lost' END,
            CASE WHEN NEW.rerun_lost IS DISTINCT FROM OLD.rerun_lost THEN 'rerun_lost' END,
            CASE WHEN NEW.run_user IS DISTINCT FROM OLD.run_user THEN 'run_user' END,
            CASE WHEN NEW.run_group IS DISTINCT FROM OLD.run_group THEN 'run_group' END,
            CASE WHEN NEW.env_file IS DISTINCT FROM OLD.env_file THEN 'env_file' END,
            CASE WHEN NEW.inherit_env IS DISTINCT FROM OLD.inherit_env THEN 'inherit_env' END,
            CASE WHEN NEW.limits IS DISTINCT FROM OLD.limits THEN 'limits' END);
        IF changed <> '' THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
                    'changed ' || changed || ' (database user ' || current_user || ')');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_insert_delete AFTER INSERT OR DELETE ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_audit_sql();
CREATE TRIGGER cron_audit_sql_update AFTER UPDATE OF name, schedule, timezone, command, argv, env, workdir, enabled, pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, timeout, kill_grace, jitter, on_lease_lost, rerun_lost, run_user, run_group, env_file, inherit_env, limits ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_audit_sql();
