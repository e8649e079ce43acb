-- Job chains (README "Job chains", docs/chains.md). cron_table.after_jobs (`after` in TOML): a JSON array of upstreams,
-- [{"job": "extract", "on": "success", "within": "1h"}]: the job runs once for each finished run
-- of an upstream that matches, as a row of its own named job#after-<run id> (a unique name: made
-- once however many nodes see the run). cron_table.chain_cursor: the daemon's, a JSON object of
-- the last history id looked at per upstream. cron_table.upstream_run: on such a row, its upstream
-- run ({"job", "slot", "run_id", "outcome"}), given to the run as SQLCRON_UPSTREAM_*.
ALTER TABLE cron_table ADD COLUMN after_jobs TEXT;
ALTER TABLE cron_table ADD COLUMN chain_cursor TEXT;
ALTER TABLE cron_table ADD COLUMN upstream_run TEXT;

CREATE TRIGGER cron_table_unpark_after BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND NOT (NEW.after_jobs <=> OLD.after_jobs) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TRIGGER cron_audit_sql_after AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.after_jobs <=> OLD.after_jobs) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed after (database user ', USER(), ')'));
    END IF;
END;
