-- Job chains (README "Job chains", docs/chains.md). cron_table.after_jobs (`after` in TOML): a JSON array of upstreams,
-- [{"job": "extract", "on": "success", "within": "1h"}]: the job runs once for each finished run
-- of an upstream that matches, as a row of its own named job#after-<run id> (a unique name: made
-- once however many nodes see the run). cron_table.chain_cursor: the daemon's, a JSON object of
-- the last history id looked at per upstream. cron_table.upstream_run: on such a row, its upstream
-- run ({"job", "slot", "run_id", "outcome"}), given to the run as SQLCRON_UPSTREAM_*.
ALTER TABLE cron_table ADD COLUMN after_jobs TEXT;
ALTER TABLE cron_table ADD COLUMN chain_cursor TEXT;
ALTER TABLE cron_table ADD COLUMN upstream_run TEXT;

CREATE TRIGGER cron_table_unpark_after AFTER UPDATE OF after_jobs ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND NEW.after_jobs IS NOT OLD.after_jobs
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TRIGGER cron_table_types_after BEFORE UPDATE OF after_jobs ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.after_jobs must be text or NULL') WHERE NEW.after_jobs IS NOT NULL AND typeof(NEW.after_jobs) <> 'text';
END;

CREATE TRIGGER cron_table_types_after_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.after_jobs must be text or NULL') WHERE NEW.after_jobs IS NOT NULL AND typeof(NEW.after_jobs) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_after AFTER UPDATE OF after_jobs ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.after_jobs IS NOT OLD.after_jobs
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed after');
END;
