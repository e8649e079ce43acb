-- Alerts (docs/alerts.md). cron_table.alerts: JSON object of a job's hooks (on_failure,
-- on_success, on_missed, on_recovery), alert_after and ping_url; NULL: the [defaults].
-- cron_events: one row per event, made once from the history (dedupe is unique) and delivered
-- under a fenced lease (node, token, next_try) like a run. cron_watch: the dead-man's switch's
-- state per job. cron_duties.position: how far the event scan has read the history (ended).
ALTER TABLE cron_table ADD COLUMN alerts TEXT;
ALTER TABLE cron_duties ADD COLUMN position BIGINT;
INSERT INTO cron_duties (name) VALUES ('alerts');

CREATE TABLE cron_events (
    id       BIGSERIAL PRIMARY KEY,
    dedupe   TEXT NOT NULL UNIQUE,
    job_name TEXT NOT NULL,
    kind     TEXT NOT NULL,
    run_id   BIGINT,
    created  BIGINT NOT NULL,
    hook     TEXT NOT NULL,
    payload  TEXT NOT NULL,
    state    TEXT NOT NULL,
    next_try BIGINT,
    tries    BIGINT NOT NULL DEFAULT 0,
    node     TEXT,
    token    BIGINT NOT NULL DEFAULT 0,
    sent     BIGINT,
    error    TEXT
);
CREATE INDEX cron_events_due ON cron_events (next_try);
CREATE INDEX cron_events_job ON cron_events (job_name, id);
CREATE INDEX cron_events_created ON cron_events (created);

CREATE TABLE cron_watch (
    job_name  TEXT PRIMARY KEY,
    since     BIGINT NOT NULL,
    last_ok   BIGINT,
    fired_for BIGINT
);

-- A parked row is un-parked by a change of its alerts, as of its other definition columns.
CREATE TRIGGER cron_table_unpark_alerts BEFORE UPDATE OF alerts ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND NEW.alerts IS DISTINCT FROM OLD.alerts)
    EXECUTE FUNCTION cron_table_unpark();

CREATE FUNCTION cron_audit_sql_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed alerts (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_alerts AFTER UPDATE OF alerts ON cron_table
    FOR EACH ROW
    WHEN (NEW.changed_by IS NOT DISTINCT FROM OLD.changed_by AND NEW.alerts IS DISTINCT FROM OLD.alerts)
    EXECUTE FUNCTION cron_audit_sql_alerts();
