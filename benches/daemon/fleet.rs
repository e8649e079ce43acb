//! A fleet on one database (`cargo bench --bench daemon -- fleet`, or `scripts/bench-fleet.sh`,
//! which starts servers of its own that allow a thousand connections): N daemons on this
//! machine, each its own node (`f0`..), for N = 3, 50 and 200 (`SQLCRON_BENCH_FLEET=3,50`
//! to choose; SQLite at N = 3 only), with the jobs a fleet has: 10,000 cluster jobs, one
//! `run_on = "every_node"` job (each node's copy) and 20 jobs pinned to each node.
//!
//! **Idle**: none due. After the daemons are ready and have settled (`SQLCRON_BENCH_FLEET_SETTLE`
//! seconds, 150 by default: well past the 30 quiet seconds after which a node gives back what
//! its start opened), a window of `SQLCRON_BENCH_FLEET_IDLE` seconds (60) measures the
//! server's CPU (% of one core, from `/proc`), its transactions and statements per second, the
//! connections open to the database at the window's end, and the daemons' CPU and largest RSS;
//! on PostgreSQL also the server's CPU split into its background processes, the open
//! connections' backends and the processes that ended (closed connections), the new connections
//! a second, and the statements that took most of its time. `SQLCRON_BENCH_FLEET_MIDNIGHT=false`
//! measures the idle window only; `SQLCRON_BENCH_FLEET_POLL=10s` sets the nodes' `poll_interval`.
//!
//! **Midnight**: the 10,000 cluster jobs and every node's copy due in the same second, the
//! body of the `ratio` benchmark (one line with its start time); the drain (first to last start)
//! against `xargs -P16` of as many bodies in the same run, the empty claims per job
//! (`sqlcron_claims_empty_total`: claim statements that took nothing, summed over the nodes),
//! slots started twice, and the scheduler's CPU per job (daemons and server) as a multiple of
//! `xargs`'s own per body; on PostgreSQL also the statements that took the server's time over
//! the midnight, per job. Each node runs up to `SQLCRON_BENCH_FLEET_MAX_PARALLEL` jobs at once
//! (16), or `SQLCRON_BENCH_FLEET_AT_ONCE` over N (at least one) so that every N starts about
//! as many bodies at once.
//!
//! **After**: with `SQLCRON_BENCH_FLEET_AFTER=330` (seconds), the connections open that long
//! after the midnight's last release, per node: what nodes that ran jobs hold once quiet (their
//! lease extension's connection goes back thirty leases after their last run, 300 s at the
//! default lease).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use sqlcron::store::{Dialect, Store};

use super::ratio::{
    drain_of, insert_sql, mariadbd_pid, server_counts, starts, wait_released, write_body, xargs,
};
use super::{Daemon, Db, FAR, env_number, fill, postmaster_pid, start_daemon, wait_ready};

const CLUSTER_JOBS: usize = 10_000;
const LOCAL_PER_NODE: usize = 20;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Connections open to the bench's database now (SQLite: none).
async fn connections(store: &Store, dialect: Dialect) -> i64 {
    let sql = match dialect {
        Dialect::Postgres => {
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
        }
        Dialect::Mysql => {
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
        }
        Dialect::Sqlite => return 0,
    };
    // Less this store's own connection.
    store.scalar_i64(sql).await.ok().flatten().unwrap_or(0) - 1
}

