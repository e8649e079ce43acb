-- History retention. Pruning by age walks this index from the oldest end; pruning by count uses
-- cron_runs_job (job_name, id). One node at a time prunes, under the lease of the 'history' duty.
CREATE INDEX cron_runs_ended ON cron_runs (ended);

-- Cluster-wide duties: one row each, held by one node at a time under a lease (fenced by token).
CREATE TABLE cron_duties (
    name        TEXT PRIMARY KEY,
    node        TEXT,
    token       BIGINT NOT NULL DEFAULT 0,
    lease_until BIGINT NOT NULL DEFAULT 0,
    last_done   BIGINT,
    last_result TEXT
);
INSERT INTO cron_duties (name) VALUES ('history');
