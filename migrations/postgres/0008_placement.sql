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
ALTER TABLE cron_nodes ADD COLUMN drain BIGINT NOT NULL DEFAULT 0;
CREATE TABLE cron_placements (placement TEXT PRIMARY KEY);

CREATE FUNCTION cron_placement_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_placements (placement) VALUES (NEW.placement) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_placement_insert AFTER INSERT ON cron_table
    FOR EACH ROW WHEN (NEW.placement IS NOT NULL)
    EXECUTE FUNCTION cron_placement_seen();
CREATE TRIGGER cron_placement_update AFTER UPDATE OF placement ON cron_table
    FOR EACH ROW WHEN (NEW.placement IS NOT NULL AND NEW.placement IS DISTINCT FROM OLD.placement)
    EXECUTE FUNCTION cron_placement_seen();

CREATE TRIGGER cron_table_unpark_placement BEFORE UPDATE OF placement, overlap ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND (NEW.placement IS DISTINCT FROM OLD.placement
                                     OR NEW.overlap IS DISTINCT FROM OLD.overlap))
    EXECUTE FUNCTION cron_table_unpark();

CREATE FUNCTION cron_audit_sql_placement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cron_audit (at, action, job, who, detail)
    VALUES (CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT), 'sql_update', NEW.name, 'sql',
            'changed ' || concat_ws(',',
                CASE WHEN NEW.placement IS DISTINCT FROM OLD.placement THEN 'placement' END,
                CASE WHEN NEW.overlap IS DISTINCT FROM OLD.overlap THEN 'overlap' END)
            || ' (database user ' || current_user || ')');
    RETURN NULL;
END
$$;
CREATE TRIGGER cron_audit_sql_placement AFTER UPDATE OF placement, overlap ON cron_table
    FOR EACH ROW
    WHEN (NEW.changed_by IS NOT DISTINCT FROM OLD.changed_by AND (NEW.placement IS DISTINCT FROM OLD.placement
                                                                 OR NEW.overlap IS DISTINCT FROM OLD.overlap))
    EXECUTE FUNCTION cron_audit_sql_placement();
