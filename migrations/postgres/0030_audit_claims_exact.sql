-- A claim whose text held the database's own column list anywhere was taken as written
-- (migration 0027 compared with strpos), so a writer could put the list inside a longer text
-- ("reason: nothing, changed command,env was a typo") and no list was appended after it. An
-- update's claim is now taken as is only when it is exactly "changed " and the list; any
-- other text is followed by "(the database saw: changed ...)".

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
                 -- an update's claim is taken as is only when it is the database's
                 -- own words, exactly ("changed command,env")
                 WHEN changed IS NOT NULL AND said = seen THEN said
                 ELSE said || ' (the database saw: ' || seen || ')' END);
    PERFORM set_config('sqlcron.recorded', marker, true);
END
$$;

-- CREATE OR REPLACE resets the search_path that 0026 set: set it again, so that the function
-- resolves no name (cron_audit, its sequence) in a writer's temporary or own schema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.cron_audit_record(TEXT, TEXT, TEXT, TEXT) SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$$;
