-- The audit trail's gaps found in a review (docs/security.md, "Audit trail"):
--
-- 1. Columns no audit trigger watched: run_on, template, source, signature, upstream_run and
--    toml_enabled, a run requested by setting run_now, and a stop requested by setting
--    stop_token. A SQL change of these is now recorded like any other definition change
--    ('sql_update', 'changed COLUMNS (database user U)'). run_now is recorded only when it is
--    set (0 to non-zero): the daemon clears it when the requested run is released, and that is
--    not a change anybody made; stop_token only when set to a value (the daemon never writes
--    it). The one AFTER UPDATE trigger of migration 0020 is replaced by the same trigger with
--    one more block, its guard widened to these columns: a claim or release still evaluates the
--    guard alone.
-- 2. Every comparison of an old and a new value below is of their bytes (CAST ... AS BINARY):
--    `<=>` compares text by the column's collation, which ignores case, accents and trailing
--    spaces, so a command changed from 'a' to 'A', or a run_user from 'ROOT' to 'root', went
--    unrecorded.
-- 3. cron_calendars rows: every node reads them, so a SQL insert, update or delete is recorded
--    ('sql_calendar_insert', 'sql_calendar_update', 'sql_calendar_delete', the calendar's name
--    in `job`). The table gets changed_by, vouched for like cron_table's: sqlcron's own writes
--    (a TOML apply) record 'calendar_write' and 'calendar_remove' with the operator.
DROP TRIGGER cron_table_after_update;

