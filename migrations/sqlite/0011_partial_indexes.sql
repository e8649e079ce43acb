-- Host-local jobs are few: index only the rows the queries look for (templates, copies), so
-- that a claim or release, which moves next_exec and so writes every full index of the row,
-- does not also write these two for every job.
DROP INDEX cron_table_run_on;
DROP INDEX cron_table_template;
CREATE INDEX cron_table_run_on ON cron_table (id) WHERE run_on = 'every_node';
CREATE INDEX cron_table_template ON cron_table (template) WHERE template IS NOT NULL;
