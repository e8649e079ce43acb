-- The idle look (docs/wakeups.md): "does any job have alerts?" is asked every minute while
-- none has; this index answers it without reading the table.
CREATE INDEX cron_table_alerts ON cron_table (id) WHERE alerts IS NOT NULL;
