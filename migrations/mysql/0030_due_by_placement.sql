-- The peek's earliest due row looked up apart for the rows any node runs (`placement IS NULL`)
-- and for the node's own placement values: with `cron_table_due` on `(enabled, next_exec)`, a
-- node stepped over every other node's placed rows that fall due before its own (each node's
-- copy of an `every_node` job is one, all due in the same second), so each peek read a row per
-- node in the fleet, twice (docs/fleet.md). The placement comes between: each lookup reads the
-- first row of its range. Replaced, not added, so that the claim and the release keep writing
-- the same number of index entries; statements that order the enabled rows by `next_exec`
-- without a placement use `cron_table_next`.
ALTER TABLE cron_table DROP INDEX cron_table_due,
    ADD INDEX cron_table_due (enabled, placement(191), next_exec);
