-- HTTP jobs (README "HTTP jobs"): cron_table.http holds the request as a JSON object with the
-- keys of the TOML table (url, method, headers, body, timeout, success, ca_file, redirects); a
-- row has one of command, argv or http. A change with SQL unparks the row and is audited, as for
-- the other definition columns.
ALTER TABLE cron_table ADD COLUMN http TEXT;

CREATE TRIGGER cron_table_unpark_http BEFORE UPDATE OF http ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND NEW.http IS DISTINCT FROM OLD.http)
    EXECUTE FUNCTION cron_table_unpark();

CREATE FUNCTION cron_audit_sql_http() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed http (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_http AFTER UPDATE OF http ON cron_table
    FOR EACH ROW
    WHEN (NEW.changed_by IS NOT DISTINCT FROM OLD.changed_by AND NEW.http IS DISTINCT FROM OLD.http)
    EXECUTE FUNCTION cron_audit_sql_http();
