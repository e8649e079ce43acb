-- Signed jobs (docs/security.md "Signed jobs"): cron_table.signature holds `ed25519:<Base64>`,
-- a signature of the row's definition by a key the nodes trust. A node with
-- `[security] sql_jobs = "signed"` parks a row written with SQL whose signature is missing or
-- does not match; signing it (a new signature) unparks it, as a change of the definition does.
ALTER TABLE cron_table ADD COLUMN signature TEXT;

CREATE TRIGGER cron_table_unpark_signature BEFORE UPDATE OF signature ON cron_table
    FOR EACH ROW
    WHEN (OLD.error IS NOT NULL AND NEW.signature IS DISTINCT FROM OLD.signature)
    EXECUTE FUNCTION cron_table_unpark();
