-- Placement, drain and the overlap policy (README "Placement", "Schedules").
-- cron_table.overlap: 'forbid' or 'replace' (NULL: the default). cron_table.run_on: 'every_node'
-- for a job every matching node runs (a template, never claimed itself); cron_table.template:
-- on a node's own copy of such a job (named job@node, pinned to the node by its placement).
-- cron_table.placement: a JSON object {"tags": [...], "nodes": [...]} or NULL (any node). cron_placements: every placement value
-- written (kept by triggers, never pruned): a node reads it to learn which values it matches,
-- and its row count, in the peek, tells the node when to read it again. cron_nodes.tags: the
-- node's [node] tags (JSON array); cron_nodes.drain: 1 while the node is drained.
ALTER TABLE cron_table ADD COLUMN placement TEXT;
ALTER TABLE cron_table ADD COLUMN overlap TEXT;
ALTER TABLE cron_table ADD COLUMN run_on TEXT;
ALTER TABLE cron_table ADD COLUMN template TEXT;
CREATE INDEX cron_table_run_on ON cron_table (run_on(16));
CREATE INDEX cron_table_template ON cron_table (template(191));
ALTER TABLE cron_nodes ADD COLUMN tags TEXT;
ALTER TABLE cron_nodes ADD COLUMN drain BIGINT NOT NULL DEFAULT 0;
CREATE TABLE cron_placements (
    placement VARCHAR(700) PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TRIGGER cron_placement_insert AFTER INSERT ON cron_table FOR EACH ROW
BEGIN
    IF NEW.placement IS NOT NULL THEN
        INSERT IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
    END IF;
END;

CREATE TRIGGER cron_placement_update AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF NEW.placement IS NOT NULL AND NOT (NEW.placement <=> OLD.placement) THEN
        INSERT IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
    END IF;
END;

CREATE TRIGGER cron_table_unpark_placement BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND (NOT (NEW.placement <=> OLD.placement) OR NOT (NEW.overlap <=> OLD.overlap)) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;

CREATE TRIGGER cron_audit_sql_placement AFTER UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF (NEW.changed_by <=> OLD.changed_by) AND (NOT (NEW.placement <=> OLD.placement) OR NOT (NEW.overlap <=> OLD.overlap)) THEN
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), 'sql_update', NEW.name, 'sql', CONCAT('changed ', CONCAT_WS(',', IF(NEW.placement <=> OLD.placement, NULL, 'placement'), IF(NEW.overlap <=> OLD.overlap, NULL, 'overlap')), ' (database user ', CURRENT_USER(), ')'));
    END IF;
END;
