-- The chain loop's look for the rows that name upstreams (`after_jobs IS NOT NULL`, every 30 s
-- on every node) scanned the whole table: at 10,000 jobs and 200 nodes, a large part of an
-- idle server's time (docs/fleet.md). MySQL has no partial index; a short prefix of the column
-- serves `IS NOT NULL` as a range, and is written only when a row's `after` changes. An index
-- only adds.
CREATE INDEX cron_table_chained ON cron_table (after_jobs(16));
