-- What this schema needs of a sqlcron that uses it. `oldest_reader` is the newest migration a
-- sqlcron must know to read and write this schema: a node whose own newest migration is older
-- refuses to start ("upgrade this node") instead of failing on a column it does not find.
-- Migrations only add (tables, nullable columns, columns with a default, indexes) within a
-- release; a later migration that drops, renames or retypes what an older release uses raises
-- this number to that release's successor (docs/upgrades.md).
CREATE TABLE cron_schema (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
-- 30: every sqlcron that knows migration 30 reads this schema (this migration only adds).
INSERT INTO cron_schema (name, value) VALUES ('oldest_reader', 30);
