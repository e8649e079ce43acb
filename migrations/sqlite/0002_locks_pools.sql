-- Cluster-wide locks and semaphores (`sqlcron lock`, `sqlcron sem`) and job pools.

-- One row per holder or waiter. The first `size` live rows of a name (by id) hold it; a row is
-- live while its lease has not ended (holders and waiters both extend their lease).
CREATE TABLE cron_lock_waiters (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    owner       TEXT NOT NULL,
    host        TEXT,
    pid         INTEGER,
    state       TEXT NOT NULL DEFAULT 'waiting',
    enqueued_at INTEGER NOT NULL,
    acquired_at INTEGER,
    lease_until INTEGER NOT NULL
);
CREATE INDEX cron_lock_waiters_name ON cron_lock_waiters (name, id);

-- What happened last to each lock, for debugging.
CREATE TABLE cron_locks (
    name          TEXT PRIMARY KEY,
    last_owner    TEXT,
    last_host     TEXT,
    last_pid      INTEGER,
    last_acquired INTEGER,
    last_released INTEGER,
    last_release  TEXT
);

-- Pool sizes: [pools] in TOML is written here; SQL users may insert their own.
CREATE TABLE cron_pools (
    name TEXT PRIMARY KEY,
    size INTEGER NOT NULL
);
ALTER TABLE cron_table ADD COLUMN pool_wait INTEGER NOT NULL DEFAULT 0;
CREATE INDEX cron_table_pool ON cron_table (pool);
