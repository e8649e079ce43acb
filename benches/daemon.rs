//! Daemon benchmarks against the real databases on 127.0.0.1 (start them with
//! `scripts/ensure-databases.sh`):
//!
//! ```sh
//! cargo bench --bench daemon                 # everything
//! cargo bench --bench daemon -- claim idle   # some of: claim claim-placed idle wake wake-on lateness quiet dashboard retention[-sqlite|-postgres|-mysql] burst burst-systemd ratio fleet rss locks http-burst
//! ```
//!
//! Figures go to stdout; the ones measured on the development machine are in `docs/benchmarks.md`.
//! Under `cargo test` (no `--bench` argument) it only says how to run it.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlcron::store::{Dialect, Release, Store};

#[path = "daemon/dashboard.rs"]
mod dashboard;
#[path = "daemon/fleet.rs"]
mod fleet;
#[path = "daemon/quiet.rs"]
mod quiet;
#[path = "daemon/ratio.rs"]
mod ratio;

/// The PostgreSQL server the benchmarks use: 127.0.0.1:5432, or the port in `SQLCRON_BENCH_PG_PORT`
/// (`scripts/bench-burst.sh` starts a server of its own there, with `pg_stat_statements`).
fn pg_url(database: &str) -> String {
    let port = std::env::var("SQLCRON_BENCH_PG_PORT").unwrap_or_else(|_| "5432".into());
    format!("postgres://postgres@127.0.0.1:{port}/{database}")
}

fn pg_admin() -> String {
    pg_url("postgres")
}
/// The MariaDB server the benchmarks use: 127.0.0.1:3306, or the port in `SQLCRON_BENCH_MY_PORT`
/// (`scripts/bench-fleet.sh` starts a server of its own there).
fn my_url(database: &str) -> String {
    let port = std::env::var("SQLCRON_BENCH_MY_PORT").unwrap_or_else(|_| "3306".into());
    format!("mysql://root@127.0.0.1:{port}/{database}")
}

fn my_admin() -> String {
    my_url("mysql")
}
/// The number in environment variable `name`, or `default`.
fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// 2100-01-01: "not due" for the filler rows.
const FAR: i64 = 4_102_444_800_000;

struct Db {
    dialect: Dialect,
    url: String,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

async fn admin(dialect: Dialect, sql: &str) {
    let url = if dialect == Dialect::Postgres {
        pg_admin()
    } else {
        my_admin()
    };
    let s = Store::connect(&db_url(&url), 1).unwrap();
    s.execute_raw(sql).await.unwrap();
    s.close().await;
}

impl Db {
    async fn new(dialect: Dialect) -> Db {
        let name = format!(
            "sqlcron_bench_{}_{}",
            std::process::id(),
            rand::random::<u32>()
        );
        match dialect {
            Dialect::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                Db {
                    dialect,
                    url: format!("sqlite://{}/b.db", dir.path().display()),
                    name,
                    _dir: Some(dir),
                }
            }
            Dialect::Postgres => {
                admin(dialect, &format!("CREATE DATABASE {name}")).await;
                Db {
                    dialect,
                    url: pg_url(&name),
                    name,
                    _dir: None,
                }
            }
            Dialect::Mysql => {
                admin(dialect, &format!("CREATE DATABASE {name}")).await;
                Db {
                    dialect,
                    url: my_url(&name),
                    name,
                    _dir: None,
                }
            }
        }
    }

    async fn drop_db(self) {
        match self.dialect {
            Dialect::Sqlite => {}
            Dialect::Postgres => {
                admin(
                    self.dialect,
                    &format!("DROP DATABASE {} WITH (FORCE)", self.name),
                )
                .await
            }
            Dialect::Mysql => admin(self.dialect, &format!("DROP DATABASE {}", self.name)).await,
        }
    }

    async fn store(&self) -> Store {
        let s = Store::connect(&db_url(&self.url), 4).unwrap();
        s.migrate().await.unwrap();
        s
    }
}

/// Inserts `n` rows named `{prefix}{i}`, all with `next_exec = base + i * step`.
async fn fill(
    store: &Store,
    dialect: Dialect,
    prefix: &str,
    n: i64,
    base: i64,
    step: i64,
    command: &str,
) {
    fill_target(store, dialect, prefix, n, base, step, "command", command).await
}

