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
CREATE INDEX cron_table_run_on ON cron_table (run_on);
CREATE INDEX cron_table_template ON cron_table (template);
ALTER TABLE cron_nodes ADD COLUMN tags TEXT;
ALTER TABLE cron_nodes ADD COLUMN drain INTEGER NOT NULL DEFAULT 0;
CREATE TABLE cron_placements (placement TEXT PRIMARY KEY);

CREATE TRIGGER cron_placement_insert AFTER INSERT ON cron_table
FOR EACH ROW WHEN NEW.placement IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
END;

CREATE TRIGGER cron_placement_update AFTER UPDATE OF placement ON cron_table
FOR EACH ROW WHEN NEW.placement IS NOT NULL AND NEW.placement IS NOT OLD.placement
BEGIN
    INSERT OR IGNORE INTO cron_placements (placement) VALUES (NEW.placement);
END;

CREATE TRIGGER cron_table_unpark_placement AFTER UPDATE OF placement, overlap ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND (NEW.placement IS NOT OLD.placement OR NEW.overlap IS NOT OLD.overlap)
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;

CREATE TRIGGER cron_table_types_placement BEFORE UPDATE OF placement ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.placement must be text or NULL') WHERE NEW.placement IS NOT NULL AND typeof(NEW.placement) <> 'text';
END;

CREATE TRIGGER cron_table_types_placement_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.placement must be text or NULL') WHERE NEW.placement IS NOT NULL AND typeof(NEW.placement) <> 'text';
END;

CREATE TRIGGER cron_audit_sql_placement AFTER UPDATE OF placement, overlap ON cron_table
FOR EACH ROW WHEN NEW.changed_by IS OLD.changed_by AND (NEW.placement IS NOT OLD.placement OR NEW.overlap IS NOT OLD.overlap)
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'sql_update', NEW.name, 'sql', 'changed placement or overlap');
END;

CREATE TRIGGER cron_table_types_overlap BEFORE UPDATE OF overlap ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.overlap must be text or NULL') WHERE NEW.overlap IS NOT NULL AND typeof(NEW.overlap) <> 'text';
END;

CREATE TRIGGER cron_table_types_overlap_insert BEFORE INSERT ON cron_table
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'cron_table.overlap must be text or NULL') WHERE NEW.overlap IS NOT NULL AND typeof(NEW.overlap) <> 'text';
END;
