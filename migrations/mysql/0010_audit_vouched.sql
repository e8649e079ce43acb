-- The audit trail cannot be skipped by a column: a change counts as sqlcron's own (and is
-- recorded by sqlcron with the operator and the action, not by these triggers) only when the row's
-- changed_by equals the marker the writing connection vouched for with `SET @sqlcron_marker` in the
-- same transaction. Any other insert, update or delete is recorded as a SQL change with the
-- database user, whatever changed_by says.

DROP TRIGGER cron_audit_sql_insert;

CREATE TRIGGER cron_audit_sql_insert AFTER INSERT ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_insert', NEW.name, 'sql', CONCAT('database user ', USER()));
    END IF;
END;

DROP TRIGGER cron_audit_sql_update;

CREATE TRIGGER cron_audit_sql_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (NEW.name <=> OLD.name)
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
            IF(NEW.limits <=> OLD.limits, NULL, 'limits')), ' (database user ', USER(), ')'));
    END IF;
END;

DROP TRIGGER cron_audit_sql_delete;

CREATE TRIGGER cron_audit_sql_delete AFTER DELETE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (OLD.changed_by IS NOT NULL AND OLD.changed_by <> '' AND CAST(OLD.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_delete', OLD.name, 'sql', CONCAT('database user ', USER()));
    END IF;
END;

DROP TRIGGER cron_audit_sql_alerts;

CREATE TRIGGER cron_audit_sql_alerts AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.alerts <=> OLD.alerts) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed alerts (database user ', USER(), ')'));
    END IF;
END;

DROP TRIGGER cron_audit_sql_placement;

CREATE TRIGGER cron_audit_sql_placement AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (NEW.placement <=> OLD.placement) OR NOT (NEW.overlap <=> OLD.overlap)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',', IF(NEW.placement <=> OLD.placement, NULL, 'placement'), IF(NEW.overlap <=> OLD.overlap, NULL, 'overlap')), ' (database user ', USER(), ')'));
    END IF;
END;

DROP TRIGGER cron_audit_sql_http;

CREATE TRIGGER cron_audit_sql_http AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.http <=> OLD.http) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed http (database user ', USER(), ')'));
    END IF;
END;
