-- sqlcron schema, MySQL 8 / MariaDB 10.6+. Instants are BIGINT milliseconds since the Unix epoch.
CREATE TABLE cron_table (
    id                BIGINT AUTO_INCREMENT PRIMARY KEY,
    name              VARCHAR(191) NOT NULL UNIQUE,
    schedule          VARCHAR(255) NOT NULL,
    timezone          VARCHAR(64),
    command           TEXT,
    argv              TEXT,
    env               TEXT,
    workdir           TEXT,
    enabled           BIGINT NOT NULL DEFAULT 1,
    pool              VARCHAR(191),
    misfire           VARCHAR(16),
    starting_deadline VARCHAR(32),
    max_catch_up      BIGINT,
    retries           BIGINT,
    retry_backoff     VARCHAR(32),
    retry_backoff_max VARCHAR(32),
    timeout           VARCHAR(32),
    kill_grace        VARCHAR(32),
    jitter            VARCHAR(32),
    on_lease_lost     VARCHAR(16),
    rerun_lost        BIGINT,
    source            VARCHAR(8) NOT NULL DEFAULT 'sql',
    toml_hash         VARCHAR(32),
    next_exec         BIGINT,
    slot              BIGINT,
    attempt           BIGINT NOT NULL DEFAULT 0,
    exec_by           VARCHAR(255),
    prev_exec_by      VARCHAR(255),
    lease_until       BIGINT,
    token             BIGINT NOT NULL DEFAULT 0,
    claim_id          VARCHAR(64),
    claimed_at        BIGINT,
    run_now           BIGINT NOT NULL DEFAULT 0,
    dirty             BIGINT NOT NULL DEFAULT 0,
    last_status       VARCHAR(16),
    last_exit         BIGINT,
    last_start        BIGINT,
    last_end          BIGINT,
    last_node         VARCHAR(255),
    error             TEXT,
    INDEX cron_table_due (enabled, next_exec),
    INDEX cron_table_next (next_exec),
    INDEX cron_table_claim (claim_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- A schedule, zone or command changed with SQL takes effect at the next poll: an idle row is
-- re-prepared (next_exec NULL), a claimed one is marked dirty and re-prepared on release.
CREATE TRIGGER cron_table_changed BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NOT (NEW.schedule <=> OLD.schedule) OR NOT (NEW.timezone <=> OLD.timezone)
        OR NOT (NEW.command <=> OLD.command) OR NOT (NEW.argv <=> OLD.argv) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TABLE cron_runs (
    id            BIGINT AUTO_INCREMENT PRIMARY KEY,
    job_name      VARCHAR(191) NOT NULL,
    slot          BIGINT NOT NULL,
    attempt       BIGINT NOT NULL,
    node          VARCHAR(255),
    token         BIGINT,
    started       BIGINT,
    ended         BIGINT,
    outcome       VARCHAR(16) NOT NULL,
    exit_code     BIGINT,
    exit_signal   BIGINT,
    output        MEDIUMTEXT,
    skipped_count BIGINT,
    skipped_last  BIGINT,
    message       TEXT,
    UNIQUE KEY cron_runs_slot (job_name, slot, attempt),
    INDEX cron_runs_job (job_name, id),
    INDEX cron_runs_token (job_name, token)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE cron_nodes (
    name      VARCHAR(191) PRIMARY KEY,
    host      VARCHAR(255),
    pid       BIGINT,
    version   VARCHAR(64),
    started   BIGINT,
    last_seen BIGINT,
    stopped   BIGINT,
    toml_jobs MEDIUMTEXT
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
