-- The idle look (docs/wakeups.md): "does any job have alerts?" is asked every minute while
-- none has. MySQL/MariaDB have no partial index: a one-character prefix of the column answers
-- "alerts IS NOT NULL" as a range without reading the table.
CREATE INDEX cron_table_alerts ON cron_table (alerts(1));
