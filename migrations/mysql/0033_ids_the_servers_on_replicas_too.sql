-- A lock request's id is the server's, always, as a job's (migration 0025). The id is also the
-- fencing token of a hold and its place in the lock's queue. The locker's credential may insert
-- and update cron_lock_waiters rows, and could pick ids: a request inserted, or updated, to the
-- largest BIGINT moved AUTO_INCREMENT to its end, and every later `sqlcron lock` and `sqlcron
-- sem`, of every name, failed to queue, even after that row was deleted (MySQL 8 keeps the
-- counter). An insert now takes its id from AUTO_INCREMENT whatever the writer gave, and an
-- update keeps the id the row had.
--
-- A session's `SET insert_id = N` chooses the id AUTO_INCREMENT hands out. Migration 0025
-- refused an insert in any session that set it; but a replica applying a primary's binary log
-- in statement form (`binlog_format = STATEMENT`; MIXED, MariaDB's default, logged these
-- inserts as rows in the test) sets it to the id the primary gave before each such insert,
-- and the refusal stopped the replica (seen at the first lock request). Only an id in the top quarter of the range is refused
-- now (above 2^62): ids below it leave AUTO_INCREMENT more than 2^62 ids to hand out, and no
-- primary reaches them. Here for cron_lock_waiters, and again for cron_table and cron_audit.
CREATE TRIGGER cron_lock_waiters_id BEFORE INSERT ON cron_lock_waiters FOR EACH ROW
BEGIN
    IF @@session.insert_id > 4611686018427387904 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlcron: a lock request id is the server''s; unset insert_id';
    END IF;
    SET NEW.id = NULL;
END;

CREATE TRIGGER cron_lock_waiters_keep_id BEFORE UPDATE ON cron_lock_waiters FOR EACH ROW
BEGIN
    SET NEW.id = OLD.id;
END;

DROP TRIGGER cron_table_id;

CREATE TRIGGER cron_table_id BEFORE INSERT ON cron_table FOR EACH ROW
BEGIN
    IF @@session.insert_id > 4611686018427387904 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlcron: a job id is the server''s; unset insert_id';
    END IF;
    SET NEW.id = NULL;
END;

DROP TRIGGER cron_audit_db_user_insert;

CREATE TRIGGER cron_audit_db_user_insert BEFORE INSERT ON cron_audit FOR EACH ROW
BEGIN
    IF @@session.insert_id > 4611686018427387904 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlcron: an audit id is the server''s; unset insert_id';
    END IF;
    SET NEW.id = NULL;
    SET NEW.db_user = USER();
END;
