-- The chain loop's look for the rows that name upstreams (`after_jobs IS NOT NULL`, every 30 s
-- on every node) scanned the whole table (docs/fleet.md). Chained rows are few: index only
-- them. An index only adds.
CREATE INDEX cron_table_chained ON cron_table (name) WHERE after_jobs IS NOT NULL;
