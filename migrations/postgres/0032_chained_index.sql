-- The chain loop's look for the rows that name upstreams (`after_jobs IS NOT NULL`, every 30 s
-- on every node) scanned the whole table: at 10,000 jobs and 200 nodes, a quarter of an idle
-- server's time (docs/fleet.md). Chained rows are few: index only them. An index only adds.
CREATE INDEX cron_table_chained ON cron_table (name) WHERE after_jobs IS NOT NULL;
