-- The guard of the AFTER UPDATE trigger of cron_table, cheaper (docs/benchmarks.md, "One digest
-- for the audit trigger's guard"). MySQL and MariaDB have no UPDATE OF triggers, so the trigger
-- runs for every row a claim, lease extension or release writes, and its guard compared 38
-- columns as bytes each time: a tenth of MariaDB's CPU in a burst (the guard's items are fixed
-- again at every execution).
--
-- definition_digest is a stored generated column: the SHA-256 of every column the guard
-- compared, each written as its length in bytes, ':' and its bytes (NULL as 'N'), so that no
-- two different definitions have the same input. The server computes it on insert and on an
-- update that names one of these columns, and never on an update that names none of them (a
-- claim, lease extension or release). Nobody can write it (a generated column refuses a
-- value). The guard compares it alone, then run_now and stop_token as before; the blocks
-- inside, which say what changed, are those of migration 0021 word for word.
ALTER TABLE cron_table ADD COLUMN definition_digest BINARY(32) GENERATED ALWAYS AS (UNHEX(SHA2(CONCAT(
        IFNULL(CONCAT(LENGTH(CAST(placement AS BINARY)), ':', CAST(placement AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(name AS BINARY)), ':', CAST(name AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(schedule AS BINARY)), ':', CAST(schedule AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(timezone AS BINARY)), ':', CAST(timezone AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(command AS BINARY)), ':', CAST(command AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(argv AS BINARY)), ':', CAST(argv AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(env AS BINARY)), ':', CAST(env AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(workdir AS BINARY)), ':', CAST(workdir AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(enabled AS BINARY)), ':', CAST(enabled AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(pool AS BINARY)), ':', CAST(pool AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(misfire AS BINARY)), ':', CAST(misfire AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(starting_deadline AS BINARY)), ':', CAST(starting_deadline AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(max_catch_up AS BINARY)), ':', CAST(max_catch_up AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(retries AS BINARY)), ':', CAST(retries AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(retry_backoff AS BINARY)), ':', CAST(retry_backoff AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(retry_backoff_max AS BINARY)), ':', CAST(retry_backoff_max AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(timeout AS BINARY)), ':', CAST(timeout AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(kill_grace AS BINARY)), ':', CAST(kill_grace AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(jitter AS BINARY)), ':', CAST(jitter AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(on_lease_lost AS BINARY)), ':', CAST(on_lease_lost AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(rerun_lost AS BINARY)), ':', CAST(rerun_lost AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(run_user AS BINARY)), ':', CAST(run_user AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(run_group AS BINARY)), ':', CAST(run_group AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(env_file AS BINARY)), ':', CAST(env_file AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(inherit_env AS BINARY)), ':', CAST(inherit_env AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(limits AS BINARY)), ':', CAST(limits AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(alerts AS BINARY)), ':', CAST(alerts AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(overlap AS BINARY)), ':', CAST(overlap AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(http AS BINARY)), ':', CAST(http AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(calendars AS BINARY)), ':', CAST(calendars AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(requires AS BINARY)), ':', CAST(requires AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(after_jobs AS BINARY)), ':', CAST(after_jobs AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(run_on AS BINARY)), ':', CAST(run_on AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(template AS BINARY)), ':', CAST(template AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(source AS BINARY)), ':', CAST(source AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(signature AS BINARY)), ':', CAST(signature AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(upstream_run AS BINARY)), ':', CAST(upstream_run AS BINARY)), 'N'),
        IFNULL(CONCAT(LENGTH(CAST(toml_enabled AS BINARY)), ':', CAST(toml_enabled AS BINARY)), 'N')), 256))) STORED;

DROP TRIGGER cron_table_after_update;

CREATE TRIGGER cron_table_after_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    -- Each block below acts only on a change of a definition column (definition_digest
    -- changes with any of them), a run_now set or a stop_token set; a claim, lease extension or
    -- release changes none of them and stops here.
    IF NOT (NEW.definition_digest <=> OLD.definition_digest)
        OR (NEW.run_now <> 0 AND OLD.run_now = 0)
        OR (NEW.stop_token IS NOT NULL AND NOT (NEW.stop_token <=> OLD.stop_token)) THEN
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
