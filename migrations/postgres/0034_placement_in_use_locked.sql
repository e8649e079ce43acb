-- A write that uses a placement value already in cron_placements locks that value's row until it
-- commits. ON CONFLICT DO NOTHING took no lock, so the pruning duty, which reads with a
-- statement's snapshot, could delete a value that a row was being inserted with (the insert not
-- yet committed): the job then waited for its value until the next round, on no node. The
-- pruning duty skips locked values (FOR UPDATE SKIP LOCKED) and reads the rows again once it
-- holds the others (docs/placement.md). WHERE FALSE: the conflicting row is locked, never
-- written.
CREATE OR REPLACE FUNCTION cron_placement_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_placements (placement) VALUES (NEW.placement)
        ON CONFLICT (placement) DO UPDATE SET placement = EXCLUDED.placement WHERE FALSE;
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
