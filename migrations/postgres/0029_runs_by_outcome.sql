-- The dashboard's runs view and /api/v1/runs filter by outcome ("failed in the last hour") or
-- by node, and page by record id: these indexes serve that without a scan of every run.
CREATE INDEX cron_runs_outcome ON cron_runs (outcome, id);
CREATE INDEX cron_runs_node ON cron_runs (node, id);
