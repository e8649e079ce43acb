-- The audit trail no longer depends on anything a client can set (issue 49, finding 4).
--
-- Before: a change counted as sqlcron's own, and the triggers wrote nothing, when the row's
-- changed_by equalled the value the connection had put in the session setting sqlcron.marker.
-- Any writer who had read docs/security.md could set it too, and its change left no row.
--
-- Now the triggers record every change of a definition, always: one change of one row, one
-- audit row, whoever made it. Every row of cron_audit, whoever inserts it, carries db_user:
-- what the database itself knows of the writer (session_user, current_user when it differs,
-- and the client's address), set by a trigger of cron_audit that overrides whatever the
-- writer put there.
--
-- sqlcron's own changes say who the operator is: before it writes, sqlcron puts a claim in
-- the session setting sqlcron.claim (JSON: marker, action, who, host, pid, detail), and a
-- trigger that records a row whose changed_by equals the claim's marker takes the action, the
-- operator and the detail from it (and sets sqlcron.recorded to the marker, so that sqlcron
-- writes no second row). A claim is only what the writer says: a writer who sets one changes
-- how its row reads, never whether it is written, nor its db_user; and for an update the
-- columns the database saw change are added to the detail when the claim does not name them.

ALTER TABLE cron_audit ADD COLUMN db_user TEXT;

CREATE FUNCTION cron_audit_db_user() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.db_user := session_user
        || CASE WHEN current_user <> session_user THEN ' as ' || current_user ELSE '' END
        || ' from ' || COALESCE(host(inet_client_addr()), 'local socket');
    RETURN NEW;
END
$$;
CREATE TRIGGER cron_audit_db_user BEFORE INSERT OR UPDATE ON cron_audit
    FOR EACH ROW EXECUTE FUNCTION cron_audit_db_user();

-- The claim this session made for a row marked `marker`, or NULL. A claim that is not JSON
-- fails the writer's own statement.
CREATE FUNCTION cron_audit_claim(marker TEXT) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    claim jsonb := CAST(NULLIF(current_setting('sqlcron.claim', true), '') AS jsonb);
BEGIN
    IF marker IS NULL OR marker = '' OR claim IS NULL OR jsonb_typeof(claim) <> 'object'
        OR claim->>'marker' IS DISTINCT FROM marker THEN
        RETURN NULL;
    END IF;
    RETURN claim;
END
$$;

-- One audit row for one change: `sql_action` what it is called when nobody claims it,
-- `row_name` the job's (or calendar's) name, `changed` the
-- columns an update changed (NULL for an insert or delete), `marker` the row's changed_by.
CREATE FUNCTION cron_audit_record(sql_action TEXT, row_name TEXT, changed TEXT, marker TEXT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    claim jsonb := cron_audit_claim(marker);
    said TEXT := claim->>'detail';
    seen TEXT := CASE WHEN changed IS NULL THEN NULL ELSE 'changed ' || changed END;
BEGIN
    IF claim IS NULL THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), sql_action, row_name, 'sql',
                COALESCE(seen || ' (database user ' || current_user || ')', 'database user ' || current_user));
        RETURN;
    END IF;
    INSERT INTO cron_audit (at, action, job, who, host, pid, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT),
            COALESCE(claim->>'action', sql_action), row_name, COALESCE(claim->>'who', 'sql'), claim->>'host',
            CASE WHEN jsonb_typeof(claim->'pid') = 'number' THEN CAST(claim->>'pid' AS BIGINT) END,
            CASE WHEN seen IS NULL THEN said
                 WHEN said IS NULL THEN seen
                 -- a claim that names every column the database saw change is taken as is
                 WHEN NOT EXISTS (SELECT 1 FROM unnest(string_to_array(changed, ',')) AS c(col)
                                  WHERE strpos(said, c.col) = 0) THEN said
                 ELSE said || ' (the database saw: ' || seen || ')' END);
    PERFORM set_config('sqlcron.recorded', marker, true);
END
$$;

