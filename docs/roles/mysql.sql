-- sqlcron: a least-privilege role layout for MySQL 8 / MariaDB 10.6+ (docs/security.md
-- "Database roles"). Run the first part as an administrator, then `sqlcron migrate` with the
-- owner's URL, then the second part. Replace `sqlcron` (the database), the host pattern '%'
-- and the passwords. Run as written by the test suite (tests/it/roles.rs).
--
--   sqlcron_owner   owns the schema; `sqlcron migrate` (and nothing else) runs as it; the
--                   triggers run with its rights (MySQL triggers are SQL SECURITY DEFINER)
--   sqlcron_daemon  every node's `[database] url`: reads and writes rows, no DDL
--   sqlcron_editor  edits jobs with SQL and runs `sqlcron run/pause/resume/at/backfill/sign`
--   sqlcron_locker  `sqlcron lock` and `sqlcron sem`: the lock tables only
--   sqlcron_reader  `sqlcron status/history/explain/audit/events`, dashboards: read only

CREATE DATABASE IF NOT EXISTS sqlcron;
CREATE USER 'sqlcron_owner'@'%' IDENTIFIED BY 'change-me-owner';
CREATE USER 'sqlcron_daemon'@'%' IDENTIFIED BY 'change-me-daemon';
CREATE USER 'sqlcron_editor'@'%' IDENTIFIED BY 'change-me-editor';
CREATE USER 'sqlcron_locker'@'%' IDENTIFIED BY 'change-me-locker';
CREATE USER 'sqlcron_reader'@'%' IDENTIFIED BY 'change-me-reader';
-- The owner creates the triggers, so it is their definer.
GRANT ALL PRIVILEGES ON sqlcron.* TO 'sqlcron_owner'@'%';

-- after migrate --
GRANT SELECT, INSERT, UPDATE, DELETE ON sqlcron.* TO 'sqlcron_daemon'@'%';

GRANT SELECT ON sqlcron.* TO 'sqlcron_editor'@'%';
GRANT INSERT, UPDATE, DELETE ON sqlcron.cron_table TO 'sqlcron_editor'@'%';
GRANT INSERT, UPDATE, DELETE ON sqlcron.cron_calendars TO 'sqlcron_editor'@'%';
-- The CLI's edits are audited, and `at`/placements write their values.
GRANT INSERT ON sqlcron.cron_audit TO 'sqlcron_editor'@'%';
GRANT INSERT ON sqlcron.cron_placements TO 'sqlcron_editor'@'%';

GRANT SELECT ON sqlcron._sqlx_migrations TO 'sqlcron_locker'@'%';
GRANT SELECT ON sqlcron.cron_schema TO 'sqlcron_locker'@'%';
GRANT SELECT ON sqlcron.cron_nodes TO 'sqlcron_locker'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON sqlcron.cron_locks TO 'sqlcron_locker'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON sqlcron.cron_lock_waiters TO 'sqlcron_locker'@'%';

GRANT SELECT ON sqlcron.* TO 'sqlcron_reader'@'%';
