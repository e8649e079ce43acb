-- Alerts (docs/alerts.md). cron_table.alerts: JSON object of a job's hooks (on_failure,
-- on_success, on_missed, on_recovery), alert_after and ping_url; NULL: the [defaults].
-- cron_events: one row per event, made once from the history (dedupe is unique) and delivered
-- under a fenced lease (node, token, next_try) like a run. cron_watch: the dead-man's switch's
-- state per job. cron_duties.position: how far the event scan has read the history (ended).
ALTER TABLE cron_table ADD COLUMN alerts TEXT;
ALTER TABLE cron_duties ADD COLUMN position INTEGER;
INSERT INTO cron_duties (name) VALUES ('alerts');

CREATE TABLE cron_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe   TEXT NOT NULL UNIQUE,
    job_name TEXT NOT NULL,
    kind     TEXT NOT NULL,
    run_id   INTEGER,
    created  INTEGER NOT NULL,
    hook     TEXT NOT NULL,
    payload  TEXT NOT NULL,
    state    TEXT NOT NULL,
    next_try INTEGER,
    tries    INTEGER NOT NULL DEFAULT 0,
    node     TEXT,
    token    INTEGER NOT NULL DEFAULT 0,
    sent     INTEGER,
    error    TEXT
);
CREATE INDEX cron_events_due ON cron_events (next_try);
CREATE INDEX cron_events_job ON cron_events (job_name, id);
CREATE INDEX cron_events_created ON cron_events (created);

CREATE TABLE cron_watch (
    job_name  TEXT PRIMARY KEY,
    since     INTEGER NOT NULL,
    last_ok   INTEGER,
    fired_for INTEGER
);

CREATE TRIGGER cron_table_unpark_alerts AFTER UPDATE OF alerts ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND NEW.alerts IS NOT OLD.alerts
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TRIGGER cron_table_types_alerts BEFORE UPDATE OF alerts ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.alerts must be text or NULL') WHERE NEW.alerts IS NOT NULL AND typeof(NEW.alerts) <> 'text';
END;

CREATE TRIGGER cron_table_types_alerts_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.alerts must be text or NULL') WHERE NEW.alerts IS NOT NULL AND typeof(NEW.alerts) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_alerts AFTER UPDATE OF alerts ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.alerts IS NOT OLD.alerts
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed alerts');
END;
