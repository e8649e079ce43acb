-- cron_audit_own() must answer true or false. In a session that never set `sqlcron.marker` (a
-- plain psql, any client but sqlcron), current_setting(..., true) is NULL, so `marker = NULL`
-- made the function NULL; `IF NOT NULL` and a trigger's `WHEN (NOT NULL ...)` do nothing, and a
-- change made there with any non-empty changed_by went unrecorded. Only a value the writing
-- connection vouched for in its transaction counts as sqlcron's own; anything else is false.
CREATE OR REPLACE FUNCTION cron_audit_own(marker TEXT) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT COALESCE(marker <> '' AND marker = current_setting('sqlcron.marker', true), false)
$$;
