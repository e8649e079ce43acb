-- The web dashboard's sessions (docs/dashboard.md): one row per signed-in browser, valid on
-- every node. `id` is the SHA-256 (hex) of the cookie's secret, never the secret itself;
-- `created` and `expires` are the database clock in milliseconds. Expired rows are deleted
-- when a new session is made.
CREATE TABLE cron_web_sessions (
    id TEXT PRIMARY KEY,
    user_name TEXT NOT NULL,
    role TEXT NOT NULL,
    created BIGINT NOT NULL,
    expires BIGINT NOT NULL
);
CREATE INDEX cron_web_sessions_expires ON cron_web_sessions (expires);
