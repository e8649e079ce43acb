-- API tokens of the web dashboard (docs/dashboard.md), made by `sqlcron web-token`. A token is
-- `sqlcron_<prefix>_<secret>`: `prefix` finds the row, `hash` is the SHA-256 (hex) of the
-- secret, never the secret itself. `expires` (database clock, ms) is NULL for no expiry.
CREATE TABLE cron_web_tokens (
    name VARCHAR(64) PRIMARY KEY,
    prefix CHAR(12) NOT NULL UNIQUE,
    hash CHAR(64) NOT NULL,
    role VARCHAR(16) NOT NULL,
    created BIGINT NOT NULL,
    expires BIGINT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
