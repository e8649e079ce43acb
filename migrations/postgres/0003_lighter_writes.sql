-- Fewer index entries and no trigger call per claim and release (every claim and release moves
-- next_exec, so PostgreSQL writes a new entry into every full index of cron_table each time).

-- Indexes that only ever matter for a few rows become partial: unprepared rows, MySQL-style
-- claim marks (PostgreSQL claims with RETURNING and never sets claim_id), pooled jobs.
DROP INDEX cron_table_next;
CREATE INDEX cron_table_unprepared ON cron_table (id) WHERE next_exec IS NULL;
DROP INDEX cron_table_claim;
CREATE INDEX cron_table_claim ON cron_table (claim_id) WHERE claim_id IS NOT NULL;
DROP INDEX cron_table_pool;
CREATE INDEX cron_table_pool ON cron_table (pool) WHERE pool IS NOT NULL;

-- The change trigger runs only when a definition column is really written and different.
DROP TRIGGER cron_table_changed ON cron_table;
CREATE TRIGGER cron_table_changed BEFORE UPDATE OF schedule, timezone, command, argv ON cron_table
    FOR EACH ROW
    WHEN (NEW.schedule IS DISTINCT FROM OLD.schedule OR NEW.timezone IS DISTINCT FROM OLD.timezone
          OR NEW.command IS DISTINCT FROM OLD.command OR NEW.argv IS DISTINCT FROM OLD.argv)
    EXECUTE FUNCTION cron_table_changed();
