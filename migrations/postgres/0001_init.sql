-- sqlcron schema, PostgreSQL 12+. Instants are BIGINT milliseconds since the Unix epoch (UTC).
CREATE TABLE cron_table (
    id                BIGSERIAL PRIMARY KEY,
    name              TEXT NOT NULL UNIQUE,
    schedule          TEXT NOT NULL,
    timezone          TEXT,
    command           TEXT,
    argv              TEXT,
    env               TEXT,
    workdir           TEXT,
    enabled           BIGINT NOT NULL DEFAULT 1,
    pool              TEXT,
    misfire           TEXT,
    starting_deadline TEXT,
    max_catch_up      BIGINT,
    retries           BIGINT,
    retry_backoff     TEXT,
    retry_backoff_max TEXT,
    timeout           TEXT,
    kill_grace        TEXT,
    jitter            TEXT,
    on_lease_lost     TEXT,
    rerun_lost        BIGINT,
    source            TEXT NOT NULL DEFAULT 'sql',
    toml_hash         TEXT,
    next_exec         BIGINT,
    slot              BIGINT,
    attempt           BIGINT NOT NULL DEFAULT 0,
    exec_by           TEXT,
    prev_exec_by      TEXT,
    lease_until       BIGINT,
    token             BIGINT NOT NULL DEFAULT 0,
    claim_id          TEXT,
    claimed_at        BIGINT,
    run_now           BIGINT NOT NULL DEFAULT 0,
    dirty             BIGINT NOT NULL DEFAULT 0,
    last_status       TEXT,
    last_exit         BIGINT,
    last_start        BIGINT,
    last_end          BIGINT,
    last_node         TEXT,
    error             TEXT
);
CREATE INDEX cron_table_due ON cron_table (enabled, next_exec);
CREATE INDEX cron_table_next ON cron_table (next_exec);
CREATE INDEX cron_table_claim ON cron_table (claim_id);

-- A schedule, zone or command changed with SQL takes effect at the next poll: an idle row is
-- re-prepared (next_exec NULL), a claimed one is marked dirty and re-prepared on release.
CREATE FUNCTION cron_table_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.schedule IS DISTINCT FROM OLD.schedule OR NEW.timezone IS DISTINCT FROM OLD.timezone
        OR NEW.command IS DISTINCT FROM OLD.command OR NEW.argv IS DISTINCT FROM OLD.argv THEN
        NEW.error := NULL;
        IF NEW.exec_by IS NULL THEN
            NEW.next_exec := NULL;
            NEW.dirty := 0;
        ELSE
            NEW.dirty := 1;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER cron_table_changed BEFORE UPDATE ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_table_changed();

CREATE TABLE cron_runs (
    id            BIGSERIAL PRIMARY KEY,
    job_name      TEXT NOT NULL,
    slot          BIGINT NOT NULL,
    attempt       BIGINT NOT NULL,
    node          TEXT,
    token         BIGINT,
    started       BIGINT,
    ended         BIGINT,
    outcome       TEXT NOT NULL,
    exit_code     BIGINT,
    exit_signal   BIGINT,
    output        TEXT,
    skipped_count BIGINT,
    skipped_last  BIGINT,
    message       TEXT,
    UNIQUE (job_name, slot, attempt)
);
CREATE INDEX cron_runs_job ON cron_runs (job_name, id);
CREATE INDEX cron_runs_token ON cron_runs (job_name, token);

CREATE TABLE cron_nodes (
    name      TEXT PRIMARY KEY,
    host      TEXT,
    pid       BIGINT,
    version   TEXT,
    started   BIGINT,
    last_seen BIGINT,
    stopped   BIGINT,
    toml_jobs TEXT
);
