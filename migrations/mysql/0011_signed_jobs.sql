-- Signed jobs (docs/security.md "Signed jobs"): cron_table.signature holds `ed25519:<Base64>`,
-- a signature of the row's definition by a key the nodes trust. A node with
-- `[security] sql_jobs = "signed"` parks a row written with SQL whose signature is missing or
-- does not match; signing it (a new signature) unparks it, as a change of the definition does.
ALTER TABLE cron_table ADD COLUMN signature TEXT;

CREATE TRIGGER cron_table_unpark_signature BEFORE UPDATE ON cron_table FOR EACH ROW
BEGIN
    IF OLD.error IS NOT NULL AND NOT (NEW.signature <=> OLD.signature) THEN
        SET NEW.error = NULL;
        IF NEW.exec_by IS NULL THEN
            SET NEW.next_exec = NULL, NEW.dirty = 0;
        ELSE
            SET NEW.dirty = 1;
        END IF;
    END IF;
END;
