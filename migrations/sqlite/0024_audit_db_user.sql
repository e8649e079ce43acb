-- cron_audit.db_user: what the database itself knows of the writer of a row. PostgreSQL and
-- MySQL/MariaDB fill it in by a trigger (their migrations 0026 and 0023); SQLite knows no
-- users (whoever can write the file can do anything, triggers included: docs/security.md), so
-- here it stays NULL.
ALTER TABLE cron_audit ADD COLUMN db_user TEXT;
