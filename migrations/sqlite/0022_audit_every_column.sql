-- The audit trail's gaps found in a review (docs/security.md, "Audit trail"):
--
-- 1. Columns no audit trigger watched: run_on, template, source, signature, upstream_run and
--    toml_enabled, a run requested by setting run_now, and a stop requested by setting
--    stop_token. A SQL change of these is now recorded like any other definition change
--    ('sql_update', 'changed COLUMNS'), by the same rule as the others here: an update that
--    leaves changed_by as it was. run_now is recorded only when it is set (0 to non-zero): the
--    daemon clears it when the requested run is released, and that is not a change anybody
--    made; stop_token only when set to a value (the daemon never writes it).
-- 2. cron_calendars rows: every node reads them, so a SQL insert, update or delete is recorded
--    ('sql_calendar_insert', 'sql_calendar_update', 'sql_calendar_delete', the calendar's name in
--    `job`), by cron_table's rules: sqlcron's own writes (a TOML apply) set changed_by to a fresh
--    value, or mark a row 'removing ...' before deleting it, and record 'calendar_write' and
--    'calendar_remove' with the operator.

CREATE TRIGGER cron_audit_sql_more AFTER UPDATE OF run_on, template, source, signature, upstream_run, toml_enabled, run_now, stop_token ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND ((NEW.run_now <> 0 AND OLD.run_now = 0)
    OR NEW.run_on IS NOT OLD.run_on
    OR NEW.template IS NOT OLD.template
    OR NEW.source IS NOT OLD.source
    OR NEW.signature IS NOT OLD.signature
    OR NEW.upstream_run IS NOT OLD.upstream_run
    OR NEW.toml_enabled IS NOT OLD.toml_enabled
    OR (NEW.stop_token IS NOT NULL AND NEW.stop_token IS NOT OLD.stop_token))
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed ' || rtrim(
        CASE WHEN NEW.run_on IS NOT OLD.run_on THEN 'run_on,' ELSE '' END ||
        CASE WHEN NEW.template IS NOT OLD.template THEN 'template,' ELSE '' END ||
        CASE WHEN NEW.source IS NOT OLD.source THEN 'source,' ELSE '' END ||
        CASE WHEN NEW.signature IS NOT OLD.signature THEN 'signature,' ELSE '' END ||
        CASE WHEN NEW.upstream_run IS NOT OLD.upstream_run THEN 'upstream_run,' ELSE '' END ||
        CASE WHEN NEW.toml_enabled IS NOT OLD.toml_enabled THEN 'toml_enabled,' ELSE '' END ||
        CASE WHEN NEW.run_now <> 0 AND OLD.run_now = 0 THEN 'run_now,' ELSE '' END ||
        CASE WHEN NEW.stop_token IS NOT NULL AND NEW.stop_token IS NOT OLD.stop_token THEN 'stop_token,' ELSE '' END, ','));
END;

ALTER TABLE cron_calendars ADD COLUMN changed_by TEXT;

CREATE TRIGGER cron_audit_sql_calendar_insert AFTER INSERT ON cron_calendars
FOR EACH ROW WHEN NEW.changed_by IS NULL
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_calendar_insert', NEW.name, 'sql', NULL);
END;

CREATE TRIGGER cron_audit_sql_calendar_update AFTER UPDATE ON cron_calendars
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND (NEW.name IS NOT OLD.name
    OR NEW.entries IS NOT OLD.entries
    OR NEW.from_toml IS NOT OLD.from_toml)
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_calendar_update', NEW.name, 'sql', 'changed ' || rtrim(
        CASE WHEN NEW.name IS NOT OLD.name THEN 'name,' ELSE '' END ||
        CASE WHEN NEW.entries IS NOT OLD.entries THEN 'entries,' ELSE '' END ||
        CASE WHEN NEW.from_toml IS NOT OLD.from_toml THEN 'from_toml,' ELSE '' END, ','));
END;

CREATE TRIGGER cron_audit_sql_calendar_delete AFTER DELETE ON cron_calendars
FOR EACH ROW WHEN OLD.changed_by IS NULL OR OLD.changed_by NOT LIKE 'removing %'
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER), 'sql_calendar_delete', OLD.name, 'sql', NULL);
END;
