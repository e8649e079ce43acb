-- The web dashboard's sessions (docs/dashboard.md): one row per signed-in browser, valid on
-- every node. `id` is the SHA-256 (hex) of the cookie's secret, never the secret itself;
-- `created` and `expires` are the database clock in milliseconds. Expired rows are deleted
-- when a new session is made.
CREATE TABLE cron_web_sessions (
    id CHAR(64) PRIMARY KEY,
    user_name VARCHAR(255) NOT NULL,
    role VARCHAR(16) NOT NULL,
    created BIGINT NOT NULL,
    expires BIGINT NOT NULL,
    INDEX cron_web_sessions_expires (expires)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
