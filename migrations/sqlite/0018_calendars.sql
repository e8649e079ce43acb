-- Calendars (README "Calendars", docs/calendars.md). cron_calendars: one named calendar per row,
-- its entries one per line, as sqlcron reads them (an iCalendar file is converted when the TOML
-- is applied); from_toml = 1 for the calendars a TOML file defines (an apply replaces or removes
-- them), 0 for those made with SQL. cron_table.calendars: a JSON object such as
-- {"skip_on": ["holidays"], "only_in": ["window"], "defer": true}, or NULL ([defaults] only).
CREATE TABLE cron_calendars (
    name TEXT PRIMARY KEY,
    entries TEXT NOT NULL,
    from_toml INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE cron_table ADD COLUMN calendars TEXT;

CREATE TRIGGER cron_table_unpark_calendars AFTER UPDATE OF calendars ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND NEW.calendars IS NOT OLD.calendars
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

-- A job parked because a calendar it names was missing or unreadable is prepared again when a
-- calendar is added or changed.
CREATE TRIGGER cron_calendars_unpark_insert AFTER INSERT ON cron_calendars
FOR EACH ROW
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE error LIKE 'calendar %';
END;

CREATE TRIGGER cron_calendars_unpark_update AFTER UPDATE ON cron_calendars
FOR EACH ROW
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE error LIKE 'calendar %';
END;

CREATE TRIGGER cron_table_types_calendars BEFORE UPDATE OF calendars ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.calendars must be text or NULL') WHERE NEW.calendars IS NOT NULL AND typeof(NEW.calendars) <> 'text';
END;

CREATE TRIGGER cron_table_types_calendars_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.calendars must be text or NULL') WHERE NEW.calendars IS NOT NULL AND typeof(NEW.calendars) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_calendars AFTER UPDATE OF calendars ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND NEW.calendars IS NOT OLD.calendars
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed calendars');
END;
