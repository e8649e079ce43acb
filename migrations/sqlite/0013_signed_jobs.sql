-- Signed jobs (docs/security.md "Signed jobs"): cron_table.signature holds `ed25519:<Base64>`,
-- a signature of the row's definition by a key the nodes trust. A node with
-- `[security] sql_jobs = "signed"` parks a row written with SQL whose signature is missing or
-- does not match; signing it (a new signature) unparks it, as a change of the definition does.
ALTER TABLE cron_table ADD COLUMN signature TEXT;

CREATE TRIGGER cron_table_unpark_signature AFTER UPDATE OF signature ON cron_table
FOR EACH ROW WHEN OLD.error IS NOT NULL AND NEW.signature IS NOT OLD.signature
BEGIN
    UPDATE cron_table SET
        error = NULL,
        next_exec = CASE WHEN exec_by IS NULL THEN NULL ELSE next_exec END,
        dirty = CASE WHEN exec_by IS NULL THEN 0 ELSE 1 END
    WHERE id = NEW.id;
END;
