-- HTTP jobs (README "HTTP jobs"): cron_table.http holds the request as a JSON object with the
-- keys of the TOML table (url, method, headers, body, timeout, success, ca_file, redirects); a
-- row has one of command, argv or http. A change with SQL unparks the row and is audited, as for
-- the other definition columns.
ALTER TABLE cron_table ADD COLUMN http TEXT;

CREATE TRIGGER cron_table_unpark_http AFTER UPDATE OF http ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND NEW.http IS NOT OLD.http
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TRIGGER cron_table_types_http BEFORE UPDATE OF http ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.http must be text or NULL') WHERE NEW.http IS NOT NULL AND typeof(NEW.http) <> 'text';
END;

CREATE TRIGGER cron_table_types_http_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.http must be text or NULL') WHERE NEW.http IS NOT NULL AND typeof(NEW.http) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_http AFTER UPDATE OF http ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.http IS NOT OLD.http
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed http');
END;
