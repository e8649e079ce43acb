-- Calendars (README "Calendars", docs/calendars.md). cron_calendars: one named calendar per row,
-- its entries one per line, as sqlcron reads them (an iCalendar file is converted when the TOML
-- is applied); from_toml = 1 for the calendars a TOML file defines (an apply replaces or removes
-- them), 0 for those made with SQL. cron_table.calendars: a JSON object such as
-- {"skip_on": ["holidays"], "only_in": ["window"], "defer": true}, or NULL ([defaults] only).
CREATE TABLE cron_calendars (
    name TEXT PRIMARY KEY,
    entries TEXT NOT NULL,
    from_toml BIGINT NOT NULL DEFAULT 0
);
ALTER TABLE cron_table ADD COLUMN calendars TEXT;

CREATE TRIGGER cron_table_unpark_calendars BEFORE UPDATE OF calendars ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND NEW.calendars IS DISTINCT FROM OLD.calendars)
    EXECUTE FUNCTION cron_table_unpark();

-- A job parked because a calendar it names was missing or unreadable is prepared again when a
-- calendar is added or changed.
CREATE FUNCTION cron_calendars_unpark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE error LIKE 'calendar %';
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_calendars_unpark AFTER INSERT OR UPDATE ON cron_calendars
    FOR EACH STATEMENT EXECUTE FUNCTION cron_calendars_unpark();

CREATE FUNCTION cron_audit_sql_calendars() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed calendars (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_calendars AFTER UPDATE OF calendars ON cron_table
    FOR EACH ROW
    WHEN (NOT cron_audit_own(NEW.changed_by) AND NEW.calendars IS DISTINCT FROM OLD.calendars)
    EXECUTE FUNCTION cron_audit_sql_calendars();
