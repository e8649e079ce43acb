-- The dashboard's runs view and /api/v1/runs filter by outcome ("failed in the last hour") and
-- page by record id: this index serves that without a scan of every run.
CREATE INDEX cron_runs_outcome ON cron_runs (outcome, id);
