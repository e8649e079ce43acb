-- Two holes a writer with the editor's grants could use in the trail of migration 0026.
--
-- 1. An audit row's id is the database's, always. The editor may insert into cron_audit (the
--    CLI's actions that change no definition write their row directly), and could pick ids:
--    the next ones of the sequence, so that every later audited change (sqlcron pause
--    included) failed on the primary key, or the largest. The trigger that sets db_user now
--    also takes the id from the sequence, whatever the writer put there.
-- 2. A claim is taken as written only when it holds the list of the columns the database saw
--    change, as the database writes it (`command,env,run_user`): "commander" no longer covers
--    command, nor "environment" env, nor "run_user-policy" run_user. A
--    claimed insert or delete always says what the database saw ("an insert", "a delete"),
--    so a claim called `pause` cannot pass off a new job or a removed one.

CREATE OR REPLACE FUNCTION cron_audit_db_user() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.id := nextval(pg_get_serial_sequence('cron_audit', 'id'));
    ELSE
        NEW.id := OLD.id;
    END IF;
    NEW.db_user := session_user
        || CASE WHEN current_user <> session_user THEN ' as ' || current_user ELSE '' END
        || ' from ' || COALESCE(host(inet_client_addr()), 'local socket');
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION cron_audit_record(sql_action TEXT, row_name TEXT, changed TEXT, marker TEXT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    claim jsonb := cron_audit_claim(marker);
    said TEXT := claim->>'detail';
    seen TEXT := CASE WHEN changed IS NOT NULL THEN 'changed ' || changed
                      WHEN sql_action LIKE '%insert' THEN 'an insert'
                      WHEN sql_action LIKE '%delete' THEN 'a delete' END;
BEGIN
    IF claim IS NULL THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), sql_action, row_name, 'sql',
                CASE WHEN changed IS NULL THEN 'database user ' || current_user
                     ELSE seen || ' (database user ' || current_user || ')' END);
        RETURN;
    END IF;
    INSERT INTO cron_audit (at, action, job, who, host, pid, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT),
            COALESCE(claim->>'action', sql_action), row_name, COALESCE(claim->>'who', 'sql'), claim->>'host',
            CASE WHEN jsonb_typeof(claim->'pid') = 'number' THEN CAST(claim->>'pid' AS BIGINT) END,
            CASE WHEN said IS NULL THEN seen
                 WHEN seen IS NULL THEN said
                 -- an update's claim that holds the database's own list word for word
                 -- ("changed command,env") is taken as is
                 WHEN changed IS NOT NULL AND strpos(said, changed) > 0 THEN said
                 ELSE said || ' (the database saw: ' || seen || ')' END);
    PERFORM set_config('sqlcron.recorded', marker, true);
END
$$;

-- CREATE OR REPLACE resets what the command does not name, the search_path that 0026 set
-- included: set it again, so that neither function resolves a name (cron_audit, its
-- sequence, host()) in a writer's temporary or own schema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.cron_audit_db_user() SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
    EXECUTE format('ALTER FUNCTION %I.cron_audit_record(TEXT, TEXT, TEXT, TEXT) SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$$;
