-- The idle look (docs/wakeups.md): the peek also asks whether any job has alerts, so that the
-- alert scan needs no look of its own. MySQL/MariaDB have no partial index: a one-character
-- prefix of the column answers "alerts IS NOT NULL" as a range without reading the table.
CREATE INDEX cron_table_alerts ON cron_table (alerts(1));
