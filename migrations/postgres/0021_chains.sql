-- Job chains (README "Job chains", docs/chains.md). cron_table.after_jobs (`after` in TOML): a JSON array of upstreams,
-- [{"job": "extract", "on": "success", "within": "1h"}]: the job runs once for each finished run
-- of an upstream that matches, as a row of its own named job#after-<run id> (a unique name: made
-- once however many nodes see the run). cron_table.chain_cursor: the daemon's, a JSON object of
-- the last history id looked at per upstream. cron_table.upstream_run: on such a row, its upstream
-- run ({"job", "slot", "run_id", "outcome"}), given to the run as SQLCRON_UPSTREAM_*.
ALTER TABLE cron_table ADD COLUMN after_jobs TEXT;
ALTER TABLE cron_table ADD COLUMN chain_cursor TEXT;
ALTER TABLE cron_table ADD COLUMN upstream_run TEXT;

CREATE TRIGGER cron_table_unpark_after BEFORE UPDATE OF after_jobs ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND NEW.after_jobs IS DISTINCT FROM OLD.after_jobs)
    EXECUTE FUNCTION cron_table_unpark();

CREATE FUNCTION cron_audit_sql_after() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed after (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_after AFTER UPDATE OF after_jobs ON cron_table
    FOR EACH ROW
    WHEN (NOT cron_audit_own(NEW.changed_by) AND NEW.after_jobs IS DISTINCT FROM OLD.after_jobs)
    EXECUTE FUNCTION cron_audit_sql_after();
