-- The audit trail cannot be skipped by a column: a change counts as sqlcron's own (and is
-- recorded by sqlcron with the operator and the action, not by these triggers) only when the row's
-- changed_by equals the marker the writing connection vouched for with
-- `set_config('sqlcron.marker', ..., true)` in the same transaction. Any other insert, update or
-- delete is recorded as a SQL change with the database user, whatever changed_by says.

CREATE FUNCTION cron_audit_own(marker TEXT) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT marker IS NOT NULL AND marker <> '' AND marker = current_setting('sqlcron.marker', true)
$$;

CREATE OR REPLACE FUNCTION cron_audit_sql() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NOT cron_audit_own(NEW.changed_by) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_insert', NEW.name, 'sql', 'database user ' || current_user);
        END IF;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        IF NOT cron_audit_own(OLD.changed_by) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_delete', OLD.name, 'sql', 'database user ' || current_user);
        END IF;
        RETURN NULL;
    END IF;
    IF NOT cron_audit_own(NEW.changed_by) THEN
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

DROP TRIGGER cron_audit_sql_alerts ON cron_table;
CREATE TRIGGER cron_audit_sql_alerts AFTER UPDATE OF alerts ON cron_table
    FOR EACH ROW
    WHEN (NOT cron_audit_own(NEW.changed_by) AND NEW.alerts IS DISTINCT FROM OLD.alerts)
    EXECUTE FUNCTION cron_audit_sql_alerts();

DROP TRIGGER cron_audit_sql_placement ON cron_table;
CREATE TRIGGER cron_audit_sql_placement AFTER UPDATE OF placement, overlap ON cron_table
    FOR EACH ROW
    WHEN (NOT cron_audit_own(NEW.changed_by) AND (NEW.placement IS DISTINCT FROM OLD.placement
                                                 OR NEW.overlap IS DISTINCT FROM OLD.overlap))
    EXECUTE FUNCTION cron_audit_sql_placement();

DROP TRIGGER cron_audit_sql_http ON cron_table;
CREATE TRIGGER cron_audit_sql_http AFTER UPDATE OF http ON cron_table
    FOR EACH ROW
    WHEN (NOT cron_audit_own(NEW.changed_by) AND NEW.http IS DISTINCT FROM OLD.http)
    EXECUTE FUNCTION cron_audit_sql_http();
