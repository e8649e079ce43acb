-- The audit trail's gaps found in a review (docs/security.md, "Audit trail"):
--
-- 1. Columns no audit trigger watched: run_on, template, source, signature, upstream_run and
--    toml_enabled, a run requested by setting run_now, and a stop requested by setting
--    stop_token. A SQL change of these is now recorded like any other definition change
--    ('sql_update', 'changed COLUMNS (database user U)'). run_now is recorded only when it is
--    set (0 to non-zero): the daemon clears it when the requested run is released, and that is
--    not a change anybody made; stop_token only when set to a value (the daemon never writes it).
-- 2. cron_calendars rows: every node reads them, so a SQL insert, update or delete is recorded
--    ('sql_calendar_insert', 'sql_calendar_update', 'sql_calendar_delete', the calendar's name
--    in `job`). The table gets changed_by, vouched for like cron_table's: sqlcron's own writes
--    (a TOML apply) record 'calendar_write' and 'calendar_remove' with the operator.
-- 3. TRUNCATE fires no row trigger: a statement trigger records 'sql_truncate' (`job`: the
--    table's name) for cron_table and cron_calendars. sqlcron never truncates them.
-- 4. The functions that write or read a table resolved its name through the caller's
--    search_path: a writer could create a temporary cron_audit first and the trigger's row went
--    there. Each now runs with search_path set to the schema it was created in, pg_temp last.
--    cron_audit_own(), which the triggers' WHEN clauses call, resolved current_setting() there
--    too: a writer who may create a schema could put a current_setting() of its own first and
--    answer its forged marker. It now runs with pg_catalog, pg_temp.

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
                CASE WHEN NEW.run_now <> 0 AND OLD.run_now = 0 THEN 'run_now' END,
                CASE WHEN NEW.stop_token IS NOT NULL AND NEW.stop_token IS DISTINCT FROM OLD.stop_token THEN 'stop_token' END)
            || ' (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
-- A release names run_now (to clear it after a requested run) but never sets it, so for the
-- daemon's own updates the first comparison ends the test.
CREATE TRIGGER cron_audit_sql_more AFTER UPDATE OF run_on, template, source, signature, upstream_run, toml_enabled, run_now, stop_token ON cron_table
    FOR EACH ROW
    WHEN ((NEW.run_now <> 0 AND OLD.run_now = 0
           OR NEW.run_on IS DISTINCT FROM OLD.run_on
           OR NEW.template IS DISTINCT FROM OLD.template
           OR NEW.source IS DISTINCT FROM OLD.source
           OR NEW.signature IS DISTINCT FROM OLD.signature
           OR NEW.upstream_run IS DISTINCT FROM OLD.upstream_run
           OR NEW.toml_enabled IS DISTINCT FROM OLD.toml_enabled
           OR NEW.stop_token IS NOT NULL AND NEW.stop_token IS DISTINCT FROM OLD.stop_token)
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

CREATE FUNCTION cron_audit_sql_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_truncate', TG_TABLE_NAME, 'sql',
            'database user ' || current_user);
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_truncate AFTER TRUNCATE ON cron_table
    FOR EACH STATEMENT EXECUTE FUNCTION cron_audit_sql_truncate();
CREATE TRIGGER cron_audit_sql_truncate AFTER TRUNCATE ON cron_calendars
    FOR EACH STATEMENT EXECUTE FUNCTION cron_audit_sql_truncate();

DO $$
DECLARE
    f TEXT;
BEGIN
    FOREACH f IN ARRAY ARRAY['cron_audit_sql', 'cron_audit_sql_alerts', 'cron_audit_sql_placement',
                             'cron_audit_sql_http', 'cron_audit_sql_calendars', 'cron_audit_sql_requires',
                             'cron_audit_sql_after', 'cron_audit_sql_more', 'cron_audit_sql_calendar_rows',
                             'cron_audit_sql_truncate',
                             'cron_placement_seen', 'cron_calendars_unpark', 'cron_lock_wake'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%I() SET search_path = %I, pg_temp',
                       current_schema(), f, current_schema());
    END LOOP;
END
$$;
ALTER FUNCTION cron_audit_own(TEXT) SET search_path = pg_catalog, pg_temp;