/// The same with the target in `column` (`command`, or `http` with a JSON request).
#[allow(clippy::too_many_arguments)]
async fn fill_target(
    store: &Store,
    dialect: Dialect,
    prefix: &str,
    n: i64,
    base: i64,
    step: i64,
    column: &str,
    command: &str,
) {
    let chunk = 100_000;
    let mut start = 1;
    while start <= n {
        let end = (start + chunk - 1).min(n);
        let sql = match dialect {
            Dialect::Postgres => format!(
                "INSERT INTO cron_table (name, schedule, {column}, slot, next_exec) \
                 SELECT '{prefix}' || g, '0 0 1 1 *', '{command}', {base} + g * {step}, {base} + g * {step} \
                 FROM generate_series({start}, {end}) g"
            ),
            Dialect::Mysql => format!(
                "INSERT INTO cron_table (name, schedule, {column}, slot, next_exec) \
                 SELECT CONCAT('{prefix}', seq), '0 0 1 1 *', '{command}', {base} + seq * {step}, {base} + seq * {step} \
                 FROM seq_{start}_to_{end}"
            ),
            Dialect::Sqlite => format!(
                "WITH RECURSIVE g(x) AS (SELECT {start} UNION ALL SELECT x + 1 FROM g WHERE x < {end}) \
                 INSERT INTO cron_table (name, schedule, {column}, slot, next_exec) \
                 SELECT '{prefix}' || x, '0 0 1 1 *', '{command}', {base} + x * {step}, {base} + x * {step} FROM g"
            ),
        };
        store.execute_raw(&sql).await.unwrap();
        start = end + 1;
    }
}

