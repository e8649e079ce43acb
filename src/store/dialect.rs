//! The SQL that differs between SQLite, PostgreSQL and MySQL/MariaDB.
//!
//! Statements are written once with `?` placeholders and `{now}` for the database clock (in
//! milliseconds since the epoch); [`Dialect::render`] turns them into each dialect's text
//! (`$1, $2, ...` on PostgreSQL). Where the dialects really differ (the claim, upserts), each
//! has its own text here.

use super::rows::NODE_ALIVE_WINDOW_MS;

pub use crate::model::database_url::Dialect;

impl Dialect {
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

    /// Most bytes of job output stored with a run. MySQL/MariaDB's `MEDIUMTEXT` holds 16 MiB,
    /// but a statement larger than `max_allowed_packet` (16 MiB by default on MariaDB, 4 MiB on
    /// older MySQL) is refused outright; 1 MiB stays well inside every default.
    pub fn output_max(self) -> usize {
        match self {
            Dialect::Mysql => 1024 * 1024,
            Dialect::Sqlite | Dialect::Postgres => 16 * 1024 * 1024,
        }
    }

    /// Text as this database can store it: NUL bytes (which PostgreSQL's `text` refuses) become
    /// U+FFFD, and text longer than `max_bytes` keeps its last `max_bytes` bytes, cut at a
    /// character boundary. The input is valid UTF-8 already (output is decoded lossily). The
    /// same on every dialect, so a run's history reads the same wherever it was written.
    pub fn storable_text(self, text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
        fn tail(text: &str, max_bytes: usize) -> &str {
            let mut start = text.len().saturating_sub(max_bytes);
            while !text.is_char_boundary(start) {
                start += 1;
            }
            &text[start..]
        }
        if text.contains('\0') {
            let replaced = text.replace('\0', "\u{FFFD}");
            std::borrow::Cow::Owned(tail(&replaced, max_bytes).to_string())
        } else {
            std::borrow::Cow::Borrowed(tail(text, max_bytes))
        }
    }