CREATE TRIGGER cron_table_after_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    -- Each block below acts only on a change of one of these columns; a claim, lease extension
    -- or release changes none of them and stops here.
    IF NOT (CAST(NEW.placement AS BINARY) <=> CAST(OLD.placement AS BINARY)
            AND CAST(NEW.name AS BINARY) <=> CAST(OLD.name AS BINARY)
            AND CAST(NEW.schedule AS BINARY) <=> CAST(OLD.schedule AS BINARY)
            AND CAST(NEW.timezone AS BINARY) <=> CAST(OLD.timezone AS BINARY)
            AND CAST(NEW.command AS BINARY) <=> CAST(OLD.command AS BINARY)
            AND CAST(NEW.argv AS BINARY) <=> CAST(OLD.argv AS BINARY)
            AND CAST(NEW.env AS BINARY) <=> CAST(OLD.env AS BINARY)
            AND CAST(NEW.workdir AS BINARY) <=> CAST(OLD.workdir AS BINARY)
            AND CAST(NEW.enabled AS BINARY) <=> CAST(OLD.enabled AS BINARY)
            AND CAST(NEW.pool AS BINARY) <=> CAST(OLD.pool AS BINARY)
            AND CAST(NEW.misfire AS BINARY) <=> CAST(OLD.misfire AS BINARY)
            AND CAST(NEW.starting_deadline AS BINARY) <=> CAST(OLD.starting_deadline AS BINARY)
            AND CAST(NEW.max_catch_up AS BINARY) <=> CAST(OLD.max_catch_up AS BINARY)
            AND CAST(NEW.retries AS BINARY) <=> CAST(OLD.retries AS BINARY)
            AND CAST(NEW.retry_backoff AS BINARY) <=> CAST(OLD.retry_backoff AS BINARY)
            AND CAST(NEW.retry_backoff_max AS BINARY) <=> CAST(OLD.retry_backoff_max AS BINARY)
            AND CAST(NEW.timeout AS BINARY) <=> CAST(OLD.timeout AS BINARY)
            AND CAST(NEW.kill_grace AS BINARY) <=> CAST(OLD.kill_grace AS BINARY)
            AND CAST(NEW.jitter AS BINARY) <=> CAST(OLD.jitter AS BINARY)
            AND CAST(NEW.on_lease_lost AS BINARY) <=> CAST(OLD.on_lease_lost AS BINARY)
            AND CAST(NEW.rerun_lost AS BINARY) <=> CAST(OLD.rerun_lost AS BINARY)
            AND CAST(NEW.run_user AS BINARY) <=> CAST(OLD.run_user AS BINARY)
            AND CAST(NEW.run_group AS BINARY) <=> CAST(OLD.run_group AS BINARY)
            AND CAST(NEW.env_file AS BINARY) <=> CAST(OLD.env_file AS BINARY)
            AND CAST(NEW.inherit_env AS BINARY) <=> CAST(OLD.inherit_env AS BINARY)
            AND CAST(NEW.limits AS BINARY) <=> CAST(OLD.limits AS BINARY)
            AND CAST(NEW.alerts AS BINARY) <=> CAST(OLD.alerts AS BINARY)
            AND CAST(NEW.overlap AS BINARY) <=> CAST(OLD.overlap AS BINARY)
            AND CAST(NEW.http AS BINARY) <=> CAST(OLD.http AS BINARY)
            AND CAST(NEW.calendars AS BINARY) <=> CAST(OLD.calendars AS BINARY)
            AND CAST(NEW.requires AS BINARY) <=> CAST(OLD.requires AS BINARY)
            AND CAST(NEW.after_jobs AS BINARY) <=> CAST(OLD.after_jobs AS BINARY)
            AND CAST(NEW.run_on AS BINARY) <=> CAST(OLD.run_on AS BINARY)
            AND CAST(NEW.template AS BINARY) <=> CAST(OLD.template AS BINARY)
            AND CAST(NEW.source AS BINARY) <=> CAST(OLD.source AS BINARY)
            AND CAST(NEW.signature AS BINARY) <=> CAST(OLD.signature AS BINARY)
            AND CAST(NEW.upstream_run AS BINARY) <=> CAST(OLD.upstream_run AS BINARY)
            AND CAST(NEW.toml_enabled AS BINARY) <=> CAST(OLD.toml_enabled AS BINARY)
            AND NOT (NEW.run_now <> 0 AND OLD.run_now = 0)
            AND NOT (NEW.stop_token IS NOT NULL AND NOT (NEW.stop_token <=> OLD.stop_token))) THEN
        -- was cron_placement_update
        IF NEW.placement IS NOT NULL AND NOT (CAST(NEW.placement AS BINARY) <=> CAST(OLD.placement AS BINARY)) THEN
            INSERT IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
        END IF;

        -- was cron_audit_sql_update
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (CAST(NEW.name AS BINARY) <=> CAST(OLD.name AS BINARY))
            OR NOT (CAST(NEW.schedule AS BINARY) <=> CAST(OLD.schedule AS BINARY))
            OR NOT (CAST(NEW.timezone AS BINARY) <=> CAST(OLD.timezone AS BINARY))
            OR NOT (CAST(NEW.command AS BINARY) <=> CAST(OLD.command AS BINARY))
            OR NOT (CAST(NEW.argv AS BINARY) <=> CAST(OLD.argv AS BINARY))
            OR NOT (CAST(NEW.env AS BINARY) <=> CAST(OLD.env AS BINARY))
            OR NOT (CAST(NEW.workdir AS BINARY) <=> CAST(OLD.workdir AS BINARY))
            OR NOT (CAST(NEW.enabled AS BINARY) <=> CAST(OLD.enabled AS BINARY))
            OR NOT (CAST(NEW.pool AS BINARY) <=> CAST(OLD.pool AS BINARY))
            OR NOT (CAST(NEW.misfire AS BINARY) <=> CAST(OLD.misfire AS BINARY))
            OR NOT (CAST(NEW.starting_deadline AS BINARY) <=> CAST(OLD.starting_deadline AS BINARY))
            OR NOT (CAST(NEW.max_catch_up AS BINARY) <=> CAST(OLD.max_catch_up AS BINARY))
            OR NOT (CAST(NEW.retries AS BINARY) <=> CAST(OLD.retries AS BINARY))
            OR NOT (CAST(NEW.retry_backoff AS BINARY) <=> CAST(OLD.retry_backoff AS BINARY))
            OR NOT (CAST(NEW.retry_backoff_max AS BINARY) <=> CAST(OLD.retry_backoff_max AS BINARY))
            OR NOT (CAST(NEW.timeout AS BINARY) <=> CAST(OLD.timeout AS BINARY))
            OR NOT (CAST(NEW.kill_grace AS BINARY) <=> CAST(OLD.kill_grace AS BINARY))
            OR NOT (CAST(NEW.jitter AS BINARY) <=> CAST(OLD.jitter AS BINARY))
            OR NOT (CAST(NEW.on_lease_lost AS BINARY) <=> CAST(OLD.on_lease_lost AS BINARY))
            OR NOT (CAST(NEW.rerun_lost AS BINARY) <=> CAST(OLD.rerun_lost AS BINARY))
            OR NOT (CAST(NEW.run_user AS BINARY) <=> CAST(OLD.run_user AS BINARY))
            OR NOT (CAST(NEW.run_group AS BINARY) <=> CAST(OLD.run_group AS BINARY))
            OR NOT (CAST(NEW.env_file AS BINARY) <=> CAST(OLD.env_file AS BINARY))
            OR NOT (CAST(NEW.inherit_env AS BINARY) <=> CAST(OLD.inherit_env AS BINARY))
            OR NOT (CAST(NEW.limits AS BINARY) <=> CAST(OLD.limits AS BINARY))) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',',
                IF(CAST(NEW.name AS BINARY) <=> CAST(OLD.name AS BINARY), NULL, 'name'),
                IF(CAST(NEW.schedule AS BINARY) <=> CAST(OLD.schedule AS BINARY), NULL, 'schedule'),
                IF(CAST(NEW.timezone AS BINARY) <=> CAST(OLD.timezone AS BINARY), NULL, 'timezone'),
                IF(CAST(NEW.command AS BINARY) <=> CAST(OLD.command AS BINARY), NULL, 'command'),
                IF(CAST(NEW.argv AS BINARY) <=> CAST(OLD.argv AS BINARY), NULL, 'argv'),
                IF(CAST(NEW.env AS BINARY) <=> CAST(OLD.env AS BINARY), NULL, 'env'),
                IF(CAST(NEW.workdir AS BINARY) <=> CAST(OLD.workdir AS BINARY), NULL, 'workdir'),
                IF(CAST(NEW.enabled AS BINARY) <=> CAST(OLD.enabled AS BINARY), NULL, 'enabled'),
                IF(CAST(NEW.pool AS BINARY) <=> CAST(OLD.pool AS BINARY), NULL, 'pool'),
                IF(CAST(NEW.misfire AS BINARY) <=> CAST(OLD.misfire AS BINARY), NULL, 'misfire'),
                IF(CAST(NEW.starting_deadline AS BINARY) <=> CAST(OLD.starting_deadline AS BINARY), NULL, 'starting_deadline'),
                IF(CAST(NEW.max_catch_up AS BINARY) <=> CAST(OLD.max_catch_up AS BINARY), NULL, 'max_catch_up'),
                IF(CAST(NEW.retries AS BINARY) <=> CAST(OLD.retries AS BINARY), NULL, 'retries'),
                IF(CAST(NEW.retry_backoff AS BINARY) <=> CAST(OLD.retry_backoff AS BINARY), NULL, 'retry_backoff'),
                IF(CAST(NEW.retry_backoff_max AS BINARY) <=> CAST(OLD.retry_backoff_max AS BINARY), NULL, 'retry_backoff_max'),
                IF(CAST(NEW.timeout AS BINARY) <=> CAST(OLD.timeout AS BINARY), NULL, 'timeout'),
                IF(CAST(NEW.kill_grace AS BINARY) <=> CAST(OLD.kill_grace AS BINARY), NULL, 'kill_grace'),
                IF(CAST(NEW.jitter AS BINARY) <=> CAST(OLD.jitter AS BINARY), NULL, 'jitter'),
                IF(CAST(NEW.on_lease_lost AS BINARY) <=> CAST(OLD.on_lease_lost AS BINARY), NULL, 'on_lease_lost'),
                IF(CAST(NEW.rerun_lost AS BINARY) <=> CAST(OLD.rerun_lost AS BINARY), NULL, 'rerun_lost'),
                IF(CAST(NEW.run_user AS BINARY) <=> CAST(OLD.run_user AS BINARY), NULL, 'run_user'),
                IF(CAST(NEW.run_group AS BINARY) <=> CAST(OLD.run_group AS BINARY), NULL, 'run_group'),
                IF(CAST(NEW.env_file AS BINARY) <=> CAST(OLD.env_file AS BINARY), NULL, 'env_file'),
                IF(CAST(NEW.inherit_env AS BINARY) <=> CAST(OLD.inherit_env AS BINARY), NULL, 'inherit_env'),
                IF(CAST(NEW.limits AS BINARY) <=> CAST(OLD.limits AS BINARY), NULL, 'limits')), ' (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_alerts
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (CAST(NEW.alerts AS BINARY) <=> CAST(OLD.alerts AS BINARY)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed alerts (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_placement
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (CAST(NEW.placement AS BINARY) <=> CAST(OLD.placement AS BINARY)) OR NOT (CAST(NEW.overlap AS BINARY) <=> CAST(OLD.overlap AS BINARY))) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',', IF(CAST(NEW.placement AS BINARY) <=> CAST(OLD.placement AS BINARY), NULL, 'placement'), IF(CAST(NEW.overlap AS BINARY) <=> CAST(OLD.overlap AS BINARY), NULL, 'overlap')), ' (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_http
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (CAST(NEW.http AS BINARY) <=> CAST(OLD.http AS BINARY)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed http (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_calendars
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (CAST(NEW.calendars AS BINARY) <=> CAST(OLD.calendars AS BINARY)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed calendars (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_requires
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (CAST(NEW.requires AS BINARY) <=> CAST(OLD.requires AS BINARY)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed requires (database user ', USER(), ')'));
        END IF;

        -- was cron_audit_sql_after
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (CAST(NEW.after_jobs AS BINARY) <=> CAST(OLD.after_jobs AS BINARY)) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed after (database user ', USER(), ')'));
        END IF;

        -- run_on, template, source, signature, upstream_run, toml_enabled; run_now and
        -- stop_token when set
        IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (CAST(NEW.run_on AS BINARY) <=> CAST(OLD.run_on AS BINARY))
            OR NOT (CAST(NEW.template AS BINARY) <=> CAST(OLD.template AS BINARY))
            OR NOT (CAST(NEW.source AS BINARY) <=> CAST(OLD.source AS BINARY))
            OR NOT (CAST(NEW.signature AS BINARY) <=> CAST(OLD.signature AS BINARY))
            OR NOT (CAST(NEW.upstream_run AS BINARY) <=> CAST(OLD.upstream_run AS BINARY))
            OR NOT (CAST(NEW.toml_enabled AS BINARY) <=> CAST(OLD.toml_enabled AS BINARY))
            OR (NEW.run_now <> 0 AND OLD.run_now = 0)
            OR (NEW.stop_token IS NOT NULL AND NOT (NEW.stop_token <=> OLD.stop_token))) THEN
            INSERT INTO cron_audit (at, action, job, who, detail)
            VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',',
                IF(CAST(NEW.run_on AS BINARY) <=> CAST(OLD.run_on AS BINARY), NULL, 'run_on'),
                IF(CAST(NEW.template AS BINARY) <=> CAST(OLD.template AS BINARY), NULL, 'template'),
                IF(CAST(NEW.source AS BINARY) <=> CAST(OLD.source AS BINARY), NULL, 'source'),
                IF(CAST(NEW.signature AS BINARY) <=> CAST(OLD.signature AS BINARY), NULL, 'signature'),
                IF(CAST(NEW.upstream_run AS BINARY) <=> CAST(OLD.upstream_run AS BINARY), NULL, 'upstream_run'),
                IF(CAST(NEW.toml_enabled AS BINARY) <=> CAST(OLD.toml_enabled AS BINARY), NULL, 'toml_enabled'),
                IF(NEW.run_now <> 0 AND OLD.run_now = 0, 'run_now', NULL),
                IF(NEW.stop_token IS NOT NULL AND NOT (NEW.stop_token <=> OLD.stop_token), 'stop_token', NULL)), ' (database user ', USER(), ')'));
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
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND (NOT (CAST(NEW.name AS BINARY) <=> CAST(OLD.name AS BINARY)) OR NOT (CAST(NEW.entries AS BINARY) <=> CAST(OLD.entries AS BINARY)) OR NOT (CAST(NEW.from_toml AS BINARY) <=> CAST(OLD.from_toml AS BINARY))) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_calendar_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',',
            IF(CAST(NEW.name AS BINARY) <=> CAST(OLD.name AS BINARY), NULL, 'name'),
            IF(CAST(NEW.entries AS BINARY) <=> CAST(OLD.entries AS BINARY), NULL, 'entries'),
            IF(CAST(NEW.from_toml AS BINARY) <=> CAST(OLD.from_toml AS BINARY), NULL, 'from_toml')), ' (database user ', USER(), ')'));
    END IF;
END;

CREATE TRIGGER cron_audit_sql_calendar_delete AFTER DELETE ON cron_calendars FOR EACH ROW
BEGIN
    IF NOT (OLD.changed_by IS NOT NULL AND OLD.changed_by <> '' AND CAST(OLD.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_calendar_delete', OLD.name, 'sql', CONCAT('database user ', USER()));
    END IF;
END;
