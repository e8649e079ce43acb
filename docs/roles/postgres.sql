-- sqlcron: a least-privilege role layout for PostgreSQL (docs/security.md "Database roles").
-- Run the first part as a superuser, then `CREATE DATABASE sqlcron OWNER sqlcron_owner`,
-- `sqlcron migrate` with the owner's URL, and the second part connected to that database.
-- Replace the passwords (or use your own authentication). The test suite runs this file as
-- written (tests/it/roles.rs), with the role names prefixed.
--
--   sqlcron_owner   owns the tables; `sqlcron migrate` (and nothing else) runs as it
--   sqlcron_daemon  every node's `[database] url`: reads and writes the tables, no DDL
--   sqlcron_editor  edits jobs with SQL and runs `sqlcron run/pause/resume/at/backfill/sign`
--   sqlcron_locker  `sqlcron lock` and `sqlcron sem` from scripts: the lock tables only
--   sqlcron_reader  `sqlcron status/history/explain/audit/events`, dashboards: read only
--
-- With `[security] sql_jobs = "signed"` on the nodes, neither the editor's nor the daemon's
-- credential can make a node run a command: that needs the signing key, kept off the database.

CREATE ROLE sqlcron_owner LOGIN PASSWORD 'change-me-owner';
CREATE ROLE sqlcron_daemon LOGIN PASSWORD 'change-me-daemon';
CREATE ROLE sqlcron_editor LOGIN PASSWORD 'change-me-editor';
CREATE ROLE sqlcron_locker LOGIN PASSWORD 'change-me-locker';
CREATE ROLE sqlcron_reader LOGIN PASSWORD 'change-me-reader';

-- after migrate --
-- (Every role may connect to a database unless CONNECT was revoked from PUBLIC.)
-- Nobody but the owner creates objects in the schema (PostgreSQL 15 and later do not let PUBLIC
-- by default; 14 and older do): a function or operator an editor created there could be
-- picked by the schema's triggers over pg_catalog's and run with another writer's rights.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO sqlcron_daemon, sqlcron_editor, sqlcron_locker, sqlcron_reader;

-- The daemon: rows of every table, never their definition.
GRANT SELECT, INSERT, UPDATE, DELETE ON cron_table, cron_runs, cron_nodes, cron_locks, cron_lock_waiters, cron_pools, cron_duties, cron_events, cron_watch, cron_placements, cron_audit, cron_web_sessions, cron_web_tokens, cron_calendars, cron_start_rate TO sqlcron_daemon;
GRANT SELECT ON _sqlx_migrations, cron_schema TO sqlcron_daemon;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO sqlcron_daemon;

-- Editors: jobs; the triggers of cron_table write the audit trail with the editor's rights,
-- hence INSERT there; the placement list's trigger runs with its owner's (it locks a value in
-- use, which needs UPDATE), and INSERT on cron_placements is for older schemas.
GRANT SELECT ON cron_table, cron_runs, cron_nodes, cron_locks, cron_pools, cron_duties, cron_events, cron_watch, cron_placements, cron_audit, cron_calendars, cron_start_rate, _sqlx_migrations, cron_schema TO sqlcron_editor;
GRANT INSERT, UPDATE, DELETE ON cron_table, cron_calendars TO sqlcron_editor;
GRANT INSERT ON cron_audit, cron_placements TO sqlcron_editor;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO sqlcron_editor;

-- Scripts taking locks and semaphores.
GRANT SELECT ON _sqlx_migrations, cron_schema, cron_nodes TO sqlcron_locker;
GRANT SELECT, INSERT, UPDATE, DELETE ON cron_locks, cron_lock_waiters TO sqlcron_locker;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO sqlcron_locker;

-- Readers.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO sqlcron_reader;
