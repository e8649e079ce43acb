-- The cluster-wide start rate (README "Start rate", docs/start-rate.md): one row per budget,
-- 'cluster' for [cluster] max_starts_per_second and 'pool:NAME' for [cluster.pools.NAME]. Every
-- node obeys these rows, whatever its own file says. `tat` is the budget's clock (microseconds
-- since the epoch, database time): the moment up to which starts have been given out; a node
-- moves it forward with a compare-and-set (UPDATE ... WHERE tat = the value it read), never
-- under a lock held across round trips.
CREATE TABLE cron_start_rate (
    name VARCHAR(200) PRIMARY KEY,
    per_second DOUBLE PRECISION NOT NULL CHECK (per_second > 0),
    burst BIGINT NOT NULL CHECK (burst >= 1),
    tat BIGINT NOT NULL DEFAULT 0
);
-- How long a run waited for the start rate after its claim (milliseconds; NULL: not held).
ALTER TABLE cron_runs ADD COLUMN rate_held_ms BIGINT;
