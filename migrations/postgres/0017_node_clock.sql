-- Each node's clock minus the database's at its last heartbeat (ms): sqlcron decides by the
-- database's clock, but logs, hooks and the scripts of jobs read the node's, so the dashboard
-- warns when they drift apart (docs/dashboard.md).
ALTER TABLE cron_nodes ADD COLUMN clock_offset BIGINT;
