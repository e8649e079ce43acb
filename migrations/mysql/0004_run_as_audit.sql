-- Jobs run as a user with limits, and an audit trail.
-- run_user / run_group: the account a job runs as; env_file: a file of KEY=VALUE lines read by
-- the daemon at each run (a job's own secrets); inherit_env: JSON array of the daemon's variables
-- a job also gets; limits: JSON object of resource limits.
-- changed_by: who last changed the row's definition through sqlcron (a fresh value per change),
-- so that the audit triggers record only the changes made with plain SQL.
-- cron_audit: one row per operator action (sqlcron run / pause / resume / apply, lock broken) and
-- per definition change made with SQL, as the triggers below see it.
ALTER TABLE cron_table ADD COLUMN run_user TEXT;
ALTER TABLE cron_table ADD COLUMN run_group TEXT;
ALTER TABLE cron_table ADD COLUMN env_file TEXT;
ALTER TABLE cron_table ADD COLUMN inherit_env TEXT;
ALTER TABLE cron_table ADD COLUMN limits TEXT;
ALTER TABLE cron_table ADD COLUMN changed_by TEXT;

CREATE TABLE cron_audit (
    id     BIGINT AUTO_INCREMENT PRIMARY KEY,
    at     BIGINT NOT NULL,
    action VARCHAR(32) NOT NULL,
    job    VARCHAR(191),
    who    VARCHAR(255) NOT NULL,
    host   VARCHAR(255),
    pid    BIGINT,
    detail TEXT,
    INDEX cron_audit_at (at),
    INDEX cron_audit_job (job, at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

DROP TRIGGER cron_table_changed;

CREATE TRIGGER cron_table_changed BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.schedule <=> OLD.schedule) OR NOT (NEW.timezone <=> OLD.timezone)
        OR NOT (NEW.command <=> OLD.command) OR NOT (NEW.argv <=> OLD.argv)
        OR (OLD.error IS NOT NULL AND NOT (NEW.env <=> OLD.env
            AND NEW.workdir <=> OLD.workdir
            AND NEW.enabled <=> OLD.enabled
            AND NEW.pool <=> OLD.pool
            AND NEW.misfire <=> OLD.misfire
            AND NEW.starting_deadline <=> OLD.starting_deadline
            AND NEW.max_catch_up <=> OLD.max_catch_up
            AND NEW.retries <=> OLD.retries
            AND NEW.retry_backoff <=> OLD.retry_backoff
            AND NEW.retry_backoff_max <=> OLD.retry_backoff_max
            AND NEW.timeout <=> OLD.timeout
            AND NEW.kill_grace <=> OLD.kill_grace
            AND NEW.jitter <=> OLD.jitter
            AND NEW.on_lease_lost <=> OLD.on_lease_lost
            AND NEW.rerun_lost <=> OLD.rerun_lost
            AND NEW.run_user <=> OLD.run_user
            AND NEW.run_group <=> OLD.run_group
            AND NEW.env_file <=> OLD.env_file
            AND NEW.inherit_env <=> OLD.inherit_env
            AND NEW.limits <=> OLD.limits)) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TRIGGER cron_audit_sql_insert AFTER INSERT ON cron_table FOR EACH ROW
BEGIN
    IF NEW.changed_by IS NULL THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_insert', NEW.name, 'sql', CONCAT('database user ', CURRENT_USER()));
    END IF;
END;

CREATE TRIGGER cron_audit_sql_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF (NEW.changed_by <=> OLD.changed_by) AND (NOT (NEW.name <=> OLD.name)
        OR NOT (NEW.schedule <=> OLD.schedule)
        OR NOT (NEW.timezone <=> OLD.timezone)
        OR NOT (NEW.command <=> OLD.command)
        OR NOT (NEW.argv <=> OLD.argv)
        OR NOT (NEW.env <=> OLD.env)
        OR NOT (NEW.workdir <=> OLD.workdir)
        OR NOT (NEW.enabled <=> OLD.enabled)
        OR NOT (NEW.pool <=> OLD.pool)
        OR NOT (NEW.misfire <=> OLD.misfire)
        OR NOT (NEW.starting_deadline <=> OLD.starting_deadline)
        OR NOT (NEW.max_catch_up <=> OLD.max_catch_up)
        OR NOT (NEW.retries <=> OLD.retries)
        OR NOT (NEW.retry_backoff <=> OLD.retry_backoff)
        OR NOT (NEW.retry_backoff_max <=> OLD.retry_backoff_max)
        OR NOT (NEW.timeout <=> OLD.timeout)
        OR NOT (NEW.kill_grace <=> OLD.kill_grace)
        OR NOT (NEW.jitter <=> OLD.jitter)
        OR NOT (NEW.on_lease_lost <=> OLD.on_lease_lost)
        OR NOT (NEW.rerun_lost <=> OLD.rerun_lost)
        OR NOT (NEW.run_user <=> OLD.run_user)
        OR NOT (NEW.run_group <=> OLD.run_group)
        OR NOT (NEW.env_file <=> OLD.env_file)
        OR NOT (NEW.inherit_env <=> OLD.inherit_env)
        OR NOT (NEW.limits <=> OLD.limits)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',',
            IF(NEW.name <=> OLD.name, NULL, 'name'),
            IF(NEW.schedule <=> OLD.schedule, NULL, 'schedule'),
            IF(NEW.timezone <=> OLD.timezone, NULL, 'timezone'),
            IF(NEW.command <=> OLD.command, NULL, 'command'),
            IF(NEW.argv <=> OLD.argv, NULL, 'argv'),
            IF(NEW.env <=> OLD.env, NULL, 'env'),
            IF(NEW.workdir <=> OLD.workdir, NULL, 'workdir'),
            IF(NEW.enabled <=> OLD.enabled, NULL, 'enabled'),
            IF(NEW.pool <=> OLD.pool, NULL, 'pool'),
            IF(NEW.misfire <=> OLD.misfire, NULL, 'misfire'),
            IF(NEW.starting_deadline <=> OLD.starting_deadline, NULL, 'starting_deadline'),
            IF(NEW.max_catch_up <=> OLD.max_catch_up, NULL, 'max_catch_up'),
            IF(NEW.retries <=> OLD.retries, NULL, 'retries'),
            IF(NEW.retry_backoff <=> OLD.retry_backoff, NULL, 'retry_backoff'),
            IF(NEW.retry_backoff_max <=> OLD.retry_backoff_max, NULL, 'retry_backoff_max'),
            IF(NEW.timeout <=> OLD.timeout, NULL, 'timeout'),
            IF(NEW.kill_grace <=> OLD.kill_grace, NULL, 'kill_grace'),
            IF(NEW.jitter <=> OLD.jitter, NULL, 'jitter'),
            IF(NEW.on_lease_lost <=> OLD.on_lease_lost, NULL, 'on_lease_lost'),
            IF(NEW.rerun_lost <=> OLD.rerun_lost, NULL, 'rerun_lost'),
            IF(NEW.run_user <=> OLD.run_user, NULL, 'run_user'),
            IF(NEW.run_group <=> OLD.run_group, NULL, 'run_group'),
            IF(NEW.env_file <=> OLD.env_file, NULL, 'env_file'),
            IF(NEW.inherit_env <=> OLD.inherit_env, NULL, 'inherit_env'),
            IF(NEW.limits <=> OLD.limits, NULL, 'limits')), ' (database user ', CURRENT_USER(), ')'));
    END IF;
END;

CREATE TRIGGER cron_audit_sql_delete AFTER DELETE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.changed_by IS NULL OR OLD.changed_by NOT LIKE 'removing %' THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_delete', OLD.name, 'sql', CONCAT('database user ', CURRENT_USER()));
    END IF;
END;
