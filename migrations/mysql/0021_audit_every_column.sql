-- The audit trail's gaps found in a review (docs/security.md, "Audit trail"):
--
-- 1. Columns no audit trigger watched: run_on, template, source, signature, upstream_run and
--    toml_enabled, and a run requested by setting run_now. A SQL change of these is now recorded
--    like any other definition change ('sql_update', 'changed COLUMNS (database user U)').
--    run_now is recorded only when it is set (0 to non-zero): the daemon clears it when the
--    requested run is released, and that is not a change anybody made. The one AFTER UPDATE
--    trigger of migration 0020 is replaced by the same trigger with one more block, its guard
--    widened to these columns: a claim or release still evaluates the guard alone.
-- 2. cron_calendars rows: every node reads them, so a SQL insert, update or delete is recorded
--    ('sql_calendar_insert', 'sql_calendar_update', 'sql_calendar_delete', the calendar's name
--    in `job`). The table gets changed_by, vouched for like cron_table's: sqlcron's own writes
--    (a TOML apply) record 'calendar_write' and 'calendar_remove' with the operator.
DROP TRIGGER cron_table_after_update;

CREATE TRIGGER cron_table_after_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    -- Each block below acts only on a change of one of these columns; a claim, lease extension
    -- or release changes none of them and stops here.
    IF NOT (NEW.placement <=> OLD.placement
            AND NEW.name <=> OLD.name
            AND NEW.schedule <=> OLD.schedule
            AND NEW.timezone <=> OLD.timezone
            AND NEW.command <=> OLD.command
            AND NEW.argv <=> OLD.argv
            AND NEW.env <=> OLD.env
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
            AND NEW.limits <=> OLD.limits
            AND NEW.alerts <=> OLD.alerts
            AND NEW.overlap <=> OLD.overlap
            AND NEW.http <=> OLD.http
            AND NEW.calendars <=> OLD.calendars
            AND NEW.requires <=> OLD.requires
            AND NEW.after_jobs <=> OLD.after_jobs
            AND NEW.run_on <=> OLD.run_on
            AND NEW.template <=> OLD.template
            AND NEW.source <=> OLD.source
            AND NEW.signature <=> OLD.signature
            AND NEW.upstream_run <=> OLD.upstream_run
            AND NEW.toml_enabled <=> OLD.toml_enabled
            AND NOT (NEW.run_now <> 0 AND OLD.run_now = 0)) THEN
        -- was cron_placement_update
        IF NEW.placement IS NOT NULL AND NOT (NEW.placement <=> OLD.placement) THEN
            INSERT IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
        END IF;

        -- was cron_audit_sql_update
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

        -- was cron_audit_sql_alerts
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.alerts <=> OLD.alerts) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed alerts (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_placement
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (NEW.placement <=> OLD.placement) OR NOT (NEW.overlap <=> OLD.overlap)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',', IF(NEW.placement <=> OLD.placement, NULL, 'placement'), IF(NEW.overlap <=> OLD.overlap, NULL, 'overlap')), ' (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_http
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.http <=> OLD.http) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed http (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_calendars
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.calendars <=> OLD.calendars) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed calendars (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_requires
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.requires <=> OLD.requires) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed requires (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_after
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.after_jobs <=> OLD.after_jobs) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed after (database user ', USER(), ')'));
        END IF;

        -- run_on, template, source, signature, upstream_run, toml_enabled; run_now when set
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (NEW.run_on <=> OLD.run_on)
            OR NOT (NEW.template <=> OLD.template)
            OR NOT (NEW.source <=> OLD.source)
            OR NOT (NEW.signature <=> OLD.signature)
            OR NOT (NEW.upstream_run <=> OLD.upstream_run)
            OR NOT (NEW.toml_enabled <=> OLD.toml_enabled)
            OR (NEW.run_now <> 0 AND OLD.run_now = 0)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',',
                IF(NEW.run_on <=> OLD.run_on, NULL, 'run_on'),
                IF(NEW.template <=> OLD.template, NULL, 'template'),
                IF(NEW.source <=> OLD.source, NULL, 'source'),
                IF(NEW.signature <=> OLD.signature, NULL, 'signature'),
                IF(NEW.upstream_run <=> OLD.upstream_run, NULL, 'upstream_run'),
                IF(NEW.toml_enabled <=> OLD.toml_enabled, NULL, 'toml_enabled'),
                IF(NEW.run_now <> 0 AND OLD.run_now = 0, 'run_now', NULL)), ' (database user ', USER(), ')'));
        END IF;
    END IF;
END;

ALTER TABLE cron_calendars ADD COLUMN changed_by TEXT;

CREATE TRIGGER cron_audit_sql_calendar_insert AFTER INSERT ON cron_calendars FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_calendar_insert', NEW.name, 'sql', CONCAT('database user ', USER()));
    END IF;
END;

CREATE TRIGGER cron_audit_sql_calendar_update AFTER UPDATE ON cron_calendars FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (NEW.name <=> OLD.name) OR NOT (NEW.entries <=> OLD.entries) OR NOT (NEW.from_toml <=> OLD.from_toml)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_calendar_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',',
            IF(NEW.name <=> OLD.name, NULL, 'name'),
            IF(NEW.entries <=> OLD.entries, NULL, 'entries'),
            IF(NEW.from_toml <=> OLD.from_toml, NULL, 'from_toml')), ' (database user ', USER(), ')'));
    END IF;
END;

CREATE TRIGGER cron_audit_sql_calendar_delete AFTER DELETE ON cron_calendars FOR EACH ROW
BEGIN
    IF NOT (OLD.changed_by IS NOT NULL AND OLD.changed_by <> '' AND CAST(OLD.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_calendar_delete', OLD.name, 'sql', CONCAT('database user ', USER()));
    END IF;
END;
