-- The dashboard's "Running now" (Store::running): the rows a node holds, by name. PostgreSQL
-- claims with RETURNING and never sets claim_id, so the list read by claim_id was always empty
-- here. Partial: a row is in it only while claimed (one index entry per claim).
CREATE INDEX cron_table_held ON cron_table (name) WHERE exec_by IS NOT NULL;
