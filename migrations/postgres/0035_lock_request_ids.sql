-- A lock request's id is the database's, always, as a job's (migration 0028). The id is also
-- the fencing token of a hold and its place in the lock's queue. The locker's credential may
-- insert and update cron_lock_waiters rows, and could pick ids: the sequence's next ones, so
-- that each later `sqlcron lock` and `sqlcron sem`, of every name, failed on the primary key,
-- as many times as ids were planted. An insert now takes its id from the sequence whatever the
-- writer gave, and an update keeps the id the row had (`UPDATE OF id`: sqlcron's own updates
-- never name id and do not run it).

CREATE FUNCTION cron_lock_waiters_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- pg_catalog's, by name (see migration 0028).
        NEW.id := pg_catalog.nextval(pg_catalog.pg_get_serial_sequence('cron_lock_waiters', 'id')::regclass);
    ELSE
        NEW.id := OLD.id;
    END IF;
    RETURN NEW;
END
$$;

-- Names resolve in the schema only, never in a writer's temporary or own schema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.cron_lock_waiters_id() SET search_path = pg_catalog, %I, pg_temp',
                   current_schema(), current_schema());
END
$$;

CREATE TRIGGER cron_lock_waiters_id_insert BEFORE INSERT ON cron_lock_waiters
    FOR EACH ROW EXECUTE FUNCTION cron_lock_waiters_id();
CREATE TRIGGER cron_lock_waiters_id_update BEFORE UPDATE OF id ON cron_lock_waiters
    FOR EACH ROW EXECUTE FUNCTION cron_lock_waiters_id();