/// A database URL as the store takes it.
fn db_url(text: &str) -> sqlcron::store::DatabaseUrl {
    sqlcron::store::DatabaseUrl::parse(text).unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Placement values the claim benchmark's node matches (`placed`): the hot rows' value and one
/// of the fillers'.
const PLACED_MATCHING: [&str; 2] = [r#"{"tags":["eu"]}"#, r#"{"nodes":["web-*"]}"#];

/// Claim cost with 1,000 and 1,000,000 rows: median time of claiming 10 due rows. With
/// `placed`, placement is in use: half the fillers are for a tag this node lacks, half for its
/// name, the hot rows for its tag, and 100 rows for a tag no node has are due all along, in
/// front of the claim's index scan.
async fn claim_cost(dialect: Dialect, placed: bool) {
    let matching: Vec<String> = PLACED_MATCHING.iter().map(|s| s.to_string()).collect();
    let filter: &[String] = if placed { &matching } else { &[] };
    for total in [1_000i64, 1_000_000] {
        let db = Db::new(dialect).await;
        let store = db.store().await;
        let t = Instant::now();
        fill(&store, dialect, "filler", total, FAR, 1_000, "true").await;
        fill(&store, dialect, "hot", 10, FAR, 1, "true").await;
        if placed {
            let now = store.now().await.unwrap();
            fill(&store, dialect, "cold", 100, now - 100_000, 1, "true").await;
            for (sql, what) in [
                (r#"'{"tags":["gpu"]}'"#, "filler% AND id % 2 = 0"),
                (r#"'{"nodes":["web-*"]}'"#, "filler% AND id % 2 = 1"),
                (r#"'{"tags":["eu"]}'"#, "hot%"),
                (r#"'{"tags":["tpu"]}'"#, "cold%"),
            ] {
                let (pattern, extra) = what.split_once(' ').unwrap_or((what, ""));
                store
                    .execute_raw(&format!(
                        "UPDATE cron_table SET placement = {sql} WHERE name LIKE '{pattern}' {extra}"
                    ))
                    .await
                    .unwrap();
            }
        }
        if dialect == Dialect::Postgres {
            // VACUUM too: setting the placements rewrote every row, and the dead versions
            // would be measured instead of the claim.
            store
                .execute_raw("VACUUM ANALYZE cron_table")
                .await
                .unwrap();
        } else if dialect == Dialect::Mysql {
            store.execute_raw("ANALYZE TABLE cron_table").await.unwrap();
        } else {
            store.execute_raw("ANALYZE").await.unwrap();
        }
        let filled = t.elapsed();
        let mut claim_ms = Vec::new();
        let mut peek_ms = Vec::new();
        for _ in 0..200 {
            let now = store.now().await.unwrap();
            store
                .execute_raw(&format!(
                    "UPDATE cron_table SET next_exec = {} WHERE name LIKE 'hot%'",
                    now - 1_000
                ))
                .await
                .unwrap();
            let t = Instant::now();
            store.peek("bench", filter, false).await.unwrap();
            peek_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let (_, rows) = store
                .claim_excluding("bench", 10, Duration::from_secs(10), &[], filter)
                .await
                .unwrap();
            claim_ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(rows.len(), 10);
            for r in rows {
                let release = Release {
                    slot: FAR,
                    attempts: 0,
                    next_exec: FAR,
                    clear_run_now: false,
                    outcome: None,
                };
                store
                    .release(r.id, "bench", r.token, &release, None)
                    .await
                    .unwrap();
            }
        }
        claim_ms.sort_by(f64::total_cmp);
        peek_ms.sort_by(f64::total_cmp);
        println!(
            "claim-cost{} {:<8} rows={:<8} claim(10) median {:.3} ms p90 {:.3} ms | peek median {:.3} ms (filled in {:.1?})",
            if placed { "-placed" } else { "" },
            dialect.name(),
            total,
            percentile(&claim_ms, 0.5),
            percentile(&claim_ms, 0.9),
            percentile(&peek_ms, 0.5),
            filled
        );
        store.close().await;
        db.drop_db().await;
    }
}

struct Daemon {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon(dir: &Path, name: &str, url: &str, extra: &str, rust_log: &str) -> Daemon {
    start_daemon_env(dir, name, url, extra, rust_log, &[])
}

/// `pool_size = N` for the daemons' `[database]` table when `SQLCRON_BENCH_POOL_SIZE` is set (the
/// default pool otherwise).
fn pool_size() -> String {
    std::env::var("SQLCRON_BENCH_POOL_SIZE")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(String::new(), |n| format!("pool_size = {n}\n"))
}

fn start_daemon_env(
    dir: &Path,
    name: &str,
    url: &str,
    extra: &str,
    rust_log: &str,
    env: &[(&str, &str)],
) -> Daemon {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[database]\nurl = \"{url}\"\n{}[node]\nname = \"{name}\"\n{extra}\n",
            pool_size()
        ),
    )
    .unwrap();
    let log = dir.join(format!("{name}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("--config")
        .arg(&cfg)
        .arg("daemon")
        .env("RUST_LOG", rust_log)
        .env_remove("INVOCATION_ID")
        .envs(env.iter().copied())
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Daemon { child, log }
}

fn stop(d: &mut Daemon) {
    unsafe {
        libc::kill(d.child.id() as i32, libc::SIGTERM);
    }
    let _ = d.child.wait();
}

async fn wait_ready(d: &Daemon) {
    let start = Instant::now();
    while !std::fs::read_to_string(&d.log)
        .unwrap_or_default()
        .contains("ready")
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "daemon did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Statements per second an idle node sends (counted from sqlx's statement log), with 1,000
/// jobs not due, with wake-ups on or off (`daemon` is the `[daemon]` table's keys).
async fn idle_cost(dialect: Dialect, daemon: &str) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    fill(&store, dialect, "idle", 1_000, FAR, 1_000, "true").await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("[daemon]\n{daemon}");
    let mut d = start_daemon(
        dir.path(),
        "idle",
        &db.url,
        &extra,
        "info,sqlx::query=trace",
    );
    wait_ready(&d).await;
    // The start-up duties (the first retention and alert rounds, one poll interval after the
    // start) are not idle work: the window opens after them.
    let warm_up = if daemon.contains("poll_interval = \"30s\"") {
        Duration::from_secs(35)
    } else {
        Duration::from_secs(5)
    };
    tokio::time::sleep(warm_up).await;
    let count = |d: &Daemon| {
        std::fs::read_to_string(&d.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("sqlx::query"))
            .count()
    };
    let before = count(&d);
    let window = Duration::from_secs(60);
    tokio::time::sleep(window).await;
    let after = count(&d);
    stop(&mut d);
    // Which statements, by their first words (the window only).
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    let text = std::fs::read_to_string(&d.log).unwrap_or_default();
    for line in text
        .lines()
        .filter(|l| l.contains("sqlx::query"))
        .skip(before)
        .take(after - before)
    {
        let summary = line
            .split("summary=\"")
            .nth(1)
            .unwrap_or(line)
            .chars()
            .take(40)
            .collect::<String>();
        *kinds.entry(summary).or_default() += 1;
    }
    println!(
        "idle-cost  {:<8} {:.2} statements/s per node ({}, 1000 jobs not due, {} in {:?})",
        dialect.name(),
        (after - before) as f64 / window.as_secs_f64(),
        daemon.replace('\n', ", "),
        after - before,
        window
    );
    for (kind, n) in &kinds {
        println!("           {n:>4}  {kind}");
    }
    store.close().await;
    db.drop_db().await;
}

/// Time from a change to the job's start, p50 / p99 over `SQLCRON_BENCH_TRIES` (200) tries
/// each: `sqlcron run JOB` (from just before the command line starts) and an SQL `INSERT` of a
/// job due at once. One node, 1,000 other jobs not due; `daemon` is the `[daemon]` table's keys.
async fn wake_latency(dialect: Dialect, daemon: &str) {
    let tries: usize = std::env::var("SQLCRON_BENCH_TRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let db = Db::new(dialect).await;
    let store = db.store().await;
    fill(&store, dialect, "idle", 1_000, FAR, 1_000, "true").await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "[daemon]\n{daemon}\n[[job]]\nname = \"manual\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n"
    );
    let mut d = start_daemon(dir.path(), "wake", &db.url, &extra, "info");
    wait_ready(&d).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cfg = dir.path().join("wake.toml");
    let started = |job: String, from: i64| {
        let store = &store;
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let h = store.history(Some(&job), 400).await.unwrap();
                if let Some(s) = h
                    .iter()
                    .filter_map(|r| r.started)
                    .filter(|s| *s >= from)
                    .max()
                {
                    return (s - from) as f64;
                }
                assert!(Instant::now() < deadline, "{job} did not start");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    let mut by_run = Vec::new();
    let mut by_commit = Vec::new();
    for _ in 0..tries {
        let from = store.now().await.unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_sqlcron"))
            .args(["--config", cfg.to_str().unwrap(), "run", "manual"])
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        assert!(out.status.success());
        let took = started("manual".into(), from).await;
        by_run.push(took);
        // The same from the request's commit (its audit record, database clock): without
        // the command line's own start (connecting, checking the schema).
        let asked = store
            .scalar_i64("SELECT MAX(at) FROM cron_audit WHERE action = 'run'")
            .await
            .unwrap()
            .unwrap_or(from);
        by_commit.push(took - (asked - from) as f64);
        // The run ends before the next try (a run requested while one runs waits for it).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut by_insert = Vec::new();
    for i in 0..tries {
        let from = store.now().await.unwrap();
        let job = format!("ins{i}");
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command) VALUES ('{job}', '@at {}', 'true')",
                chrono::DateTime::from_timestamp_millis(from)
                    .unwrap()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ))
            .await
            .unwrap();
        by_insert.push(started(job, from).await);
    }
    stop(&mut d);
    for (what, v) in [
        ("sqlcron run", &mut by_run),
        ("  its commit", &mut by_commit),
        ("SQL INSERT", &mut by_insert),
    ] {
        v.sort_by(f64::total_cmp);
        println!(
            "wake       {:<8} {:<12} p50 {:>6.0} ms  p99 {:>6.0} ms  ({}, {} tries)",
            dialect.name(),
            what,
            percentile(v, 0.5),
            percentile(v, 0.99),
            daemon.replace('\n', ", "),
            v.len()
        );
    }
    store.close().await;
    db.drop_db().await;
}

/// Start lateness of the runs in `history` from `from_slot` on (ms, sorted), and the number of
/// slots that ran twice.
fn lateness_of(history: &[sqlcron::store::HistoryRow], from_slot: i64) -> (Vec<f64>, usize) {
    let mut late: Vec<f64> = history
        .iter()
        .filter(|h| h.slot >= from_slot && h.started.is_some() && h.node.as_deref() != Some("seed"))
        .map(|h| (h.started.unwrap() - h.slot) as f64)
        .collect();
    late.sort_by(f64::total_cmp);
    let mut dup: HashMap<(String, i64), usize> = HashMap::new();
    for h in history {
        if h.outcome == "ok" {
            *dup.entry((h.job.clone(), h.slot)).or_default() += 1;
        }
    }
    (late, dup.values().filter(|n| **n > 1).count())
}

/// 3 nodes running 100 jobs every second, with `extra` configuration.
fn lateness_nodes(dir: &Path, url: &str, extra: &str) -> Vec<Daemon> {
    let mut jobs = extra.to_string();
    for i in 0..100 {
        jobs.push_str(&format!(
            "\n[[job]]\nname = \"late{i:03}\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n"
        ));
    }
    (0..3)
        .map(|n| start_daemon(dir, &format!("n{n}"), url, &jobs, "info"))
        .collect()
}

/// Start lateness: 3 nodes, 100 jobs every second, default settings.
async fn lateness(dialect: Dialect) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = lateness_nodes(dir.path(), &db.url, "");
    for n in &nodes {
        wait_ready(n).await;
    }
    let secs = 30;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    for n in &mut nodes {
        stop(n);
    }
    let history = store.history(None, 100_000).await.unwrap();
    // Leave out the first 3 seconds (nodes still starting).
    let first_slot = history.iter().map(|h| h.slot).min().unwrap_or(0);
    let (late, dup) = lateness_of(&history, first_slot + 3_000);
    println!(
        "lateness   {:<8} 3 nodes x 100 jobs/s for {secs}s: {} runs, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, duplicates {dup}",
        dialect.name(),
        late.len(),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(f64::NAN),
    );
    store.close().await;
    db.drop_db().await;
}

/// Inserts `n` finished runs of job `seed-old` that ended `age_days` ago.
async fn seed_runs(store: &Store, dialect: Dialect, n: i64, age_days: i64) {
    let now = store.now().await.unwrap();
    let ended = now - age_days * 86_400_000;
    let cols = "job_name, slot, attempt, node, started, ended, outcome, output";
    let chunk = 500_000;
    let mut start = 0;
    while start < n {
        let end = (start + chunk - 1).min(n - 1);
        let sql = match dialect {
            Dialect::Postgres => format!(
                "INSERT INTO cron_runs ({cols}) SELECT 'seed-old', CAST(g AS BIGINT) * 1000, 1, 'seed', {ended}, \
                 {ended} + g, 'ok', 'some output of an old run' FROM generate_series({start}, {end}) g"
            ),
            Dialect::Mysql => format!(
                "INSERT INTO cron_runs ({cols}) SELECT 'seed-old', seq * 1000, 1, 'seed', {ended}, \
                 {ended} + seq, 'ok', 'some output of an old run' FROM seq_{start}_to_{end}"
            ),
            Dialect::Sqlite => format!(
                "WITH RECURSIVE g(x) AS (SELECT {start} UNION ALL SELECT x + 1 FROM g WHERE x < {end}) \
                 INSERT INTO cron_runs ({cols}) SELECT 'seed-old', x * 1000, 1, 'seed', {ended}, \
                 {ended} + x, 'ok', 'some output of an old run' FROM g"
            ),
        };
        store.execute_raw(&sql).await.unwrap();
        start = end + 1;
    }
}

/// History retention: 5,000,000 runs older than `keep` are pruned while 3 nodes run 100 jobs
/// every second; start lateness before pruning (same nodes, pruning off) and during it.
async fn retention(dialect: Dialect) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    let rows: i64 = std::env::var("SQLCRON_BENCH_PRUNE_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000_000);
    let t = Instant::now();
    seed_runs(&store, dialect, rows, 100).await;
    let seeded = t.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let window = Duration::from_secs(40);
    let mut result = Vec::new();
    for (label, keep) in [("not pruning", "forever"), ("pruning", "30d")] {
        let extra = format!("[history]\nkeep = \"{keep}\"\nprune_interval = \"1s\"\n");
        let mut nodes = lateness_nodes(dir.path(), &db.url, &extra);
        for n in &nodes {
            wait_ready(n).await;
        }
        let from = store.now().await.unwrap() + 3_000;
        let t = Instant::now();
        tokio::time::sleep(window).await;
        let left_after_window = store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE job_name = 'seed-old'")
            .await
            .unwrap()
            .unwrap_or(0);
        let mut left = left_after_window;
        while keep != "forever" && left > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            left = store
                .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE job_name = 'seed-old'")
                .await
                .unwrap()
                .unwrap_or(0);
        }
        let took = t.elapsed();
        for n in &mut nodes {
            stop(n);
        }
        let history = store.history(None, 200_000).await.unwrap();
        let to = from + window.as_millis() as i64 - 3_000;
        let in_window: Vec<_> = history.into_iter().filter(|h| h.slot < to).collect();
        let (late, dup) = lateness_of(&in_window, from);
        result.push(format!(
            "retention  {:<8} {label:<11} {} runs, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, duplicates {dup}; seed rows left after {}s: {left_after_window}{}",
            dialect.name(),
            late.len(),
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(f64::NAN),
            window.as_secs(),
            if keep == "forever" {
                String::new()
            } else {
                format!(", all {rows} pruned in {:.0} s", took.as_secs_f64())
            }
        ));
        store
            .execute_raw("DELETE FROM cron_runs WHERE node <> 'seed'")
            .await
            .unwrap();
    }
    println!(
        "retention  {:<8} {rows} old runs seeded in {:.0} s",
        dialect.name(),
        seeded.as_secs_f64()
    );
    for line in result {
        println!("{line}");
    }
    store.close().await;
    db.drop_db().await;
}

/// Burst: 10,000 jobs due at the same second, 3 nodes, a trivial command.
async fn burst(dialect: Dialect, max_parallel: usize, systemd: bool) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let me = sqlcron::exec::account::current().expect("the bench user's account");
    let extra = format!(
        "[daemon]\nmax_parallel = {max_parallel}\ndefault_user = \"{0}\"\nallowed_users = [\"{0}\"]\n",
        me.name
    );
    let mut nodes: Vec<Daemon> = (0..3)
        .map(|n| {
            // Under systemd (INVOCATION_ID is how it knows) the daemon starts no job reaper.
            let env: &[(&str, &str)] = if systemd {
                &[("INVOCATION_ID", "bench")]
            } else {
                &[]
            };
            start_daemon_env(
                dir.path(),
                &format!("b{n}"),
                &db.url,
                &extra,
                "warn,sqlcron::cli=info",
                env,
            )
        })
        .collect();
    for n in &nodes {
        wait_ready(n).await;
    }
    let postmaster = postmaster_pid().await;
    let pg_cpu_before = postmaster.map(|pid| cpu_seconds(pid).0 + cpu_seconds(pid).1);
    let now = store.now().await.unwrap();
    let slot = now - now.rem_euclid(1000) + 3_000;
    fill(&store, dialect, "burst", 10_000, slot, 0, "true").await;
    let commits_before = commits(&db, false).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = 0;
    while Instant::now() < deadline {
        done = store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE outcome <> 'running'")
            .await
            .unwrap()
            .unwrap_or(0);
        if done >= 10_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last_start = store
        .scalar_i64("SELECT MAX(started) FROM cron_runs")
        .await
        .unwrap()
        .unwrap_or(0);
    let distinct = store
        .scalar_i64("SELECT COUNT(DISTINCT job_name) FROM cron_runs")
        .await
        .unwrap()
        .unwrap_or(0);
    // Each daemon's own CPU, and its reaped jobs'; the database's, from the postmaster (which
    // reaps its backends once the daemons disconnect).
    let (mut daemons_cpu, mut jobs_cpu) = (0.0, 0.0);
    for n in &mut nodes {
        let (own, children) = cpu_seconds(n.child.id());
        stop(n);
        daemons_cpu += own;
        jobs_cpu += children;
    }
    let per_job = (commits(&db, true).await - commits_before) as f64 / 10_000.0;
    let pg_cpu = match (postmaster, pg_cpu_before) {
        (Some(pid), Some(before)) => {
            let (own, children) = cpu_seconds(pid);
            format!("{:.1} s", own + children - before)
        }
        _ => "unknown".to_string(),
    };
    println!(
        "burst      {:<8} 10,000 jobs due at once, 3 nodes, max_parallel {max_parallel}, {}: all started {:.2} s after the slot; {done} finished; {distinct} distinct jobs; duplicates {}; {per_job:.2} transactions per job; CPU: daemons {daemons_cpu:.1} s (incl. starting), jobs {jobs_cpu:.1} s, PostgreSQL {pg_cpu}",
        dialect.name(),
        if systemd {
            "as under systemd"
        } else {
            "outside systemd (with the job reaper)"
        },
        (last_start - slot) as f64 / 1000.0,
        done - distinct
    );
    store.close().await;
    db.drop_db().await;
}

/// Serves `200 ok` to every request on 127.0.0.1 and counts them: the HTTP burst's target.
async fn ok_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = std::sync::Arc::new(AtomicU64::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let c = c.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    c.fetch_add(1, Ordering::Relaxed);
                    async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(hyper::body::Bytes::from("ok")),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (port, count)
}

/// 1,000 jobs due at once on 3 nodes (PostgreSQL, max_parallel 16, as under systemd): HTTP
/// jobs against a local server, then the same burst of `true` commands.
async fn http_burst() {
    let (port, served) = ok_server().await;
    for http in [true, false] {
        let dialect = Dialect::Postgres;
        let db = Db::new(dialect).await;
        let store = db.store().await;
        let dir = tempfile::tempdir().unwrap();
        let me = sqlcron::exec::account::current().expect("the bench user's account");
        let extra = format!(
            "[daemon]\nmax_parallel = 16\ndefault_user = \"{0}\"\nallowed_users = [\"{0}\"]\n",
            me.name
        );
        let mut nodes: Vec<Daemon> = (0..3)
            .map(|n| {
                start_daemon_env(
                    dir.path(),
                    &format!("h{n}"),
                    &db.url,
                    &extra,
                    "warn,sqlcron::cli=info",
                    &[("INVOCATION_ID", "bench")],
                )
            })
            .collect();
        for n in &nodes {
            wait_ready(n).await;
        }
        let now = store.now().await.unwrap();
        let slot = now - now.rem_euclid(1000) + 3_000;
        let before = served.load(std::sync::atomic::Ordering::Relaxed);
        if http {
            let target = format!(r#"{{"url": "http://127.0.0.1:{port}/run"}}"#);
            fill_target(&store, dialect, "h", 1_000, slot, 0, "http", &target).await;
        } else {
            fill(&store, dialect, "h", 1_000, slot, 0, "true").await;
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut done = 0;
        while Instant::now() < deadline {
            done = store
                .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE outcome = 'ok'")
                .await
                .unwrap()
                .unwrap_or(0);
            if done >= 1_000 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let last_end = store
            .scalar_i64("SELECT MAX(ended) FROM cron_runs")
            .await
            .unwrap()
            .unwrap_or(0);
        let mut daemons_cpu = 0.0;
        for n in &mut nodes {
            daemons_cpu += cpu_seconds(n.child.id()).0;
            stop(n);
        }
        println!(
            "http-burst {:<8} 1,000 {} jobs due at once, 3 nodes, max_parallel 16: all ended {:.2} s after the slot; {done} ok; requests served {}; daemons' CPU {daemons_cpu:.1} s",
            dialect.name(),
            if http { "HTTP" } else { "`true`" },
            (last_end - slot) as f64 / 1000.0,
            served.load(std::sync::atomic::Ordering::Relaxed) - before,
        );
        store.close().await;
        db.drop_db().await;
    }
}

/// CPU seconds of a process: (its own, its reaped children's), from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let field = |n: usize| f.get(n - 3).copied().unwrap_or(0.0) / hz;
    (field(14) + field(15), field(16) + field(17))
}

/// The PostgreSQL server's main process, when this machine runs it and may read its data
/// directory.
async fn postmaster_pid() -> Option<u32> {
    let admin = Store::connect(&db_url(&pg_admin()), 1).unwrap();
    let dir = admin
        .scalar::<String>("SELECT current_setting('data_directory')")
        .await
        .ok()
        .flatten();
    admin.close().await;
    let pidfile = std::fs::read_to_string(Path::new(&dir?).join("postmaster.pid")).ok()?;
    pidfile.lines().next()?.trim().parse().ok()
}

/// Transactions committed in the bench's PostgreSQL database so far. A backend reports its
/// counts at most once a second, when it goes idle (or, if it reported less than a second
/// before, 10 s later) and when it exits: with `settle`, wait until the figure stops moving
/// (with no one connected, it is then exact).
async fn commits(db: &Db, settle: bool) -> i64 {
    let admin = Store::connect(&db_url(&pg_admin()), 1).unwrap();
    let sql = format!(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '{}'",
        db.name
    );
    let mut last = admin.scalar_i64(&sql).await.unwrap().unwrap_or(0);
    // An idle backend reports its counts within a second of its last report: settled once the
    // count has not moved for 1.2 s (at most 12 s).
    let rounds = if settle { 40 } else { 0 };
    let mut unchanged = 0;
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let n = admin.scalar_i64(&sql).await.unwrap().unwrap_or(0);
        if n == last {
            unchanged += 1;
            if unchanged == 4 {
                break;
            }
        } else {
            unchanged = 0;
            last = n;
        }
    }
    admin.close().await;
    last
}

/// Resident memory of an idle daemon with 10,000 jobs defined (in TOML, and as SQL rows).
async fn rss(dialect: Dialect) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let mut jobs = String::new();
    for i in 0..10_000 {
        jobs.push_str(&format!(
            "[[job]]\nname = \"t{i:05}\"\nschedule = \"{} {} * * *\"\ncommand = \"/usr/local/bin/task --id {i}\"\n",
            i % 60,
            i % 24
        ));
    }
    let mut d = start_daemon(dir.path(), "rss", &db.url, &jobs, "warn,sqlcron::cli=info");
    wait_ready(&d).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let vmrss = status
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .unwrap_or("")
        .to_string();
    let vmhwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("")
        .to_string();
    stop(&mut d);
    let rows = store
        .scalar_i64("SELECT COUNT(*) FROM cron_table")
        .await
        .unwrap()
        .unwrap();
    println!(
        "rss        {:<8} {rows} TOML jobs: {} ({})",
        dialect.name(),
        vmrss
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" "),
        vmhwm.replace('\t', " ")
    );
    store.close().await;
    db.drop_db().await;
}

/// Lock acquire+release round trips per second with 1 and 8 contending clients.
async fn lock_throughput(dialect: Dialect) {
    use sqlcron::daemon::guard::{Acquired, GuardParams, Interrupts, acquire};
    let db = Db::new(dialect).await;
    let store = db.store().await;
    for clients in [1usize, 8] {
        let window = Duration::from_secs(10);
        let mut handles = vec![];
        for c in 0..clients {
            let store = Store::connect(&db_url(&db.url), 2).unwrap();
            handles.push(tokio::spawn(async move {
                let p = GuardParams {
                    name: "bench".into(),
                    size: 1,
                    lease: Duration::from_secs(10),
                    wait: None,
                    owner: format!("c{c}"),
                    host: "bench".into(),
                    pid: c as u32,
                };
                let mut interrupts = Interrupts::new();
                let start = Instant::now();
                let mut n = 0u64;
                while start.elapsed() < window {
                    if let Acquired::Holding(held) =
                        acquire(&store, &p, &mut interrupts).await.unwrap()
                    {
                        store.lock_release(held.id()).await.unwrap();
                        n += 1;
                    }
                }
                n
            }));
        }
        let mut per_client = Vec::new();
        for h in handles {
            per_client.push(h.await.unwrap());
        }
        let total: u64 = per_client.iter().sum();
        // First come, first served: with the queue's order every client gets about the same
        // share.
        println!(
            "lock       {:<8} {clients} client(s): {:.0} acquire+release/s; per client min {} max {}",
            dialect.name(),
            total as f64 / window.as_secs_f64(),
            per_client.iter().min().unwrap_or(&0),
            per_client.iter().max().unwrap_or(&0),
        );
    }
    store.close().await;
    db.drop_db().await;
}

/// Time for a waiter to run after the holder is SIGKILLed, default lease (10 s).
async fn lock_takeover(dialect: Dialect) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, format!("[database]\nurl = \"{}\"\n", db.url)).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sqlcron"))
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut holder = run(&["lock", "T", "--", "sleep", "120"]);
    while !store
        .locks()
        .await
        .unwrap()
        .iter()
        .any(|l| l.state == "holding")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut waiter = run(&["lock", "T", "--", "true"]);
    while !store
        .locks()
        .await
        .unwrap()
        .iter()
        .any(|l| l.state == "waiting")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed = Instant::now();
    holder.kill().unwrap();
    holder.wait().unwrap();
    waiter.wait().unwrap();
    println!(
        "lock       {:<8} takeover after the holder's SIGKILL, default 10 s lease: {:.2} s",
        dialect.name(),
        killed.elapsed().as_secs_f64()
    );
    store.close().await;
    db.drop_db().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        println!(
            "daemon benchmarks: run with `cargo bench --bench daemon` (they need the databases)"
        );
        return;
    }
    let wanted: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let on = |name: &str| wanted.is_empty() || wanted.contains(&name);
    // `SQLCRON_BENCH_DIALECTS=postgres,sqlite` limits the databases.
    let only = std::env::var("SQLCRON_BENCH_DIALECTS").unwrap_or_default();
    let all: Vec<Dialect> = [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql]
        .into_iter()
        .filter(|d| only.is_empty() || only.split(',').any(|o| o.trim() == d.name()))
        .collect();
    if on("claim") {
        for d in all.iter().copied() {
            claim_cost(d, false).await;
        }
    }
    if on("claim-placed") {
        for d in all.iter().copied() {
            claim_cost(d, true).await;
        }
    }
    if on("idle") {
        for d in all.iter().copied() {
            idle_cost(d, "wakeups = false").await;
            if d != Dialect::Mysql {
                idle_cost(d, "wakeups = true").await;
                idle_cost(
                    d,
                    "wakeups = true\npoll_interval = \"30s\"\nlease = \"40s\"",
                )
                .await;
            }
        }
    }
    if on("wake") || on("wake-on") {
        for d in all.iter().copied() {
            if on("wake") {
                wake_latency(d, "wakeups = false").await;
            }
            if d != Dialect::Mysql {
                wake_latency(d, "wakeups = true").await;
            }
        }
    }
    if on("lateness") {
        for d in all.iter().copied() {
            lateness(d).await;
        }
    }
    // Only when named: each try waits 60 s for the node to be quiet. (SQLite's lease
    // extension has no connection to give back.)
    if wanted.contains(&"quiet") {
        for d in all.iter().copied().filter(|d| *d != Dialect::Sqlite) {
            quiet::quiet_lateness(d).await;
        }
    }
    if on("dashboard") {
        dashboard::dashboard().await;
    }
    for d in all.iter().copied() {
        if on("retention") || wanted.contains(&format!("retention-{}", d.name()).as_str()) {
            retention(d).await;
        }
    }
    if on("burst") {
        burst(Dialect::Postgres, 16, false).await;
    }
    if on("burst") || on("burst-systemd") {
        burst(Dialect::Postgres, 16, true).await;
        burst(Dialect::Postgres, 64, true).await;
    }
    if on("ratio") {
        ratio::ratio(&all).await;
    }
    if on("locks") {
        lock_throughput(Dialect::Postgres).await;
        lock_takeover(Dialect::Postgres).await;
    }
    if on("http-burst") {
        http_burst().await;
    }
    if on("fleet") {
        fleet::fleet(&all).await;
    }
    if on("rss") {
        rss(Dialect::Sqlite).await;
        rss(Dialect::Postgres).await;
    }
}
