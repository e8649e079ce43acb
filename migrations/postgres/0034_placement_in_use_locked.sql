-- A write that uses a placement value already in cron_placements holds a shared lock on that
-- value's row (FOR KEY SHARE) until it commits. ON CONFLICT DO NOTHING took no lock, so the
-- pruning duty, which reads with a statement's snapshot, could delete a value that a row was
-- being inserted with (the insert not yet committed): the job then waited for its value until
-- the next round, on no node. The pruning duty skips locked values (FOR UPDATE SKIP LOCKED) and
-- reads the rows again once it holds the others (docs/placement.md). The lock is shared: writers
-- of rows with the same value do not wait for each other. The loop: a value deleted by the
-- pruning duty between the two statements is inserted anew (ours then, invisible to it until we
-- commit). Locking a row needs the UPDATE privilege on cron_placements, which an editor
-- (docs/roles/postgres.sql: INSERT only) lacks: the function runs with its owner's rights
-- (SECURITY DEFINER, its search_path pinned below, EXECUTE revoked from PUBLIC, and a trigger of
-- cron_table only); it writes nothing but the row's own value, which an editor may insert anyway.
CREATE OR REPLACE FUNCTION cron_placement_seen() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER AS $$
BEGIN
    -- Only as cron_table's trigger: attached to another table (a temporary one of any role),
    -- it would write values with its owner's rights.
    IF TG_RELID <> 'cron_table'::regclass THEN
        RAISE EXCEPTION 'cron_placement_seen: a trigger of cron_table only';
    END IF;
    LOOP
        PERFORM 1 FROM cron_placements WHERE placement = NEW.placement FOR KEY SHARE;
        EXIT WHEN FOUND;
        INSERT INTO cron_placements (placement) VALUES (NEW.placement) ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;
    END LOOP;
    RETURN NULL;
END
$$;

-- CREATE OR REPLACE resets the search_path that 0024 set: set it again.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.cron_placement_seen() SET search_path = %I, pg_temp',
                   current_schema(), current_schema());
END
$$;

-- No role but the owner may attach it to a trigger of its own (EXECUTE is checked when a trigger
-- is created, not when it fires).
REVOKE ALL ON FUNCTION cron_placement_seen() FROM PUBLIC;
