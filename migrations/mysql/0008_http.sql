-- HTTP jobs (README "HTTP jobs"): cron_table.http holds the request as a JSON object with the
-- keys of the TOML table (url, method, headers, body, timeout, success, ca_file, redirects); a
-- row has one of command, argv or http. A change with SQL unparks the row and is audited, as for
-- the other definition columns.
ALTER TABLE cron_table ADD COLUMN http TEXT;

CREATE TRIGGER cron_table_unpark_http BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND NOT (NEW.http <=> OLD.http) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TRIGGER cron_audit_sql_http AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF (NEW.changed_by <=> OLD.changed_by) AND NOT (NEW.http <=> OLD.http) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed http (database user ', CURRENT_USER(), ')'));
    END IF;
END;
