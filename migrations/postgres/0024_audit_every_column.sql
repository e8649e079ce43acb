-- The audit trail's gaps found in a review (docs/security.md, "Audit trail"):
--
-- 1. Columns no audit trigger watched: run_on, template, source, signature, upstream_run and
--    toml_enabled, and a run requested by setting run_now. A SQL change of these is now
--    recorded like any other definition change ('sql_update', 'changed COLUMNS (database user
--    U)'). run_now is recorded only when it is set (0 to non-zero): the daemon clears it when
--    the requested run is released, and that is not a change anybody made.
-- 2. cron_calendars rows: every node reads them, so a SQL insert, update or delete is recorded
--    ('sql_calendar_insert', 'sql_calendar_update', 'sql_calendar_delete', the calendar's name
--    in `job`). The table gets changed_by, vouched for like cron_table's: sqlcron's own writes
--    (a TOML apply) record 'calendar_write' and 'calendar_remove' with the operator.
-- 3. The functions that write a table resolved its name through the caller's search_path: a
--    writer could create a temporary cron_audit first and the trigger's row went there. Each
--    now runs with search_path set to the schema it was created in, pg_temp last.

CREATE FUNCTION cron_audit_sql_more() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed ' || concat_ws(',',
                CASE WHEN NEW.run_on IS DISTINCT FROM OLD.run_on THEN 'run_on' END,
                CASE WHEN NEW.template IS DISTINCT FROM OLD.template THEN 'template' END,
                CASE WHEN NEW.source IS DISTINCT FROM OLD.source THEN 'source' END,
                CASE WHEN NEW.signature IS DISTINCT FROM OLD.signature THEN 'signature' END,
                CASE WHEN NEW.upstream_run IS DISTINCT FROM OLD.upstream_run THEN 'upstream_run' END,
                CASE WHEN NEW.toml_enabled IS DISTINCT FROM OLD.toml_enabled THEN 'toml_enabled' END,
                CASE WHEN NEW.run_now <> 0 AND OLD.run_now = 0 THEN 'run_now' END)
            || ' (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
-- A release names run_now (to clear it after a requested run) but never sets it, so for the
-- daemon's own updates the first comparison ends the test.
CREATE TRIGGER cron_audit_sql_more AFTER UPDATE OF run_on, template, source, signature, upstream_run, toml_enabled, run_now ON cron_table
    FOR EACH ROW
    WHEN ((NEW.run_now <> 0 AND OLD.run_now = 0
           OR NEW.run_on IS DISTINCT FROM OLD.run_on
           OR NEW.template IS DISTINCT FROM OLD.template
           OR NEW.source IS DISTINCT FROM OLD.source
           OR NEW.signature IS DISTINCT FROM OLD.signature
           OR NEW.upstream_run IS DISTINCT FROM OLD.upstream_run
           OR NEW.toml_enabled IS DISTINCT FROM OLD.toml_enabled)
          AND NOT cron_audit_own(NEW.changed_by))
    EXECUTE FUNCTION cron_audit_sql_more();

ALTER TABLE cron_calendars ADD COLUMN changed_by TEXT;

CREATE FUNCTION cron_audit_sql_calendar_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NOT cron_audit_own(NEW.changed_by) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_calendar_insert', NEW.name, 'sql',
                    'database user ' || current_user);
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        IF NOT cron_audit_own(OLD.changed_by) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_calendar_delete', OLD.name, 'sql',
                    'database user ' || current_user);
        END IF;
    ELSIF NOT cron_audit_own(NEW.changed_by)
        AND (NEW.name IS DISTINCT FROM OLD.name OR NEW.entries IS DISTINCT FROM OLD.entries
             OR NEW.from_toml IS DISTINCT FROM OLD.from_toml) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_calendar_update', NEW.name, 'sql',
                'changed ' || concat_ws(',',
                    CASE WHEN NEW.name IS DISTINCT FROM OLD.name THEN 'name' END,
                    CASE WHEN NEW.entries IS DISTINCT FROM OLD.entries THEN 'entries' END,
                    CASE WHEN NEW.from_toml IS DISTINCT FROM OLD.from_toml THEN 'from_toml' END)
                || ' (database user ' || current_user || ')');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_calendar_rows AFTER INSERT OR UPDATE OR DELETE ON cron_calendars
    FOR EACH ROW EXECUTE FUNCTION cron_audit_sql_calendar_rows();

DO $$
DECLARE
    f TEXT;
BEGIN
    FOREACH f IN ARRAY ARRAY['cron_audit_sql', 'cron_audit_sql_alerts', 'cron_audit_sql_placement',
                             'cron_audit_sql_http', 'cron_audit_sql_calendars', 'cron_audit_sql_requires',
                             'cron_audit_sql_after', 'cron_audit_sql_more', 'cron_audit_sql_calendar_rows',
                             'cron_placement_seen', 'cron_calendars_unpark'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%I() SET search_path = %I, pg_temp',
                       current_schema(), f, current_schema());
    END LOOP;
END
$$;
