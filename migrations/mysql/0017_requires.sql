-- A scheduled job's upstreams (README "Job chains", docs/chains.md): cron_table.requires, a JSON
-- array such as [{"job": "extract", "within": "6h"}]: a slot runs only once each upstream has
-- succeeded within that time before it, waiting at most until its start deadline.
ALTER TABLE cron_table ADD COLUMN requires TEXT;

CREATE TRIGGER cron_table_unpark_requires BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND NOT (NEW.requires <=> OLD.requires) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TRIGGER cron_audit_sql_requires AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.requires <=> OLD.requires) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed requires (database user ', USER(), ')'));
    END IF;
END;
