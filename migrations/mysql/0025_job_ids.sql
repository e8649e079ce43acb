-- A job's id is the server's, always (issue 49). The editor may insert and update cron_table
-- rows, and could pick ids: a row inserted, or updated, to the largest BIGINT moved
-- AUTO_INCREMENT to its end, and every later insert of a job failed with "Out of range value"
-- until a DBA reset it (`sqlcron apply` creating a job, `sqlcron at`, every_node copies,
-- backfills). An insert now takes its id from AUTO_INCREMENT whatever the writer gave, and
-- an update keeps the id the row had.
--
-- The update part goes first in the one BEFORE UPDATE trigger (migration 0020: one trigger per
-- event, as a claim, lease extension and release each run it); the rest of its body is that
-- of migration 0020 word for word.
-- A session's `SET insert_id = N` would still choose the id AUTO_INCREMENT hands out (a review
-- planted the largest BIGINT that way): an insert in such a session is refused, here and in
-- cron_audit's trigger. sqlcron never sets it.
CREATE TRIGGER cron_table_id BEFORE INSERT ON cron_table FOR EACH ROW
BEGIN
    IF @@session.insert_id <> 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlcron: a job id is the server''s; unset insert_id';
    END IF;
    SET NEW.id = NULL;
END;

DROP TRIGGER cron_audit_db_user_insert;

CREATE TRIGGER cron_audit_db_user_insert BEFORE INSERT ON cron_audit FOR EACH ROW
BEGIN
    IF @@session.insert_id <> 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlcron: an audit id is the server''s; unset insert_id';
    END IF;
    SET NEW.id = NULL;
    SET NEW.db_user = USER();
END;

DROP TRIGGER cron_table_before_update;

CREATE TRIGGER cron_table_before_update BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    SET NEW.id = OLD.id;
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
