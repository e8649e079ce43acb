-- The idle look (docs/wakeups.md): the peek also asks whether any job has alerts, so that the
-- alert scan needs no look of its own; this index answers it without reading the table.
CREATE INDEX cron_table_alerts ON cron_table (id) WHERE alerts IS NOT NULL;