CREATE FUNCTION cron_audit_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM cron_audit_record('sql_insert', NEW.name, NULL, NEW.changed_by);
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM cron_audit_record('sql_delete', OLD.name, NULL, OLD.changed_by);
        RETURN NULL;
    END IF;
    -- run_now only when set (the daemon clears it when the requested run is released);
    -- stop_token only when set to a value (the daemon never writes it).
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
            CASE WHEN NEW.limits IS DISTINCT FROM OLD.limits THEN 'limits' END,
            CASE WHEN NEW.alerts IS DISTINCT FROM OLD.alerts THEN 'alerts' END,
            CASE WHEN NEW.placement IS DISTINCT FROM OLD.placement THEN 'placement' END,
            CASE WHEN NEW.overlap IS DISTINCT FROM OLD.overlap THEN 'overlap' END,
            CASE WHEN NEW.http IS DISTINCT FROM OLD.http THEN 'http' END,
            CASE WHEN NEW.calendars IS DISTINCT FROM OLD.calendars THEN 'calendars' END,
            CASE WHEN NEW.requires IS DISTINCT FROM OLD.requires THEN 'requires' END,
            CASE WHEN NEW.after_jobs IS DISTINCT FROM OLD.after_jobs THEN 'after_jobs' END,
            CASE WHEN NEW.run_on IS DISTINCT FROM OLD.run_on THEN 'run_on' END,
            CASE WHEN NEW.template IS DISTINCT FROM OLD.template THEN 'template' END,
            CASE WHEN NEW.source IS DISTINCT FROM OLD.source THEN 'source' END,
            CASE WHEN NEW.signature IS DISTINCT FROM OLD.signature THEN 'signature' END,
            CASE WHEN NEW.upstream_run IS DISTINCT FROM OLD.upstream_run THEN 'upstream_run' END,
            CASE WHEN NEW.toml_enabled IS DISTINCT FROM OLD.toml_enabled THEN 'toml_enabled' END,
            CASE WHEN NEW.run_now <> 0 AND OLD.run_now = 0 THEN 'run_now' END,
            CASE WHEN NEW.stop_token IS NOT NULL AND NEW.stop_token IS DISTINCT FROM OLD.stop_token THEN 'stop_token' END);
    IF changed <> '' THEN
        PERFORM cron_audit_record('sql_update', NEW.name, changed, NEW.changed_by);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER cron_audit_sql_insert_delete ON cron_table;
DROP TRIGGER cron_audit_sql_update ON cron_table;
DROP TRIGGER cron_audit_sql_alerts ON cron_table;
DROP TRIGGER cron_audit_sql_placement ON cron_table;
DROP TRIGGER cron_audit_sql_http ON cron_table;
DROP TRIGGER cron_audit_sql_calendars ON cron_table;
DROP TRIGGER cron_audit_sql_requires ON cron_table;
DROP TRIGGER cron_audit_sql_after ON cron_table;
DROP TRIGGER cron_audit_sql_more ON cron_table;
DROP FUNCTION cron_audit_sql();
DROP FUNCTION cron_audit_sql_alerts();
DROP FUNCTION cron_audit_sql_placement();
DROP FUNCTION cron_audit_sql_http();
DROP FUNCTION cron_audit_sql_calendars();
DROP FUNCTION cron_audit_sql_requires();
DROP FUNCTION cron_audit_sql_after();
DROP FUNCTION cron_audit_sql_more();

CREATE TRIGGER cron_audit_change_insert_delete AFTER INSERT OR DELETE ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_audit_change();
-- A claim, lease extension or release names none of these columns but run_now, which it
-- only clears: the function then finds nothing changed and writes nothing.
CREATE TRIGGER cron_audit_change_update AFTER UPDATE OF name, schedule, timezone, command, argv, env, workdir, enabled, pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, timeout, kill_grace, jitter, on_lease_lost, rerun_lost, run_user, run_group, env_file, inherit_env, limits, alerts, placement, overlap, http, calendars, requires, after_jobs, run_on, template, source, signature, upstream_run, toml_enabled, run_now, stop_token ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_audit_change();

CREATE OR REPLACE FUNCTION cron_audit_sql_calendar_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM cron_audit_record('sql_calendar_insert', NEW.name, NULL, NEW.changed_by);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM cron_audit_record('sql_calendar_delete', OLD.name, NULL, OLD.changed_by);
    ELSIF NEW.name IS DISTINCT FROM OLD.name OR NEW.entries IS DISTINCT FROM OLD.entries
          OR NEW.from_toml IS DISTINCT FROM OLD.from_toml THEN
        PERFORM cron_audit_record('sql_calendar_update', NEW.name,
            concat_ws(',',
                CASE WHEN NEW.name IS DISTINCT FROM OLD.name THEN 'name' END,
                CASE WHEN NEW.entries IS DISTINCT FROM OLD.entries THEN 'entries' END,
                CASE WHEN NEW.from_toml IS DISTINCT FROM OLD.from_toml THEN 'from_toml' END),
            NEW.changed_by);
    END IF;
    RETURN NULL;
END
$$;
DROP FUNCTION cron_audit_own(TEXT);

-- As in migration 0024: each function runs with the schema it was made in first and pg_temp
-- last, so that a writer's temporary cron_audit or its own current_setting() is never used.
DO $$
DECLARE
    f TEXT;
BEGIN
    FOREACH f IN ARRAY ARRAY['cron_audit_db_user', 'cron_audit_change', 'cron_audit_sql_calendar_rows'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%I() SET search_path = %I, pg_temp',
                       current_schema(), f, current_schema());
    END LOOP;
    EXECUTE format('ALTER FUNCTION %I.cron_audit_record(TEXT, TEXT, TEXT, TEXT) SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$$;
ALTER FUNCTION cron_audit_claim(TEXT) SET search_path = pg_catalog, pg_temp;
