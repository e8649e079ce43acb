-- sqlcron schema, SQLite. Instants are BIGINT milliseconds since the Unix epoch (UTC).
CREATE TABLE cron_table (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    name              TEXT NOT NULL UNIQUE,
    schedule          TEXT NOT NULL,
    timezone          TEXT,
    command           TEXT,
    argv              TEXT,
    env               TEXT,
    workdir           TEXT,
    enabled           INTEGER NOT NULL DEFAULT 1,
    pool              TEXT,
    misfire           TEXT,
    starting_deadline TEXT,
    max_catch_up      INTEGER,
    retries           INTEGER,
    retry_backoff     TEXT,
    retry_backoff_max TEXT,
    timeout           TEXT,
    kill_grace        TEXT,
    jitter            TEXT,
    on_lease_lost     TEXT,
    rerun_lost        INTEGER,
    source            TEXT NOT NULL DEFAULT 'sql',
    toml_hash         TEXT,
    next_exec         INTEGER,
    slot              INTEGER,
    attempt           INTEGER NOT NULL DEFAULT 0,
    exec_by           TEXT,
    prev_exec_by      TEXT,
    lease_until       INTEGER,
    token             INTEGER NOT NULL DEFAULT 0,
    claim_id          TEXT,
    claimed_at        INTEGER,
    run_now           INTEGER NOT NULL DEFAULT 0,
    dirty             INTEGER NOT NULL DEFAULT 0,
    last_status       TEXT,
    last_exit         INTEGER,
    last_start        INTEGER,
    last_end          INTEGER,
    last_node         TEXT,
    error             TEXT
);
CREATE INDEX cron_table_due ON cron_table (enabled, next_exec);
CREATE INDEX cron_table_next ON cron_table (next_exec);
CREATE INDEX cron_table_claim ON cron_table (claim_id);

-- A schedule, zone or command changed with SQL takes effect at the next poll: an idle row is
-- re-prepared (next_exec NULL), a claimed one is marked dirty and re-prepared on release.
CREATE TRIGGER cron_table_changed AFTER UPDATE OF schedule, timezone, command, argv ON cron_table
FOR EACH ROW WHEN NEW.schedule IS NOT OLD.schedule OR NEW.timezone IS NOT OLD.timezone
    OR NEW.command IS NOT OLD.command OR NEW.argv IS NOT OLD.argv
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TABLE cron_runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_name      TEXT NOT NULL,
    slot          INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    node          TEXT,
    token         INTEGER,
    started       INTEGER,
    ended         INTEGER,
    outcome       TEXT NOT NULL,
    exit_code     INTEGER,
    exit_signal   INTEGER,
    output        TEXT,
    skipped_count INTEGER,
    skipped_last  INTEGER,
    message       TEXT,
    UNIQUE (job_name, slot, attempt)
);
CREATE INDEX cron_runs_job ON cron_runs (job_name, id);
CREATE INDEX cron_runs_token ON cron_runs (job_name, token);

CREATE TABLE cron_nodes (
    name      TEXT PRIMARY KEY,
    host      TEXT,
    pid       INTEGER,
    version   TEXT,
    started   INTEGER,
    last_seen INTEGER,
    stopped   INTEGER,
    toml_jobs TEXT
);
