-- The guard of the AFTER UPDATE trigger of cron_table, cheaper (docs/benchmarks.md, "One digest
-- for MariaDB's audit guard"). MySQL and MariaDB have no UPDATE OF triggers, so the trigger runs
-- for every row a claim, lease extension or release writes, and its guard compared 38 columns
-- as bytes each time: a tenth of MariaDB's CPU in a burst (the guard's items are fixed again at
-- every execution).
--
-- definition_digest is a stored generated column: the SHA-256 of the SHA-256 of each column the
-- guard compared (of its bytes; NULL as 'N', which no hash in hex contains), so that no two
-- different definitions have the same input, and the input stays 2.4 kB however long the
-- columns are (a CONCAT longer than max_allowed_packet would be NULL). The server computes it
-- on insert and on an update that names one of these columns, and never on an update that names
-- none of them (a claim, lease extension or release). Nobody can write it (a generated column
-- refuses a value). The guard compares it alone (a NULL digest lets every update through), then
-- run_now and stop_token as before; the blocks inside, which say what changed, are those of
-- migration 0021 word for word.
ALTER TABLE cron_table ADD COLUMN definition_digest BINARY(32) GENERATED ALWAYS AS (UNHEX(SHA2(CONCAT(
        IFNULL(SHA2(CAST(placement AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(name AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(schedule AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(timezone AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(command AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(argv AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(env AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(workdir AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(enabled AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(pool AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(misfire AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(starting_deadline AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(max_catch_up AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(retries AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(retry_backoff AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(retry_backoff_max AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(timeout AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(kill_grace AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(jitter AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(on_lease_lost AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(rerun_lost AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(run_user AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(run_group AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(env_file AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(inherit_env AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(limits AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(alerts AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(overlap AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(http AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(calendars AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(requires AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(after_jobs AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(run_on AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(template AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(source AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(signature AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(upstream_run AS BINARY), 256), 'N'),
        IFNULL(SHA2(CAST(toml_enabled AS BINARY), 256), 'N')), 256))) STORED;

DROP TRIGGER cron_table_after_update;

CREATE TRIGGER cron_table_after_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    -- Each block below acts only on a change of a definition column (definition_digest
    -- changes with any of them), a run_now set or a stop_token set; a claim, lease extension or
    -- release changes none of them and stops here.
    IF NOT (NEW.definition_digest <=> OLD.definition_digest) OR NEW.definition_digest IS NULL
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
