-- Alerts (docs/alerts.md). cron_table.alerts: JSON object of a job's hooks (on_failure,
-- on_success, on_missed, on_recovery), alert_after and ping_url; NULL: the [defaults].
-- cron_events: one row per event, made once from the history (dedupe is unique) and delivered
-- under a fenced lease (node, token, next_try) like a run. cron_watch: the dead-man's switch's
-- state per job. cron_duties.position: how far the event scan has read the history (ended).
ALTER TABLE cron_table ADD COLUMN alerts TEXT;
ALTER TABLE cron_duties ADD COLUMN position BIGINT;
INSERT INTO cron_duties (name) VALUES ('alerts');

CREATE TABLE cron_events (
    id       BIGINT AUTO_INCREMENT PRIMARY KEY,
    dedupe   VARCHAR(255) NOT NULL UNIQUE,
    job_name VARCHAR(191) NOT NULL,
    kind     VARCHAR(16) NOT NULL,
    run_id   BIGINT,
    created  BIGINT NOT NULL,
    hook     TEXT NOT NULL,
    payload  MEDIUMTEXT NOT NULL,
    state    VARCHAR(16) NOT NULL,
    next_try BIGINT,
    tries    BIGINT NOT NULL DEFAULT 0,
    node     VARCHAR(255),
    token    BIGINT NOT NULL DEFAULT 0,
    sent     BIGINT,
    error    TEXT,
    INDEX cron_events_due (next_try),
    INDEX cron_events_job (job_name, id),
    INDEX cron_events_created (created)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE cron_watch (
    job_name  VARCHAR(191) PRIMARY KEY,
    since     BIGINT NOT NULL,
    last_ok   BIGINT,
    fired_for BIGINT
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TRIGGER cron_table_unpark_alerts BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND NOT (NEW.alerts <=> OLD.alerts) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TRIGGER cron_audit_sql_alerts AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF (NEW.changed_by <=> OLD.changed_by) AND NOT (NEW.alerts <=> OLD.alerts) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed alerts (database user ', CURRENT_USER(), ')'));
    END IF;
END;
