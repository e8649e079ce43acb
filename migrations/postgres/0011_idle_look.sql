-- The idle look (docs/wakeups.md): the peek also asks whether any job has alerts, so that the
-- alert scan needs no look of its own; this index answers it without reading the table. A
-- change of a job's alerts wakes the nodes, like the other changes that matter at once.
CREATE INDEX cron_table_alerts ON cron_table (id) WHERE alerts IS NOT NULL;
CREATE TRIGGER cron_table_wake_alerts AFTER UPDATE OF alerts ON cron_table
    FOR EACH ROW WHEN (NEW.alerts IS DISTINCT FROM OLD.alerts)
    EXECUTE FUNCTION cron_wake();
-- An event recorded for delivery wakes the nodes too: their peek learns when its delivery is
-- due, and when the claim that follows ends (should the sending node die, another one takes
-- it then, without waiting for a safety look).
CREATE TRIGGER cron_events_wake AFTER INSERT ON cron_events
    FOR EACH ROW WHEN (NEW.next_try IS NOT NULL)
    EXECUTE FUNCTION cron_wake();
