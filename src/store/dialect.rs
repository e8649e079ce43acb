//! The SQL that differs between SQLite, PostgreSQL and MySQL/MariaDB.
//!
//! Statements are written once with `?` placeholders and `{now}` for the database clock (in
//! milliseconds since the epoch); [`Dialect::render`] turns them into each dialect's text
//! (`$1, $2, ...` on PostgreSQL). Where the dialects really differ (the claim, upserts), each
//! has its own text here.

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
    Mysql,
}

impl Dialect {
    pub fn from_url(url: &str) -> Option<Dialect> {
        let scheme = url.split(':').next()?;
        match scheme {
            "sqlite" => Some(Dialect::Sqlite),
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::Mysql),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }

    /// The database clock, in milliseconds since the Unix epoch. Constant within a statement.
    fn now(self) -> &'static str {
        match self {
            Dialect::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)",
            // The session time zone is set to UTC on connect, so this is exact even during a
            // DST change of the server's zone.
            Dialect::Mysql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
        }
    }

    /// Replaces `{now}` and, on PostgreSQL, numbers the `?` placeholders.
    pub fn render(self, template: &str) -> String {
        let text = template.replace("{now}", self.now());
        if self != Dialect::Postgres {
            return text;
        }
        let mut out = String::with_capacity(text.len() + 16);
        let mut n = 0;
        for c in text.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// `INSERT` that does nothing when the unique key exists: (prefix, suffix).
    pub fn insert_ignore(self) -> (&'static str, &'static str) {
        match self {
            Dialect::Sqlite => ("INSERT OR IGNORE", ""),
            Dialect::Postgres => ("INSERT", " ON CONFLICT DO NOTHING"),
            Dialect::Mysql => ("INSERT IGNORE", ""),
        }
    }

    /// Whether `UPDATE ... RETURNING` exists (MySQL and MariaDB's UPDATE have none).
    pub fn has_returning(self) -> bool {
        self != Dialect::Mysql
    }
}

/// Columns of `cron_table` a node reads when it claims or inspects a row.
pub const JOB_COLUMNS: &str = "id, name, schedule, timezone, command, argv, env, workdir, enabled, \
    pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, \
    timeout, kill_grace, jitter, on_lease_lost, rerun_lost, source, next_exec, slot, attempt, \
    exec_by, prev_exec_by, lease_until, token, run_now, dirty, last_status, last_exit, last_start, \
    last_end, last_node, error, claimed_at, pool_wait";

/// The claim: mark up to N due rows as ours in one statement, never holding a lock across a
/// round trip.
pub fn claim_sql(dialect: Dialect) -> String {
    let set = "prev_exec_by = exec_by, exec_by = ?, token = token + 1, \
               lease_until = {now} + ?, next_exec = {now} + ?, claimed_at = {now}";
    let due = "enabled = 1 AND next_exec <= {now}";
    let template = match dialect {
        // Writes are serialised by SQLite itself: a plain UPDATE ... RETURNING.
        Dialect::Sqlite => format!(
            "UPDATE cron_table SET {set} WHERE id IN \
             (SELECT id FROM cron_table WHERE {due} ORDER BY next_exec LIMIT ?) \
             RETURNING {JOB_COLUMNS}, {{now}} AS db_now"
        ),
        // SKIP LOCKED: concurrent claimers take different rows instead of queueing.
        Dialect::Postgres => format!(
            "UPDATE cron_table c SET prev_exec_by = c.exec_by, exec_by = ?, token = c.token + 1, \
             lease_until = {{now}} + ?, next_exec = {{now}} + ?, claimed_at = {{now}} \
             FROM (SELECT id FROM cron_table WHERE {due} ORDER BY next_exec LIMIT ? \
                   FOR UPDATE SKIP LOCKED) d \
             WHERE c.id = d.id RETURNING {}, {{now}} AS db_now",
            JOB_COLUMNS
                .split(", ")
                .map(|c| format!("c.{}", c.trim()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // No RETURNING: mark with a unique claim id, then read back by it. Assignments run left
        // to right, so prev_exec_by still sees the old exec_by.
        Dialect::Mysql => format!(
            "UPDATE cron_table SET {set}, claim_id = ? WHERE {due} ORDER BY next_exec LIMIT ?"
        ),
    };
    dialect.render(&template)
}
