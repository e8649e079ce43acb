-- The peek's earliest due row looked up apart for the rows any node runs and for the node's own
-- placed rows (docs/fleet.md, "What in a peek grows with the fleet"). With `cron_table_due` on
-- `(enabled, next_exec)`, a node stepped over every other node's placed rows due before its own
-- (each node's copy of an `every_node` job is one, all due in the same second): each peek read a
-- row per node in the fleet, twice.
--
-- `placed` is 1 for a row with a placement, 0 for a row any node runs: a stored generated column
-- (nobody can write it), computed on insert and on an update that names `placement`, never on a
-- claim, lease extension or release. `cron_table_due` becomes `(enabled, placed, next_exec)`,
-- replaced rather than added, so that a run's writes still change two index entries of the job
-- row, each a byte wider; the rows any node runs are the first entry of `placed = 0`. A node's
-- own placed rows are found by `cron_table_placement`, on the placement alone, which no claim,
-- lease extension or release writes. (An index of `(enabled, placement(191), next_exec)` made a
-- burst's writes four times as dear to the server, and was taken out; docs/benchmarks.md.)
ALTER TABLE cron_table
    ADD COLUMN placed TINYINT GENERATED ALWAYS AS (placement IS NOT NULL) STORED,
    DROP INDEX cron_table_due,
    ADD INDEX cron_table_due (enabled, next_exec, placed),
    ADD INDEX cron_table_placement (placement(191));
