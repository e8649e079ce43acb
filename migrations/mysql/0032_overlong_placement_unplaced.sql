-- A placement longer than 700 characters parses on no node (`model::placement::PLACEMENT_MAX`),
-- so every node matches it and the one that claims its row parks the row with the reason. But
-- `cron_placements` keeps values of at most 700 characters (its key), and the triggers'
-- `INSERT IGNORE` cut a longer one to 700: no node's `placement IN (...)` matched the row itself.
-- A row written with `next_exec` already set (which no node prepares, and so parks) then waited,
-- claimed and parked by none. `placed` is now 0 for such a row, as for a row without a
-- placement: the claim takes `placed = 0 OR placement IN (...)`, so any node claims it, reads a
-- placement that does not parse, and parks the row.
ALTER TABLE cron_table
    MODIFY COLUMN placed TINYINT
        GENERATED ALWAYS AS (placement IS NOT NULL AND CHAR_LENGTH(placement) <= 700) STORED;
