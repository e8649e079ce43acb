-- The peek's earliest due row looked up apart for the rows any node runs and for the node's own
-- placed rows (docs/fleet.md, "What in a peek grows with the fleet"). With `cron_table_due` on
-- `(enabled, next_exec)`, a node stepped over every other node's placed rows due before its own
-- (each node's copy of an `every_node` job is one, all due in the same second): each peek read a
-- row per node in the fleet, twice.
--
-- `placed` is 1 for a row with a placement, 0 for a row any node runs: a stored generated column
-- (nobody can write it), computed on insert and on an update that names `placement`, never on a
-- claim, lease extension or release. `cron_table_due` becomes `(enabled, next_exec, placed)`,
-- replaced rather than added, so that a run's writes still change two index entries of the job
-- row, each a byte wider: the peek's look for the rows any node runs checks `placed = 0` on the
-- index entry, and passes over other nodes' placed rows without reading them. `placed` comes
-- last so that the index still gives the enabled rows in `next_exec` order: with it before
-- `next_exec` (and with `placement(191)` there, tried before), MariaDB planned claims on it with
-- a sort of every due row, and a burst cost the server four times as much (docs/benchmarks.md).
-- A node's own placed rows are found by `cron_table_placement`, on the placement alone, which
-- no claim, lease extension or release writes.
ALTER TABLE cron_table
    ADD COLUMN placed TINYINT GENERATED ALWAYS AS (placement IS NOT NULL) STORED,
    DROP INDEX cron_table_due,
    ADD INDEX cron_table_due (enabled, next_exec, placed),
    ADD INDEX cron_table_placement (placement(191));
