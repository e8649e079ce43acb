-- Calendars (README "Calendars", docs/calendars.md). cron_calendars: one named calendar per row,
-- its entries one per line, as sqlcron reads them (an iCalendar file is converted when the TOML
-- is applied); from_toml = 1 for the calendars a TOML file defines (an apply replaces or removes
-- them), 0 for those made with SQL. cron_table.calendars: a JSON object such as
-- {"skip_on": ["holidays"], "only_in": ["window"], "defer": true}, or NULL ([defaults] only).
CREATE TABLE cron_calendars (
    name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,
    entries MEDIUMTEXT NOT NULL,
    from_toml BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
ALTER TABLE cron_table ADD COLUMN calendars TEXT;

CREATE TRIGGER cron_table_unpark_calendars BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND NOT (NEW.calendars <=> OLD.calendars) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

-- A job parked because a calendar it names was missing or unreadable is prepared again when a
-- calendar is added or changed.
CREATE TRIGGER cron_calendars_unpark_insert AFTER INSERT ON cron_calendars FOR EACH ROW
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE error LIKE 'calendar %';
END;

CREATE TRIGGER cron_calendars_unpark_update AFTER UPDATE ON cron_calendars FOR EACH ROW
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE error LIKE 'calendar %';
END;

CREATE TRIGGER cron_audit_sql_calendars AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.changed_by IS NOT NULL AND NEW.changed_by <> '' AND CAST(NEW.changed_by AS BINARY) <=> CAST(@sqlcron_marker AS BINARY)) AND NOT (NEW.calendars <=> OLD.calendars) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed calendars (database user ', USER(), ')'));
    END IF;
END;
