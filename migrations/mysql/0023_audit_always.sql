-- The audit trail no longer depends on anything a client can set (issue 49, finding 4).
--
-- Before: a change counted as sqlcron's own, and the triggers wrote nothing, when the row's
-- changed_by equalled the session's @sqlcron_marker. Any writer who had read
-- docs/security.md could set it too, and its changes left no row for the rest of the session.
--
-- Now the triggers record every change of a definition, always: one change of one row, one
-- audit row, whoever made it. Every row of cron_audit, whoever inserts it, carries db_user:
-- USER(), the client's login and host as the server knows them, set by a trigger of cron_audit
-- that overrides whatever the writer put there.
--
-- sqlcron's own changes say who the operator is: before it writes, sqlcron puts a claim in
-- @sqlcron_claim (JSON: marker, action, who, host, pid, detail), and a trigger that records a
-- row whose changed_by equals the claim's marker takes the action, the operator and the detail
-- from it (and sets @sqlcron_recorded to the marker, so that sqlcron writes no second row). A
-- claim is only what the writer says: it changes how the row reads, never whether it is
-- written, nor its db_user; for an update the columns the server saw change are added to the
-- detail when the claim does not name them.

ALTER TABLE cron_audit ADD COLUMN db_user TEXT;

CREATE TRIGGER cron_audit_db_user_insert BEFORE INSERT ON cron_audit FOR EACH ROW
    SET NEW.db_user = USER();

CREATE TRIGGER cron_audit_db_user_update BEFORE UPDATE ON cron_audit FOR EACH ROW
    SET NEW.db_user = USER();

-- One audit row for one change: `sql_action` what it is called when nobody claims it,
-- `row_name` the job's (or calendar's) name, `changed` the columns an update changed (NULL for
-- an insert or delete), `marker` the row's changed_by.
CREATE PROCEDURE cron_audit_record(IN sql_action VARCHAR(32), IN row_name VARCHAR(191), IN changed TEXT, IN marker TEXT)
BEGIN
    DECLARE said TEXT DEFAULT NULL;
    DECLARE seen TEXT DEFAULT NULL;
    DECLARE rest TEXT DEFAULT NULL;
    DECLARE named BOOLEAN DEFAULT TRUE;
    IF changed IS NOT NULL THEN
        SET seen = CONCAT('changed ', changed);
    END IF;
    IF marker IS NOT NULL AND marker <> '' AND @sqlcron_claim IS NOT NULL AND JSON_VALID(@sqlcron_claim)
        AND CAST(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.marker')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.marker')), NULL) AS BINARY) <=> CAST(marker AS BINARY) THEN
        SET said = IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.detail')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.detail')), NULL);
        -- A claim that names every column the server saw change is taken as is.
        IF said IS NOT NULL AND changed IS NOT NULL THEN
            SET rest = changed;
            WHILE rest <> '' DO
                IF LOCATE(CAST(SUBSTRING_INDEX(rest, ',', 1) AS BINARY), CAST(said AS BINARY)) = 0 THEN
                    SET named = FALSE;
                END IF;
                SET rest = IF(LOCATE(',', rest) = 0, '', SUBSTRING(rest, LOCATE(',', rest) + 1));
            END WHILE;
        END IF;
        INSERT INTO cron_audit (at, action, job, who, host, pid, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
                LEFT(COALESCE(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.action')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.action')), NULL), sql_action), 32),
                row_name,
                LEFT(COALESCE(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.who')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.who')), NULL), 'sql'), 255),
                LEFT(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.host')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.host')), NULL), 255),
                IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.pid')) = 'INTEGER', CAST(JSON_EXTRACT(@sqlcron_claim, '$.pid') AS SIGNED), NULL),
                CASE WHEN seen IS NULL THEN said
                     WHEN said IS NULL THEN seen
                     WHEN named THEN said
                     ELSE CONCAT(said, ' (the database saw: ', seen, ')') END);
        SET @sqlcron_recorded = marker;
    ELSE
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), sql_action, row_name, 'sql',
                IF(seen IS NULL, CONCAT('database user ', USER()), CONCAT(seen, ' (database user ', USER(), ')')));
    END IF;
END;

DROP TRIGGER cron_audit_sql_insert;

CREATE TRIGGER cron_audit_sql_insert AFTER INSERT ON cron_table FOR EACH ROW
    CALL cron_audit_record('sql_insert', NEW.name, NULL, NEW.changed_by);

DROP TRIGGER cron_audit_sql_delete;

CREATE TRIGGER cron_audit_sql_delete AFTER DELETE ON cron_table FOR EACH ROW
    CALL cron_audit_record('sql_delete', OLD.name, NULL, OLD.changed_by);

DROP TRIGGER cron_table_after_update;

