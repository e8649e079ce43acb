-- A scheduled job's upstreams (README "Job chains", docs/chains.md): cron_table.requires, a JSON
-- array such as [{"job": "extract", "within": "6h"}]: a slot runs only once each upstream has
-- succeeded within that time before it, waiting at most until its start deadline.
ALTER TABLE cron_table ADD COLUMN requires TEXT;

CREATE TRIGGER cron_table_unpark_requires AFTER UPDATE OF requires ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND NEW.requires IS NOT OLD.requires
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TRIGGER cron_table_types_requires BEFORE UPDATE OF requires ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.requires must be text or NULL') WHERE NEW.requires IS NOT NULL AND typeof(NEW.requires) <> 'text';
END;

CREATE TRIGGER cron_table_types_requires_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.requires must be text or NULL') WHERE NEW.requires IS NOT NULL AND typeof(NEW.requires) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_requires AFTER UPDATE OF requires ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.requires IS NOT OLD.requires
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed requires');
END;
