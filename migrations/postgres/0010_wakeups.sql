-- Wake-ups (README "How fast does a change take effect"): a change that makes a job due now, or
-- a node's drain flag, sends NOTIFY sqlcron_wake; every daemon LISTENs and looks at the table at
-- once. Polling stays the safety net: a lost notification costs one poll, never a run. A claim
-- or a lease extension (exec_by set) sends nothing.
CREATE FUNCTION cron_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sqlcron_wake', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_table_wake_insert AFTER INSERT ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_wake();
-- An update wakes the nodes when it leaves the row unclaimed and the row needs preparing
-- (next_exec NULL: a schedule changed with SQL), was paused or resumed, got a manual run, or
-- became due within a second (a release whose next slot or retry is that close, a row changed
-- with SQL). A release whose next slot is later wakes nobody: the releasing node saw it, and the
-- others see it at their next look; so a burst of runs does not wake every node per release.
-- A claimed row whose lease is cut short (a stopping node hands its run over: next_exec and
-- lease_until set to now, exec_by kept so that the takeover sees the previous holder) wakes the
-- nodes too; a claim or an extension only moves next_exec later.
CREATE TRIGGER cron_table_wake_update AFTER UPDATE ON cron_table
    FOR EACH ROW
    WHEN ((NEW.exec_by IS NULL
           AND (NEW.next_exec IS NULL
                OR NEW.enabled IS DISTINCT FROM OLD.enabled
                OR NEW.run_now IS DISTINCT FROM OLD.run_now
                OR ((OLD.exec_by IS NOT NULL OR NEW.next_exec IS DISTINCT FROM OLD.next_exec)
                    AND NEW.next_exec <= CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) + 1000)))
          OR (NEW.exec_by IS NOT NULL
              AND NEW.next_exec < OLD.next_exec
              AND NEW.next_exec <= CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) + 1000))
    EXECUTE FUNCTION cron_wake();
CREATE TRIGGER cron_nodes_wake_drain AFTER UPDATE OF drain ON cron_nodes
    FOR EACH ROW WHEN (NEW.drain IS DISTINCT FROM OLD.drain)
    EXECUTE FUNCTION cron_wake();

-- Lock and semaphore hand-over (`sqlcron lock`, `sqlcron sem`): when a request leaves the queue
-- (a release, a waiter giving up, an expired request reaped), the first request still waiting
-- for that name is named in NOTIFY sqlcron_lock: exactly that waiter looks at once; the others
-- keep sleeping. Their polling stays the safety net.
CREATE FUNCTION cron_lock_wake() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    next_id BIGINT;
BEGIN
    SELECT id INTO next_id FROM cron_lock_waiters
     WHERE name = OLD.name AND state = 'waiting' ORDER BY id LIMIT 1;
    IF next_id IS NOT NULL THEN
        PERFORM pg_notify('sqlcron_lock', next_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_lock_waiters_wake AFTER DELETE ON cron_lock_waiters
    FOR EACH ROW EXECUTE FUNCTION cron_lock_wake();
