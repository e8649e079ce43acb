-- Cluster-wide locks and semaphores (`sqlcron lock`, `sqlcron sem`) and job pools.

-- One row per holder or waiter. The first `size` live rows of a name (by id) hold it; a row is
-- live while its lease has not ended (holders and waiters both extend their lease).
CREATE TABLE cron_lock_waiters (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    name        VARCHAR(191) NOT NULL,
    size        BIGINT NOT NULL,
    owner       VARCHAR(255) NOT NULL,
    host        VARCHAR(255),
    pid         BIGINT,
    state       VARCHAR(16) NOT NULL DEFAULT 'waiting',
    enqueued_at BIGINT NOT NULL,
    acquired_at BIGINT,
    lease_until BIGINT NOT NULL,
    INDEX cron_lock_waiters_name (name, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- What happened last to each lock, for debugging.
CREATE TABLE cron_locks (
    name          VARCHAR(191) PRIMARY KEY,
    last_owner    VARCHAR(255),
    last_host     VARCHAR(255),
    last_pid      BIGINT,
    last_acquired BIGINT,
    last_released BIGINT,
    last_release  VARCHAR(16)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Pool sizes: [pools] in TOML is written here; SQL users may insert their own.
CREATE TABLE cron_pools (
    name VARCHAR(191) PRIMARY KEY,
    size BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
ALTER TABLE cron_table ADD COLUMN pool_wait BIGINT NOT NULL DEFAULT 0;
CREATE INDEX cron_table_pool ON cron_table (pool);
