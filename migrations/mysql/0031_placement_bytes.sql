-- Placement values are compared as bytes, as on PostgreSQL and SQLite. Under the tables' default
-- collation (blind to case and accents) `placement IN (...)` matched a row whose placement
-- differed from the node's value in case alone: a value no node can parse (`{"Nodes":["b"]}`),
-- which every node matches so that one of them parks a row that has it, written into
-- cron_placements before `{"nodes":["b"]}` was in use (an editor may insert values) made every
-- node claim and run the job placed on b; and the jobs placed on the tags "GPU" and "gpu" shared
-- the value written first (the key kept one), so the nodes tagged gpu ran both. The values rows
-- use are then put back at once, rather than at the pruning duty's next round.
ALTER TABLE cron_placements
    MODIFY placement VARCHAR(700) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE cron_table
    MODIFY placement TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
INSERT IGNORE INTO cron_placements (placement)
    SELECT DISTINCT placement FROM cron_table WHERE placement IS NOT NULL;