CREATE TRIGGER cron_table_after_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    DECLARE changed TEXT DEFAULT '';
    -- Only a change of a definition column (definition_digest changes with any of them), a
    -- run_now set or a stop_token set; a claim, lease extension or release changes none of
    -- them and stops here (migration 0022).
    IF NOT (NEW.definition_digest <=> OLD.definition_digest) OR NEW.definition_digest IS NULL
        OR (NEW.run_now <> 0 AND OLD.run_now = 0)
        OR (NEW.stop_token IS NOT NULL AND NOT (NEW.stop_token <=> OLD.stop_token)) THEN
        IF NEW.placement IS NOT NULL AND NOT (CAST(NEW.placement AS BINARY) <=> CAST(OLD.placement AS BINARY)) THEN
            INSERT IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
        END IF;
        -- Every comparison is of bytes: `<=>` on text follows the collation (case, accents).
        SET changed = CONCAT_WS(',',
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
            IF(CAST(NEW.limits AS BINARY) <=> CAST(OLD.limits AS BINARY), NULL, 'limits'),
            IF(CAST(NEW.alerts AS BINARY) <=> CAST(OLD.alerts AS BINARY), NULL, 'alerts'),
            IF(CAST(NEW.placement AS BINARY) <=> CAST(OLD.placement AS BINARY), NULL, 'placement'),
            IF(CAST(NEW.overlap AS BINARY) <=> CAST(OLD.overlap AS BINARY), NULL, 'overlap'),
            IF(CAST(NEW.http AS BINARY) <=> CAST(OLD.http AS BINARY), NULL, 'http'),
            IF(CAST(NEW.calendars AS BINARY) <=> CAST(OLD.calendars AS BINARY), NULL, 'calendars'),
            IF(CAST(NEW.requires AS BINARY) <=> CAST(OLD.requires AS BINARY), NULL, 'requires'),
            IF(CAST(NEW.after_jobs AS BINARY) <=> CAST(OLD.after_jobs AS BINARY), NULL, 'after_jobs'),
            IF(CAST(NEW.run_on AS BINARY) <=> CAST(OLD.run_on AS BINARY), NULL, 'run_on'),
            IF(CAST(NEW.template AS BINARY) <=> CAST(OLD.template AS BINARY), NULL, 'template'),
            IF(CAST(NEW.source AS BINARY) <=> CAST(OLD.source AS BINARY), NULL, 'source'),
            IF(CAST(NEW.signature AS BINARY) <=> CAST(OLD.signature AS BINARY), NULL, 'signature'),
            IF(CAST(NEW.upstream_run AS BINARY) <=> CAST(OLD.upstream_run AS BINARY), NULL, 'upstream_run'),
            IF(CAST(NEW.toml_enabled AS BINARY) <=> CAST(OLD.toml_enabled AS BINARY), NULL, 'toml_enabled'),
            IF(NEW.run_now <> 0 AND OLD.run_now = 0, 'run_now', NULL),
            IF(NEW.stop_token IS NOT NULL AND NOT (NEW.stop_token <=> OLD.stop_token), 'stop_token', NULL));
        IF changed <> '' THEN
            CALL cron_audit_record('sql_update', NEW.name, changed, NEW.changed_by);
        END IF;
    END IF;
END;

DROP TRIGGER cron_audit_sql_calendar_insert;

CREATE TRIGGER cron_audit_sql_calendar_insert AFTER INSERT ON cron_calendars FOR EACH ROW
    CALL cron_audit_record('sql_calendar_insert', NEW.name, NULL, NEW.changed_by);

DROP TRIGGER cron_audit_sql_calendar_update;

CREATE TRIGGER cron_audit_sql_calendar_update AFTER UPDATE ON cron_calendars FOR EACH ROW
BEGIN
    DECLARE changed TEXT DEFAULT '';
    SET changed = CONCAT_WS(',',
        IF(CAST(NEW.name AS BINARY) <=> CAST(OLD.name AS BINARY), NULL, 'name'),
        IF(CAST(NEW.entries AS BINARY) <=> CAST(OLD.entries AS BINARY), NULL, 'entries'),
        IF(CAST(NEW.from_toml AS BINARY) <=> CAST(OLD.from_toml AS BINARY), NULL, 'from_toml'));
    IF changed <> '' THEN
        CALL cron_audit_record('sql_calendar_update', NEW.name, changed, NEW.changed_by);
    END IF;
END;

DROP TRIGGER cron_audit_sql_calendar_delete;

CREATE TRIGGER cron_audit_sql_calendar_delete AFTER DELETE ON cron_calendars FOR EACH ROW
    CALL cron_audit_record('sql_calendar_delete', OLD.name, NULL, OLD.changed_by);