    /// The end of an `INSERT` that updates `columns` from the inserted values when the unique
    /// `key` exists already.
    pub fn on_conflict_update(self, key: &str, columns: &[&str]) -> String {
        match self {
            Dialect::Mysql => format!(
                " ON DUPLICATE KEY UPDATE {}",
                columns
                    .iter()
                    .map(|c| format!("{c} = VALUES({c})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Dialect::Sqlite | Dialect::Postgres => format!(
                " ON CONFLICT ({key}) DO UPDATE SET {}",
                columns
                    .iter()
                    .map(|c| format!("{c} = excluded.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// What every new connection runs first: the session time zone, SQLite's journal, and the
    /// timeout on every statement and lock wait (`timeout_ms`, see `Store::connect_with`).
    pub fn session_setup(self, timeout_ms: Option<u64>) -> Vec<SessionSetting> {
        let plain = |sql: String| SessionSetting {
            sql,
            otherwise: None,
        };
        match self {
            Dialect::Sqlite => vec![
                plain("PRAGMA journal_mode = WAL".into()),
                plain(format!(
                    "PRAGMA busy_timeout = {}",
                    timeout_ms.unwrap_or(5000)
                )),
                plain("PRAGMA synchronous = NORMAL".into()),
                // 1 MiB of page cache per connection: the hot rows are few.
                plain("PRAGMA cache_size = -1024".into()),
            ],
            Dialect::Mysql => {
                let mut v = vec![
                    plain("SET time_zone = '+00:00'".into()),
                    // Galera: a read waits until this node has applied every write the cluster
                    // committed before it (causal reads), so a node decides on what the others
                    // wrote; a server without Galera (MySQL) lacks the setting.
                    SessionSetting {
                        sql: "SET SESSION wsrep_sync_wait = 1".into(),
                        otherwise: Some("DO 0".into()),
                    },
                    // READ COMMITTED, PostgreSQL's default, which every statement here is
                    // written for. Under MySQL's default, REPEATABLE READ, a claim's scan of
                    // the due rows also locks the gaps between them, where the rows that nodes
                    // claim, extend and release are written again: at a fleet's midnight the
                    // claims, releases and lease extensions queued behind each other, and 50
                    // nodes drained 5 times slower (docs/databases.md). A server that logs
                    // statements as text (`binlog_format = STATEMENT`, which cannot log writes
                    // made under READ COMMITTED) keeps its own level. MariaDB names the setting
                    // `tx_isolation`, MySQL 8 `transaction_isolation`.
                    SessionSetting {
                        sql: read_committed("tx_isolation"),
                        otherwise: Some(read_committed("transaction_isolation")),
                    },
                ];
                if let Some(ms) = timeout_ms {
                    // Whole seconds, at least 1.
                    v.push(plain(format!(
                        "SET SESSION innodb_lock_wait_timeout = {}",
                        ms.div_ceil(1000)
                    )));
                    // MariaDB bounds every statement; MySQL has only max_execution_time, which
                    // bounds reads.
                    v.push(SessionSetting {
                        sql: format!("SET SESSION max_statement_time = {}", ms as f64 / 1000.0),
                        otherwise: Some(format!("SET SESSION max_execution_time = {ms}")),
                    });
                }
                v
            }
            Dialect::Postgres => timeout_ms
                .map(|ms| {
                    vec![
                        plain(format!("SET statement_timeout = {ms}")),
                        plain(format!("SET lock_timeout = {ms}")),
                    ]
                })
                .unwrap_or_default(),
        }
    }

    /// Whether `UPDATE ... RETURNING` exists (MySQL and MariaDB's UPDATE have none).
    pub fn has_returning(self) -> bool {
        self != Dialect::Mysql
    }
}

/// MySQL and MariaDB: READ COMMITTED for the session, through the isolation variable `var`,
/// unless the server logs statements as text.
fn read_committed(var: &str) -> String {
    format!(
        "SET SESSION {var} = IF(@@log_bin = 1 AND @@binlog_format = 'STATEMENT', \
         @@session.{var}, 'READ-COMMITTED')"
    )
}

/// One statement of a new connection's setup; `otherwise` is tried when it fails (a server
/// that lacks the setting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSetting {
    pub sql: String,
    pub otherwise: Option<String>,
}

/// Columns of `cron_table` a node reads when it claims or inspects a row.
pub const JOB_COLUMNS: &str = "id, name, schedule, timezone, command, argv, env, workdir, enabled, \
    pool, misfire, starting_deadline, max_catch_up, retries, retry_backoff, retry_backoff_max, \
    timeout, kill_grace, jitter, on_lease_lost, rerun_lost, source, next_exec, slot, attempt, \
    exec_by, prev_exec_by, lease_until, token, run_now, dirty, last_status, last_exit, last_start, \
    last_end, last_node, error, claimed_at, pool_wait, run_user, run_group, env_file, inherit_env, \
    limits, alerts, placement, overlap, run_on, template, http, signature, calendars, requires, after_jobs, upstream_run";

/// The columns of [`JOB_COLUMNS`] that hold whole numbers; every other holds text.
const JOB_NUMBER_COLUMNS: [&str; 17] = [
    "id",
    "enabled",
    "max_catch_up",
    "retries",
    "rerun_lost",
    "next_exec",
    "slot",
    "attempt",
    "lease_until",
    "token",
    "run_now",
    "dirty",
    "last_exit",
    "last_start",
    "last_end",
    "claimed_at",
    "pool_wait",
];

/// [`JOB_COLUMNS`] with each text column read as bytes, under its own name: the read made again
/// when the driver could not decode a row of the plain one (a text value that is not UTF-8,
/// which SQLite keeps as it is given and MariaDB accepts as encoded surrogates), so that each
/// value is checked on its own (`store::rows`) and only its row is parked. PostgreSQL refuses
/// such text when it is written: the plain columns.
pub fn job_columns_as_bytes(dialect: Dialect) -> String {
    as_bytes(dialect, JOB_COLUMNS.split(", "))
}

/// [`JOB_COLUMNS`], or with `bytes` [`job_columns_as_bytes`].
pub fn job_columns(dialect: Dialect, bytes: bool) -> String {
    if bytes {
        job_columns_as_bytes(dialect)
    } else {
        JOB_COLUMNS.to_string()
    }
}

/// The text expression `expr` as bytes on SQLite and MySQL (see [`job_columns_as_bytes`]); as
/// it is on PostgreSQL. For labels read with `store::rows::text_lossy`.
pub fn bytes_of(dialect: Dialect, expr: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!("CAST({expr} AS BLOB)"),
        Dialect::Mysql => format!("CAST({expr} AS BINARY)"),
        Dialect::Postgres => expr.to_string(),
    }
}

/// `columns` for a select list, with `bytes` each text column read as bytes ([`as_bytes`]).
pub fn columns(dialect: Dialect, columns: &[&str], bytes: bool) -> String {
    if bytes {
        as_bytes(dialect, columns.iter().copied())
    } else {
        columns.join(", ")
    }
}

/// `columns` of `cron_table` for a select list, each text column read as bytes (see
/// [`job_columns_as_bytes`]; every column not in [`JOB_COLUMNS`]'s numbers is taken for text).
pub fn as_bytes<'c>(dialect: Dialect, columns: impl IntoIterator<Item = &'c str>) -> String {
    columns
        .into_iter()
        .map(|c| {
            let name = c.rsplit('.').next().unwrap_or(c);
            match JOB_NUMBER_COLUMNS.contains(&name) {
                true => number_as_read(dialect, c),
                false => text_as_bytes(dialect, c),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A select list of the `text` and `numbers` columns of any table, with `bytes` as
/// [`as_bytes`] reads `cron_table`'s.
pub fn select_list(dialect: Dialect, text: &[&str], numbers: &[&str], bytes: bool) -> String {
    let text = text.iter().map(|c| match bytes {
        true => text_as_bytes(dialect, c),
        false => c.to_string(),
    });
    let numbers = numbers.iter().map(|c| match bytes {
        true => number_as_read(dialect, c),
        false => c.to_string(),
    });
    text.chain(numbers).collect::<Vec<_>>().join(", ")
}

/// The text column `c` as bytes on SQLite and MySQL, under its own name (a column named with
/// its table, `c.name`, keeps its own name); as it is on PostgreSQL.
fn text_as_bytes(dialect: Dialect, c: &str) -> String {
    let name = c.rsplit('.').next().unwrap_or(c);
    match dialect {
        Dialect::Sqlite => format!("CAST({c} AS BLOB) AS {name}"),
        Dialect::Mysql => format!("CAST({c} AS BINARY) AS {name}"),
        Dialect::Postgres => c.to_string(),
    }
}

/// The number column `c` in a read as bytes: SQLite keeps text a writer puts in a number
/// column as text, which may be no more UTF-8 than any other, so such a value is read as bytes
/// too (then no whole number); the row's `id` cannot hold text.
fn number_as_read(dialect: Dialect, c: &str) -> String {
    let name = c.rsplit('.').next().unwrap_or(c);
    match dialect {
        Dialect::Sqlite if name != "id" => {
            format!("CASE WHEN typeof({c}) = 'text' THEN CAST({c} AS BLOB) ELSE {c} END AS {name}")
        }
        _ => c.to_string(),
    }
}

/// The read of the rows waiting to be prepared (no `next_exec`), with the columns `cols`.
pub fn to_prepare_sql(cols: &str) -> String {
    format!("SELECT {cols} FROM cron_table WHERE next_exec IS NULL ORDER BY id LIMIT ?")
}

/// MySQL's read of the rows its claim marked (by `claim_id`), with the columns `cols`.
pub fn claim_read_sql(cols: &str) -> String {
    format!("SELECT {cols}, {{now}} AS db_now FROM cron_table WHERE claim_id = ?")
}

/// The placement condition of the claim and the peek: rows any node may run, or whose placement
/// value is one of the `n` the node matches. Never absent: a node that knows of no value in use
/// (`cron_placements` empty, whether because no row has a placement, or a writer deleted the
/// values, or the first placed row came after its peek) still takes only the rows without one.
/// MySQL tells those by `placed`, the last column of `cron_table_due` (migration `mysql/0030`),
/// so that the claim keeps its ordered scan of that index and never turns to the index by
/// placement (and a sort) for `placement IS NULL`. `placed` is 0 too for a placement longer
/// than `cron_placements` keeps (migration `mysql/0032`): no value matches it, and any node
/// claims the row and parks it.
fn placement_filter(dialect: Dialect, n: usize) -> String {
    let anybodys = match dialect {
        Dialect::Mysql => "placed = 0",
        Dialect::Postgres | Dialect::Sqlite => "placement IS NULL",
    };
    match n {
        0 => format!(" AND {anybodys}"),
        n => format!(
            " AND ({anybodys} OR placement IN ({}))",
            vec!["?"; n].join(", ")
        ),
    }
}

/// The peek: the clock, the earliest `next_exec` among the rows this node may run, whether rows
/// wait for preparation, how many placement values and host-local templates exist, whether
/// this node is drained, the earliest event delivery and, with `alive`, how many nodes are
/// alive (`NULL` otherwise: it reads a row per node, and only `/metrics` shows it). One
/// statement, each part index-backed (or on the small `cron_nodes`), so that the event delivery
/// needs no looks of its own while idle.
/// Placeholders: the `placements` values the node matches, [`peek_placement_uses`] times, then
/// the node's name.
pub fn peek_sql(dialect: Dialect, placements: usize, alive: bool) -> String {
    let alive = if alive {
        format!(
            "(SELECT COUNT(*) FROM cron_nodes WHERE stopped IS NULL \
             AND last_seen > {{now}} - {NODE_ALIVE_WINDOW_MS})"
        )
    } else {
        "NULL".to_string()
    };
    // SQLite keeps text a writer puts in a number column, and orders it after every number:
    // the earliest would be such text when no number is there, and the peek of every node
    // would fail to read it. Only numbers are read (a job row's `next_exec` too, below).
    let (drain, event_number) = match dialect {
        Dialect::Sqlite => (
            "CASE WHEN typeof(drain) = 'integer' THEN drain END",
            " AND typeof(next_try) = 'integer'",
        ),
        _ => ("drain", ""),
    };
    dialect.render(&format!(
        "SELECT {{now}} AS db_now, {}, \
         CASE WHEN EXISTS (SELECT 1 FROM cron_table WHERE next_exec IS NULL) THEN 1 ELSE 0 END AS pending, \
         (SELECT COUNT(*) FROM cron_placements) AS placements, \
         (SELECT COUNT(*) FROM cron_table WHERE run_on = 'every_node') AS templates, \
         (SELECT MAX({drain}) FROM cron_nodes WHERE name = ?) AS drain, \
         (SELECT next_try FROM cron_events WHERE next_try IS NOT NULL{event_number} \
          ORDER BY next_try LIMIT 1) AS next_event, \
         {alive} AS alive{}",
        next_due_sql(dialect, placements),
        // MySQL's heartbeat cannot return the audit trail's newest row (no RETURNING for an
        // UPDATE): its peek does (`Store::node_seen`).
        if dialect == Dialect::Mysql {
            ", (SELECT MAX(id) FROM cron_audit) AS audit_mark"
        } else {
            ""
        }
    ))
}

/// How many times the peek binds the node's placement values.
pub fn peek_placement_uses(dialect: Dialect) -> usize {
    if dialect == Dialect::Mysql { 1 } else { 2 }
}

/// The width of the zero-padded `next_exec` before the name in MySQL's `next_due_name`: a
/// BIGINT's longest, with its sign.
pub const DUE_WIDTH: usize = 20;

/// The peek's earliest due row among those the node may run: `next_due` and `next_name`.
///
/// On MySQL/MariaDB, where an idle node polls, the rows any node runs and the node's own placed
/// rows are looked up apart (migration `mysql/0030`): the first are the first entry of
/// `cron_table_due` (`enabled, next_exec, placed` there) with `placed = 0`, which the index
/// itself tells, so that another node's placed rows due earlier are stepped over in the index
/// without reading them; the second are the node's own rows, by `cron_table_placement` when
/// they are few (the optimizer's choice: with many, the ordered scan finds one sooner). One
/// ordered scan with the placement as a filter read every other node's placed row due earlier
/// (each node's copy of an `every_node` job is one), twice: a row per node in the fleet at
/// each peek (docs/fleet.md). Each lookup returns the time and the name in one value (the time
/// zero-padded to [`DUE_WIDTH`], so that the earlier sorts first, then the name), so that each
/// is made once; a sentinel of `'1'`, after any padded time, stands for a lookup that found no
/// row. PostgreSQL, woken by notifications, and SQLite, one host, keep the one ordered scan of
/// `(enabled, next_exec)`. The name comes as bytes on SQLite and MySQL (a label, read as
/// UTF-8 with replacements): a name that is not UTF-8 would fail the whole peek in the driver.
fn next_due_sql(dialect: Dialect, placements: usize) -> String {
    if dialect != Dialect::Mysql {
        let filter = placement_filter(dialect, placements);
        let (name, number) = match dialect {
            Dialect::Sqlite => ("CAST(name AS BLOB)", " AND typeof(next_exec) = 'integer'"),
            _ => ("name", ""),
        };
        return format!(
            "(SELECT next_exec FROM cron_table WHERE enabled = 1 AND next_exec IS NOT NULL\
              {number}{filter} ORDER BY next_exec LIMIT 1) AS next_due, \
             (SELECT {name} FROM cron_table WHERE enabled = 1 AND next_exec IS NOT NULL\
              {number}{filter} ORDER BY next_exec LIMIT 1) AS next_name"
        );
    }
    let first = |index: &str, condition: &str| {
        format!(
            "(SELECT CONCAT(LPAD(next_exec, {DUE_WIDTH}, '0'), name) FROM cron_table{index} \
             WHERE enabled = 1 AND next_exec IS NOT NULL{condition} ORDER BY next_exec LIMIT 1)"
        )
    };
    let anybodys = first(" FORCE INDEX (cron_table_due)", " AND placed = 0");
    match placements {
        0 => format!("CAST({anybodys} AS BINARY) AS next_due_name"),
        n => format!(
            "CAST(NULLIF(LEAST(IFNULL({anybodys}, '1'), IFNULL({}, '1')), '1') AS BINARY) \
             AS next_due_name",
            // The optimizer's own choice: `cron_table_placement` (and a sort) when the node's
            // values have few rows, as a host-local job's; the ordered `cron_table_due`, which
            // stops at the first, when they have many (a job placed by a tag on most nodes).
            first(
                "",
                &format!(" AND placement IN ({})", vec!["?"; n].join(", "))
            )
        ),
    }
}

/// Splits MySQL's `next_due_name` (see [`next_due_sql`]) into the time and the name. `None`
/// for a value this build did not write.
pub fn split_due_name(value: &str) -> Option<(i64, String)> {
    let (due, name) = (value.get(..DUE_WIDTH)?, value.get(DUE_WIDTH..)?);
    // `LPAD` pads a negative number's digits after its zeros: `0000-5`.
    let digits = due.trim_start_matches('0');
    let due = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some((due, name.to_string()))
}

/// The fencing token after `column`, as every claim of a run, a duty or an event writes it:
/// one more, wrapping at 2^62 (a count no claim reaches). A token a writer set to the largest
/// number (`9223372036854775807`, in the row or, for a prepared row, in its run records) made
/// `token + 1` overflow on PostgreSQL and MySQL, and the whole claim failed on every node at
/// every poll; such a row's next token is 2^62 now, and the one after it 1.
pub fn next_token(column: &str) -> String {
    format!("{column} % {TOKEN_WRAP} + 1")
}

/// Where a fencing token wraps (see [`next_token`]).
pub const TOKEN_WRAP: i64 = 1 << 62;

/// Below this, a token the claims counted up to (they would take millions of years to reach
/// it); at or above it, one a writer set. A row being prepared continues above its records'
/// tokens below it only (a record a writer put near the wrap set every re-prepared row there,
/// and its tokens wrapped into those of its own history), and a takeover after the wrap looks
/// for the run before it between this and the wrap.
pub const TOKEN_COUNTED: i64 = 1 << 61;

/// The claim: mark up to N due rows as ours in one statement, never holding a lock across a
/// round trip. `excluded` placeholders follow the lease ones (and the claim id on MySQL): ids of
/// rows the node still supervises, which it must not claim again; then the placement values the
/// node matches (see [`placement_filter`]); then the node's name again, for its drain flag: a
/// node drained after its peek claims nothing, whatever peek its pass acts on.
pub fn claim_sql(dialect: Dialect, excluded: usize, placements: usize) -> String {
    let set = format!(
        "prev_exec_by = exec_by, exec_by = ?, token = {}, \
         lease_until = {{now}} + ?, next_exec = {{now}} + ?, claimed_at = {{now}}",
        next_token("token")
    );
    // A claimed row is taken over only once its lease has ended, whatever its `next_exec`
    // says: sqlcron keeps the two equal while a row is claimed, so this only matters when
    // something else (an operator's SQL, a bug) moved `next_exec` earlier. A claimed row
    // without a lease (a row written by hand) is anybody's.
    let lease_ended = "(exec_by IS NULL OR lease_until IS NULL OR lease_until <= {now})";
    let mut due = "enabled = 1 AND next_exec <= {now}".to_string();
    // On PostgreSQL the check is the outer UPDATE's, not the subquery's: in the subquery it
    // tips the plan PostgreSQL keeps for the prepared claim, when made on a table without
    // statistics, from the ordered scan of `cron_table_due` to reading and sorting every due
    // row (0.7 ms per claim of 20,000 due rows became 3.6 ms; docs/benchmarks.md). A row the
    // subquery picks and the check refuses is only locked for the statement; it counts
    // towards the claim's limit until its holder's next extension puts its `next_exec` back.
    if dialect != Dialect::Postgres {
        due.push_str(" AND ");
        due.push_str(lease_ended);
    }
    if excluded > 0 {
        due.push_str(&format!(
            " AND id NOT IN ({})",
            vec!["?"; excluded].join(", ")
        ));
    }
    due.push_str(&placement_filter(dialect, placements));
    due.push_str(" AND NOT EXISTS (SELECT 1 FROM cron_nodes WHERE name = ? AND drain = 1)");
    let template = match dialect {
        // Writes are serialised by SQLite itself: a plain UPDATE ... RETURNING. Its text
        // columns come as bytes, each checked on its own (`store::rows`): the rows it returns
        // are claimed by then, and a value that is not UTF-8 would fail them all in the driver.
        Dialect::Sqlite => format!(
            "UPDATE cron_table SET {set} WHERE id IN \
             (SELECT id FROM cron_table WHERE {due} ORDER BY next_exec LIMIT ?) \
             RETURNING {}, {{now}} AS db_now",
            job_columns_as_bytes(Dialect::Sqlite)
        ),
        // SKIP LOCKED: concurrent claimers take different rows instead of queueing.
        Dialect::Postgres => format!(
            "UPDATE cron_table c SET prev_exec_by = c.exec_by, exec_by = ?, token = {}, \
             lease_until = {{now}} + ?, next_exec = {{now}} + ?, claimed_at = {{now}} \
             FROM (SELECT id FROM cron_table WHERE {due} ORDER BY next_exec LIMIT ? \
                   FOR UPDATE SKIP LOCKED) d \
             WHERE c.id = d.id AND {} RETURNING {}, {{now}} AS db_now",
            next_token("c.token"),
            // Unqualified, the columns are `c`'s: `d` has only `id`.
            lease_ended,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peek_counts_the_live_nodes_only_when_asked() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
            let with = peek_sql(dialect, 3, true);
            let without = peek_sql(dialect, 3, false);
            assert!(
                with.contains("FROM cron_nodes WHERE stopped IS NULL"),
                "{with}"
            );
            assert!(
                !without.contains("FROM cron_nodes WHERE stopped IS NULL"),
                "{without}"
            );
            assert!(without.contains("NULL AS alive"), "{without}");
            // The same placeholders either way: the placement values as often as the peek binds
            // them, then the node's name.
            let marks = |sql: &str| sql.matches('?').count() + sql.matches('$').count();
            assert_eq!(
                marks(&with),
                3 * peek_placement_uses(dialect) + 1,
                "{dialect:?}: {with}"
            );
            assert_eq!(marks(&without), marks(&with));
        }
    }

    #[test]
    fn the_claim_and_the_peek_leave_out_placed_rows_even_with_no_value_known() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
            let no_value = [
                claim_sql(dialect, 0, 0),
                claim_sql(dialect, 4, 0),
                peek_sql(dialect, 0, false),
                peek_sql(dialect, 0, true),
            ];
            for sql in no_value {
                let condition = if dialect == Dialect::Mysql {
                    "placed = 0"
                } else {
                    "placement IS NULL"
                };
                assert!(sql.contains(condition), "{dialect:?}: {sql}");
                // MySQL's by the due index, not `cron_table_placement` on `IS NULL`.
                if dialect == Dialect::Mysql {
                    assert!(!sql.contains("placement IS NULL"), "{sql}");
                }
            }
            // With values known, the same condition or one of them; on MySQL never
            // `placement IS NULL`, which misses a row whose value is too long to be one.
            let some = claim_sql(dialect, 0, 2);
            let condition = if dialect == Dialect::Mysql {
                "(placed = 0 OR placement IN (?, ?))"
            } else {
                "(placement IS NULL OR placement IN ("
            };
            assert!(some.contains(condition), "{dialect:?}: {some}");
            if dialect == Dialect::Mysql {
                assert!(!some.contains("placement IS NULL"), "{some}");
            }
        }
    }

    #[test]
    fn the_columns_as_bytes_cast_each_text_column_and_a_number_only_where_it_holds_text() {
        let cols = job_columns_as_bytes(Dialect::Mysql);
        assert!(
            cols.contains("CAST(command AS BINARY) AS command"),
            "{cols}"
        );
        assert!(
            cols.contains("CAST(after_jobs AS BINARY) AS after_jobs"),
            "{cols}"
        );
        assert!(!cols.contains("CAST(token"), "{cols}");
        assert!(
            cols.starts_with("id, CAST(name AS BINARY) AS name"),
            "{cols}"
        );
        let sqlite = job_columns_as_bytes(Dialect::Sqlite);
        assert!(sqlite.contains("CAST(env AS BLOB) AS env"), "{sqlite}");
        // SQLite's number columns too, when they hold text; every column but the row's id.
        assert_eq!(
            sqlite.matches("CAST(").count(),
            JOB_COLUMNS.split(", ").count() - 1
        );
        assert!(
            sqlite.contains(
                "CASE WHEN typeof(token) = 'text' THEN CAST(token AS BLOB) ELSE token END AS token"
            ),
            "{sqlite}"
        );
        assert!(sqlite.starts_with("id, "), "{sqlite}");
        for c in JOB_NUMBER_COLUMNS {
            assert!(JOB_COLUMNS.split(", ").any(|j| j == c), "{c}");
        }
        assert_eq!(job_columns_as_bytes(Dialect::Postgres), JOB_COLUMNS);
        assert_eq!(
            as_bytes(Dialect::Mysql, ["c.name", "c.id"]),
            "CAST(c.name AS BINARY) AS name, c.id"
        );
    }

    #[test]
    fn a_due_time_and_name_split_as_mysql_pads_them() {
        let padded = |due: &str, name: &str| format!("{due:0>DUE_WIDTH$}{name}");
        assert_eq!(
            split_due_name(&padded("1798761600000", "backup nightly")),
            Some((1_798_761_600_000, "backup nightly".into()))
        );
        assert_eq!(split_due_name(&padded("0", "z")), Some((0, "z".into())));
        // LPAD puts a negative number's zeros before its sign.
        assert_eq!(split_due_name(&padded("-5", "é")), Some((-5, "é".into())));
        assert_eq!(
            split_due_name(&format!("{}x", i64::MIN)),
            Some((i64::MIN, "x".into()))
        );
        assert_eq!(split_due_name("123"), None);
        assert_eq!(split_due_name(&padded("12a", "x")), None);
        // The sentinel of an empty lookup sorts after every padded time.
        assert!(padded("9223372036854775807", "").as_str() < "1");
        assert!(format!("{}", i64::MIN).as_str() < "1");
    }

    #[test]
    fn mysql_looks_up_the_rows_any_node_runs_apart_from_the_nodes_own() {
        let sql = peek_sql(Dialect::Mysql, 2, false);
        assert!(sql.contains("FORCE INDEX (cron_table_due)"), "{sql}");
        assert!(sql.contains("placed = 0"), "{sql}");
        // The node's own rows: the optimizer picks the index by how many there are.
        assert!(!sql.contains("FORCE INDEX (cron_table_placement)"), "{sql}");
        assert!(sql.contains("placement IN (?, ?)"), "{sql}");
        assert!(!sql.contains("placement IS NULL"), "{sql}");
        // Without placement values in use, the one lookup of the rows any node may run.
        let plain = peek_sql(Dialect::Mysql, 0, false);
        assert!(plain.contains("placed = 0"), "{plain}");
        assert!(!plain.contains("placement I"), "{plain}");
    }
}
