-- The idle look (docs/wakeups.md). "Does any job have alerts?" is asked every minute while none
-- has; this index answers it without reading the table once PostgreSQL's statistics know the
-- column is mostly NULL.
CREATE INDEX cron_table_alerts ON cron_table (id) WHERE alerts IS NOT NULL;
-- An event recorded for delivery wakes the nodes: their peek learns when its delivery is due,
-- and when the claim that follows ends (should the sending node die, another one takes it
-- then, without waiting for a safety look).
CREATE TRIGGER cron_events_wake AFTER INSERT ON cron_events
    FOR EACH ROW WHEN (NEW.next_try IS NOT NULL)
    EXECUTE FUNCTION cron_wake();
