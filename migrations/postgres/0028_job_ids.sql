-- A job's id is the database's, always (issue 49). The editor may insert and update cron_table
-- rows, and could pick ids: the sequence's next ones, so that each later insert of a job
-- failed on the primary key (`sqlcron apply` creating a job, `sqlcron at`, every_node copies,
-- backfills), as many times as ids were planted. An insert now takes its id from the sequence
-- whatever the writer gave, and an update keeps the id the row had (`UPDATE OF id`: a claim,
-- lease extension or release, which never names id, does not run it).

CREATE FUNCTION cron_table_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- pg_catalog's, by name: an unqualified nextval(text) would prefer a function of
        -- that name a writer created in the schema (an exact match beats the implicit cast
        -- to regclass), and run it with the rights of whoever inserts.
        NEW.id := pg_catalog.nextval(pg_catalog.pg_get_serial_sequence('cron_table', 'id')::regclass);
    ELSE
        NEW.id := OLD.id;
    END IF;
    RETURN NEW;
END
$$;

-- Names resolve in the schema only, never in a writer's temporary or own schema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.cron_table_id() SET search_path = pg_catalog, %I, pg_temp',
                   current_schema(), current_schema());
END
$$;

-- The same for cron_audit's ids (migration 0027 called nextval unqualified).
CREATE OR REPLACE FUNCTION cron_audit_db_user() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.id := pg_catalog.nextval(pg_catalog.pg_get_serial_sequence('cron_audit', 'id')::regclass);
    ELSE
        NEW.id := OLD.id;
    END IF;
    NEW.db_user := session_user
        || CASE WHEN current_user <> session_user THEN ' as ' || current_user ELSE '' END
        || ' from ' || COALESCE(pg_catalog.host(pg_catalog.inet_client_addr()), 'local socket');
    RETURN NEW;
END
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.cron_audit_db_user() SET search_path = pg_catalog, %I, pg_temp',
                   current_schema(), current_schema());
END
$$;

CREATE TRIGGER cron_table_id_insert BEFORE INSERT ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_table_id();
CREATE TRIGGER cron_table_id_update BEFORE UPDATE OF id ON cron_table
    FOR EACH ROW EXECUTE FUNCTION cron_table_id();