/// A node's `sqlcron_claims_empty_total` (0 when unread).
async fn empty_claims(client: &reqwest::Client, port: u16) -> f64 {
    let Ok(r) = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
    else {
        return 0.0;
    };
    r.text()
        .await
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("sqlcron_claims_empty_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// How many jobs have started at least once (each start is a line with the job's name first).
fn started_jobs(out: &Path) -> usize {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// One reading of `/proc`: each process's parent, command name and CPU seconds (its own, and
/// its reaped children's). Read once per measurement, so that a window's two readings are
/// moments apart whatever the number of processes (200 daemons each scanning `/proc` for its
/// reaper took tens of seconds, and stretched the window the rates were divided by).
struct Procs(std::collections::HashMap<u32, (u32, String, f64, f64)>);

fn read_procs() -> Procs {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut all = std::collections::HashMap::new();
    for pid in std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map_or("", |(_, c)| c).to_string();
        let f: Vec<f64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let field = |n: usize| f.get(n - 3).copied().unwrap_or(0.0);
        all.insert(
            pid,
            (
                field(4) as u32,
                comm,
                (field(14) + field(15)) / hz,
                (field(16) + field(17)) / hz,
            ),
        );
    }
    Procs(all)
}

impl Procs {
    fn children(&self, parent: u32) -> impl Iterator<Item = (u32, &(u32, String, f64, f64))> {
        self.0
            .iter()
            .filter(move |(_, p)| p.0 == parent)
            .map(|(pid, p)| (*pid, p))
    }

    /// The daemons' CPU seconds, with their reapers' (`sqlcron-reaper`, a child of each).
    fn daemons_cpu(&self, daemons: &[Daemon]) -> f64 {
        let pids: std::collections::HashSet<u32> = daemons.iter().map(|d| d.child.id()).collect();
        self.0
            .iter()
            .filter(|(pid, p)| {
                pids.contains(pid) || (pids.contains(&p.0) && p.1 == "sqlcron-reaper")
            })
            .map(|(_, p)| p.2)
            .sum()
    }

    /// A server's CPU seconds: its own, its reaped children's and its living children's.
    fn server_cpu(&self, pid: u32) -> f64 {
        let own = self.0.get(&pid).map_or(0.0, |p| p.2 + p.3);
        own + self.children(pid).map(|(_, p)| p.2).sum::<f64>()
    }

    /// The PostgreSQL server's living children, each with whether it is a client backend (its
    /// title is "postgres: USER DATABASE HOST(PORT) STATE") and its CPU seconds.
    fn server_parts(&self, postmaster: u32) -> BTreeMap<u32, (bool, f64)> {
        self.children(postmaster)
            .map(|(pid, p)| {
                let cmd =
                    std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                (pid, (cmd.contains('(') && cmd.contains(')'), p.2))
            })
            .collect()
    }

    /// The pooler's CPU seconds (`SQLCRON_BENCH_PG_POOLER_PID`, PgBouncer: one process), or
    /// `None` without one.
    fn pooler_cpu(&self) -> Option<f64> {
        let pid: u32 = std::env::var("SQLCRON_BENCH_PG_POOLER_PID")
            .ok()?
            .parse()
            .ok()?;
        Some(self.0.get(&pid).map_or(0.0, |p| p.2))
    }

    fn reaped(&self, pid: u32) -> f64 {
        self.0.get(&pid).map_or(0.0, |p| p.3)
    }
}

/// What the PostgreSQL server's processes used between two readings, in seconds: (its
/// background processes: WAL writer, checkpointer, autovacuum's launcher and any worker running;
/// the backends of open connections; the processes that ended in between, closed connections
/// and finished autovacuum workers, from the postmaster's reaped time).
fn server_split(
    before: &BTreeMap<u32, (bool, f64)>,
    reaped_before: f64,
    after: &BTreeMap<u32, (bool, f64)>,
    reaped_after: f64,
) -> (f64, f64, f64) {
    let (mut background, mut connections) = (0.0, 0.0);
    for (pid, (client, cpu)) in after {
        let was = before.get(pid).map_or(0.0, |b| b.1);
        if *client {
            connections += cpu - was;
        } else {
            background += cpu - was;
        }
    }
    // The ended ones' time, less what they had used before the window (read then).
    let ended_before: f64 = before
        .iter()
        .filter(|(pid, _)| !after.contains_key(pid))
        .map(|(_, (_, cpu))| cpu)
        .sum();
    (
        background,
        connections,
        reaped_after - reaped_before - ended_before,
    )
}

async fn all_empty_claims(client: &reqwest::Client, ports: &[u16]) -> f64 {
    let mut sum = 0.0;
    for p in ports {
        sum += empty_claims(client, *p).await;
    }
    sum
}

pub async fn fleet(dialects: &[Dialect]) {
    let sizes: Vec<usize> = std::env::var("SQLCRON_BENCH_FLEET")
        .unwrap_or_else(|_| "3,50,200".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let body = write_body(dir.path());
    for &n in &sizes {
        for &d in dialects {
            if d == Dialect::Sqlite && n > 3 {
                continue;
            }
            one_fleet(d, n, &body).await;
        }
    }
}

async fn one_fleet(dialect: Dialect, n: usize, body: &Path) {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    if dialect == Dialect::Postgres {
        let _ = store
            .execute_raw("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await;
    }
    fill(
        &store,
        dialect,
        "cluster",
        CLUSTER_JOBS as i64,
        FAR,
        1000,
        "true",
    )
    .await;
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, run_on, slot, next_exec) \
             VALUES ('everywhere', '0 0 1 1 *', '{}', 'every_node', {FAR}, {FAR})",
            body.display()
        ))
        .await
        .unwrap();
    for i in 0..n {
        let prefix = format!("local-f{i}-");
        fill(
            &store,
            dialect,
            &prefix,
            LOCAL_PER_NODE as i64,
            FAR,
            1000,
            "true",
        )
        .await;
        store
            .execute_raw(&format!(
                "UPDATE cron_table SET placement = '{{\"nodes\":[\"f{i}\"]}}' \
                 WHERE name LIKE '{prefix}%'"
            ))
            .await
            .unwrap();
    }
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("starts.txt");
    let me = sqlcron::exec::account::current().expect("the bench user's account");
    // SAFETY: set before the daemons start, read by them through inherit_env.
    unsafe { std::env::set_var("RATIO_OUT", &out) };
    // `SQLCRON_BENCH_FLEET_WAKEUPS=false`: polling only. `SQLCRON_BENCH_PG_POOLER_PORT`: the
    // nodes reach PostgreSQL through the pooler there (its `direct_url` the server itself).
    let mut wakeups = match std::env::var("SQLCRON_BENCH_FLEET_WAKEUPS").as_deref() {
        Ok("false") => "wakeups = false\n".to_string(),
        _ => String::new(),
    };
    // `SQLCRON_BENCH_FLEET_POLL=10s`: the nodes' `poll_interval` (1 s by default).
    if let Ok(poll) = std::env::var("SQLCRON_BENCH_FLEET_POLL") {
        wakeups.push_str(&format!("poll_interval = \"{poll}\"\n"));
    }
    // `SQLCRON_BENCH_FLEET_MAX_PARALLEL=1`: each node's `max_parallel` (16 by default, so 200
    // nodes may run 3,200 bodies at once on this machine where `xargs` runs 16).
    // `SQLCRON_BENCH_FLEET_AT_ONCE=48` instead: the fleet's bodies at once held near that
    // number, whatever N (each node's `max_parallel` that number over N, at least 1: three
    // nodes 16, two hundred 1), so that N = 3 and N = 200 start about as many bodies on this
    // machine's cores as each other.
    let max_parallel = match env_number("SQLCRON_BENCH_FLEET_AT_ONCE", 0) {
        0 => env_number("SQLCRON_BENCH_FLEET_MAX_PARALLEL", 16),
        at_once => (at_once / n as u64).max(1),
    };
    eprintln!("fleet {dialect:?} N = {n}: max_parallel = {max_parallel} per node");
    let url = match std::env::var("SQLCRON_BENCH_PG_POOLER_PORT") {
        Ok(port) if dialect == Dialect::Postgres => format!(
            "postgres://postgres@127.0.0.1:{port}/{}\"\ndirect_url = \"{}",
            db.name, db.url
        ),
        _ => db.url.clone(),
    };
    let mut ports = Vec::new();
    let started_at = Instant::now();
    let mut daemons: Vec<Daemon> = (0..n)
        .map(|i| {
            let port = free_port();
            ports.push(port);
            let extra = format!(
                "[daemon]\nmax_parallel = {max_parallel}\ndefault_user = \"{0}\"\nallowed_users = [\"{0}\"]\n\
                 inherit_env = [\"RATIO_OUT\"]\n{wakeups}[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
                me.name
            );
            start_daemon(work.path(), &format!("f{i}"), &url, &extra, "info")
        })
        .collect();
    for d in &daemons {
        wait_ready(d).await;
    }
    let ready = started_at.elapsed();
    // Every node's copy of the every_node job exists before the window.
    let copies_deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let copies = store
            .scalar_i64("SELECT COUNT(*) FROM cron_table WHERE name LIKE 'everywhere@%'")
            .await
            .unwrap()
            .unwrap_or(0);
        if copies as usize >= n || Instant::now() > copies_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settle = Duration::from_secs(env_number("SQLCRON_BENCH_FLEET_SETTLE", 150));
    tokio::time::sleep(settle).await;

    // Idle.
    let server = match dialect {
        Dialect::Postgres => postmaster_pid().await,
        Dialect::Mysql => mariadbd_pid().await,
        Dialect::Sqlite => None,
    };
    let window = Duration::from_secs(env_number("SQLCRON_BENCH_FLEET_IDLE", 60));
    if dialect == Dialect::Postgres {
        let _ = store.execute_raw("SELECT pg_stat_statements_reset()").await;
    }
    let reset_at = Instant::now();
    let sessions = "SELECT CAST(sessions AS BIGINT) FROM pg_stat_database \
                    WHERE datname = current_database()";
    let sessions0 = match dialect {
        Dialect::Postgres => store.scalar_i64(sessions).await.ok().flatten(),
        _ => None,
    };
    let (tx0, st0) = server_counts(&db, &store).await;
    let counted0 = Instant::now();
    let procs0 = read_procs();
    let parts0 = server
        .filter(|_| dialect == Dialect::Postgres)
        .map(|p| (procs0.server_parts(p), procs0.reaped(p)));
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let procs1 = read_procs();
    let secs = t0.elapsed().as_secs_f64();
    let parts1 = server
        .filter(|_| dialect == Dialect::Postgres)
        .map(|p| (procs1.server_parts(p), procs1.reaped(p)));
    let (tx1, st1) = server_counts(&db, &store).await;
    let sessions1 = match dialect {
        Dialect::Postgres => store.scalar_i64(sessions).await.ok().flatten(),
        _ => None,
    };
    // The server's counters were read a moment before and after the window.
    let counted = counted0.elapsed().as_secs_f64();
    let server0 = server.map(|p| procs0.server_cpu(p));
    let server1 = server.map(|p| procs1.server_cpu(p));
    let daemons0 = procs0.daemons_cpu(&daemons);
    let daemons1 = procs1.daemons_cpu(&daemons);
    let split = parts0
        .zip(parts1)
        .map(|((before, r0), (after, r1))| server_split(&before, r0, &after, r1));
    let open = connections(&store, dialect).await;
    let rss_max = daemons
        .iter()
        .map(|d| rss_kib(d.child.id()))
        .max()
        .unwrap_or(0);
    let rate = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.1}", (a - b) as f64 / counted),
        _ => "n/a".into(),
    };
    let server_pct = match (server1, server0) {
        (Some(a), Some(b)) => format!("{:.1} %", (a - b) * 100.0 / secs),
        _ => "n/a (in the daemons)".into(),
    };
    println!(
        "fleet      {:<8} N={n:<4} idle: server {server_pct} of a core; {} transactions/s, {} statements/s; \
         {open} connections ({:.2} per node); daemons {:.2} % of a core together ({:.3} % each), \
         RSS max {:.1} MiB; ready in {:.1} s",
        dialect.name(),
        rate(tx1, tx0),
        rate(st1, st0),
        open as f64 / n as f64,
        (daemons1 - daemons0) * 100.0 / secs,
        (daemons1 - daemons0) * 100.0 / secs / n as f64,
        rss_max as f64 / 1024.0,
        ready.as_secs_f64()
    );
    // Where the idle server's time went: its processes, the connections opened in the window
    // (each a new backend), and the statements that took most of it.
    // PgBouncer's own CPU is the fleet's cost too, beside the server's.
    if let Some((a, b)) = procs1.pooler_cpu().zip(procs0.pooler_cpu()) {
        println!(
            "fleet      {:<8} N={n:<4} idle pooler (PgBouncer): {:.1} % of a core",
            dialect.name(),
            (a - b) * 100.0 / secs
        );
    }
    if let Some((background, connections, ended)) = split {
        println!(
            "fleet      postgres N={n:<4} idle server: background processes {:.1} %, open \
             connections' backends {:.1} %, ended processes (closed connections, autovacuum \
             workers) {:.1} %; {} new connections/s",
            background * 100.0 / secs,
            connections * 100.0 / secs,
            ended * 100.0 / secs,
            rate(sessions1, sessions0),
        );
    }
    if dialect == Dialect::Postgres {
        let per = reset_at.elapsed().as_secs_f64();
        for line in top_statements(&store, per, "/s", 6).await {
            println!("fleet      postgres N={n:<4} idle statement: {line}");
        }
    }

    // Midnight (`SQLCRON_BENCH_FLEET_MIDNIGHT=false`: the idle window only).
    if std::env::var("SQLCRON_BENCH_FLEET_MIDNIGHT").as_deref() == Ok("false") {
        for d in &mut daemons {
            super::stop(d);
        }
        drop(daemons);
        store.close().await;
        db.drop_db().await;
        return;
    }
    let jobs = CLUSTER_JOBS + n;
    let alone = xargs(work.path(), body, jobs);
    let _ = std::fs::remove_file(&out);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let empty0 = all_empty_claims(&client, &ports).await;
    let now = store.now().await.unwrap();
    let slot = now - now.rem_euclid(1000) + 5_000;
    if dialect == Dialect::Postgres {
        let _ = store.execute_raw("SELECT pg_stat_statements_reset()").await;
    }
    let procs0 = read_procs();
    let server0 = server.map(|p| procs0.server_cpu(p));
    let daemons0 = procs0.daemons_cpu(&daemons);
    store
        .execute_raw(&insert_sql(dialect, "midnight", CLUSTER_JOBS, slot, body))
        .await
        .unwrap();
    // The nodes write their copies' rows too (heartbeats): on MariaDB this UPDATE may be chosen
    // as a deadlock's victim, and is tried again.
    let everywhere = format!(
        "UPDATE cron_table SET slot = {slot}, next_exec = {slot} WHERE name LIKE 'everywhere@%'"
    );
    let mut tries = 0;
    while let Err(e) = store.execute_raw(&everywhere).await {
        tries += 1;
        assert!(tries < 20, "{e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Until every job has started once (a line per start: a job started twice is two lines).
    let deadline = Instant::now() + Duration::from_secs(600);
    while started_jobs(&out) < jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_released(&store).await;
    let procs1 = read_procs();
    let daemons1 = procs1.daemons_cpu(&daemons);
    let server1 = server.map(|p| procs1.server_cpu(p));
    let empty1 = all_empty_claims(&client, &ports).await;
    let mut by_job: BTreeMap<String, usize> = BTreeMap::new();
    for l in std::fs::read_to_string(&out).unwrap_or_default().lines() {
        if let Some(name) = l.split_whitespace().next() {
            *by_job.entry(name.to_string()).or_default() += 1;
        }
    }
    let twice = by_job.values().filter(|c| **c > 1).count();
    // Jobs that never started within the deadline, counted, so that a missing start is seen.
    let missing = jobs.saturating_sub(by_job.len());
    // A slot started twice is either a lost run rerun (`rerun_lost`: its node could not extend
    // its lease in time, the one double run the design accepts) or a fault: the history tells.
    let midnight = "(job_name LIKE 'midnight%' OR job_name LIKE 'everywhere@%')";
    let count = |sql: String| {
        let store = &store;
        async move { store.scalar_i64(&sql).await.ok().flatten().unwrap_or(-1) }
    };
    let lost = count(format!(
        "SELECT COUNT(*) FROM cron_runs WHERE {midnight} AND outcome = 'lost'"
    ))
    .await;
    let reruns = count(format!(
        "SELECT COUNT(*) FROM cron_runs WHERE {midnight} AND attempt > 1"
    ))
    .await;
    let drain = drain_of(starts(&out), slot as f64);
    let pooler = match (procs1.pooler_cpu(), procs0.pooler_cpu()) {
        (Some(a), Some(b)) => format!(
            " (PgBouncer besides: {:.2} ms, not in the multiple)",
            (a - b) * 1000.0 / jobs as f64
        ),
        _ => String::new(),
    };
    let server_ms = server1
        .zip(server0)
        .map_or(0.0, |(a, b)| (a - b) * 1000.0 / jobs as f64);
    let daemons_ms = (daemons1 - daemons0) * 1000.0 / jobs as f64;
    let xargs_ms = alone.starter_cpu * 1000.0 / jobs as f64;
    println!(
        "fleet      {:<8} N={n:<4} midnight: {jobs} jobs, drain {:.2} s vs xargs -P16 {:.2} s = {:.2}x; \
         p99 lateness {:.2} s; {} starts of {} jobs/{jobs} ({missing} never started), {twice} twice \
         (history: {lost} lost, {reruns} reruns); {:.3} empty claims per job; \
         CPU per job: daemons {daemons_ms:.2} ms, server {server_ms:.2} ms = {:.1}x xargs's own ({xargs_ms:.2} ms){pooler}",
        dialect.name(),
        drain.drain,
        alone.drain,
        drain.drain / alone.drain,
        drain.p99,
        drain.started,
        by_job.len(),
        (empty1 - empty0) / jobs as f64,
        (daemons_ms + server_ms) / xargs_ms,
    );
    // What the server spent the midnight on, per job (the statements of the benchmark's own
    // looks included).
    if dialect == Dialect::Postgres {
        for line in top_statements(&store, jobs as f64, " per job", 8).await {
            println!("fleet      postgres N={n:<4} midnight statement: {line}");
        }
    }
    let after = env_number("SQLCRON_BENCH_FLEET_AFTER", 0);
    if after > 0 {
        let at_end = connections(&store, dialect).await;
        let lease_at_end = match dialect {
            Dialect::Postgres => store
                .scalar_i64(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
                     AND query LIKE 'UPDATE cron_table SET lease_until%'",
                )
                .await
                .ok()
                .flatten()
                .map(|c| format!(" ({c} the lease extension's)"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        tokio::time::sleep(Duration::from_secs(after)).await;
        let open = connections(&store, dialect).await;
        // On PostgreSQL, by the last statement each connection sent: the lease extension's
        // (its UPDATE of `lease_until`), the LISTEN, the others (the pools').
        let kinds = match dialect {
            Dialect::Postgres => store
                .scalars::<String>(
                    "SELECT CASE WHEN query LIKE 'UPDATE cron_table SET lease_until%' THEN 'lease' \
                     WHEN query LIKE 'LISTEN%' THEN 'listen' ELSE 'other' END || ' ' \
                     || COUNT(*)::text FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1 \
                     ORDER BY 1",
                )
                .await
                .map(|k| format!(" ({})", k.join(", ")))
                .unwrap_or_default(),
            _ => String::new(),
        };
        println!(
            "fleet      {:<8} N={n:<4} after the midnight: {at_end} connections ({:.2} per node) \
             at its end{lease_at_end}, {open} ({:.2} per node) {after} s later{kinds}",
            dialect.name(),
            at_end as f64 / n as f64,
            open as f64 / n as f64,
        );
    }
    for d in &mut daemons {
        super::stop(d);
    }
    drop(daemons);
    store.close().await;
    db.drop_db().await;
}

/// PostgreSQL's `limit` statements that took the server longest since the statistics' reset, as
/// "<ms> ms<unit>, <calls> calls<unit>: <text>", the time and the calls divided by `per`. The
/// time is the executor's (`total_exec_time`): waits for locks and for a core count in it.
async fn top_statements(store: &Store, per: f64, unit: &str, limit: usize) -> Vec<String> {
    store
        .scalars::<String>(&format!(
            "SELECT round((total_exec_time / {per:.6})::numeric, 3)::text || ' ms{unit}, ' \
             || round((calls / {per:.6})::numeric, 3)::text || ' calls{unit}: ' \
             || left(regexp_replace(query, '\\s+', ' ', 'g'), 140) \
             FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT {limit}"
        ))
        .await
        .unwrap_or_default()
}
