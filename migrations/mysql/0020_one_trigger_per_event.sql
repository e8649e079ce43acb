-- One trigger per event on cron_table (issue 29, docs/benchmarks.md "The midnight burst"):
-- MySQL and MariaDB have no `UPDATE OF column` triggers, so each of the sixteen UPDATE triggers
-- below ran for every row a claim, a lease extension or a release writes, each as a stored
-- program of its own. Their bodies are kept word for word and in the order they ran, as the
-- two triggers that replace them, each behind one guard that lets through every update any of
-- the bodies acts on (a change of a column they compare; for the un-parking ones, a row with
-- an error): what each checks and does is unchanged, and an update of the run's own columns
-- evaluates the guard alone.
DROP TRIGGER cron_table_changed;
DROP TRIGGER cron_table_unpark_alerts;
DROP TRIGGER cron_table_unpark_placement;
DROP TRIGGER cron_table_unpark_http;
DROP TRIGGER cron_table_unpark_signature;
DROP TRIGGER cron_table_unpark_calendars;
DROP TRIGGER cron_table_unpark_requires;
DROP TRIGGER cron_table_unpark_after;
DROP TRIGGER cron_placement_update;
DROP TRIGGER cron_audit_sql_update;
DROP TRIGGER cron_audit_sql_alerts;
DROP TRIGGER cron_audit_sql_placement;
DROP TRIGGER cron_audit_sql_http;
DROP TRIGGER cron_audit_sql_calendars;
DROP TRIGGER cron_audit_sql_requires;
DROP TRIGGER cron_audit_sql_after;

CREATE TRIGGER cron_table_before_update BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    -- Only a change of the schedule, zone or command, or a row with an error, can concern the
    -- blocks below; a claim, lease extension or release is neither and stops here.
    IF NOT (NEW.schedule <=> OLD.schedule AND NEW.timezone <=> OLD.timezone
            AND NEW.command <=> OLD.command AND NEW.argv <=> OLD.argv)
        OR OLD.error IS NOT NULL THEN
        -- was cron_table_changed
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

        -- was cron_table_unpark_alerts
        IF OLD.error IS NOT NULL AND NOT (NEW.alerts <=> OLD.alerts) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;

        -- was cron_table_unpark_placement
        IF OLD.error IS NOT NULL AND (NOT (NEW.placement <=> OLD.placement) OR NOT (NEW.overlap <=> OLD.overlap)) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;

        -- was cron_table_unpark_http
        IF OLD.error IS NOT NULL AND NOT (NEW.http <=> OLD.http) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;

        -- was cron_table_unpark_signature
        IF OLD.error IS NOT NULL AND NOT (NEW.signature <=> OLD.signature) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;

        -- was cron_table_unpark_calendars
        IF OLD.error IS NOT NULL AND NOT (NEW.calendars <=> OLD.calendars) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;

        -- was cron_table_unpark_requires
        IF OLD.error IS NOT NULL AND NOT (NEW.requires <=> OLD.requires) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;

        -- was cron_table_unpark_after
        IF OLD.error IS NOT NULL AND NOT (NEW.after_jobs <=> OLD.after_jobs) THEN
            SET NEW.error = NULL;
            IF NEW.exec_by IS NULL THEN
                SET NEW.next_exec = NULL, NEW.dirty = 0;
            ELSE
                SET NEW.dirty = 1;
            END IF;
        END IF;
    END IF;
END;

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
            AND NEW.after_jobs <=> OLD.after_jobs) THEN
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
    END IF;
END;
