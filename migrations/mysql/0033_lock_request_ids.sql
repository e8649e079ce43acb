-- A lock request's id is the server's, always, as a job's (migration 0025). The id is also the
-- fencing token of a hold and its place in the lock's queue. The locker's credential may insert
-- and update cron_lock_waiters rows, and could pick ids: a request inserted, or updated, to the
-- largest BIGINT moved AUTO_INCREMENT to its end, and every later `sqlcron lock` and `sqlcron
-- sem`, of every name, failed to queue, even after that row was deleted (MySQL 8 keeps the
-- counter). An insert now takes its id from AUTO_INCREMENT whatever the writer gave, an update
-- keeps the id the row had, and an insert in a session that set `insert_id` is refused.
CREATE TRIGGER cron_lock_waiters_id BEFORE INSERT ON cron_lock_waiters FOR EACH ROW
BEGIN
    IF @@session.insert_id <> 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sqlcron: a lock request id is the server''s; unset insert_id';
    END IF;
    SET NEW.id = NULL;
END;

CREATE TRIGGER cron_lock_waiters_keep_id BEFORE UPDATE ON cron_lock_waiters FOR EACH ROW
BEGIN
    SET NEW.id = OLD.id;
END;
