-- A scheduled job's upstreams (README "Job chains", docs/chains.md): cron_table.requires, a JSON
-- array such as [{"job": "extract", "within": "6h"}]: a slot runs only once each upstream has
-- succeeded within that time before it, waiting at most until its start deadline.
ALTER TABLE cron_table ADD COLUMN requires TEXT;

CREATE TRIGGER cron_table_unpark_requires BEFORE UPDATE OF requires ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND NEW.requires IS DISTINCT FROM OLD.requires)
    EXECUTE FUNCTION cron_table_unpark();

CREATE FUNCTION cron_audit_sql_requires() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed requires (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_requires AFTER UPDATE OF requires ON cron_table
    FOR EACH ROW
    WHEN (NOT cron_audit_own(NEW.changed_by) AND NEW.requires IS DISTINCT FROM OLD.requires)
    EXECUTE FUNCTION cron_audit_sql_requires();
