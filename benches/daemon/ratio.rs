//! The midnight burst against the machine's limit (`cargo bench --bench daemon -- ratio`): the
//! same body (a bash script appending one line with its start time to a file) started N times by
//! `xargs -P16` alone, then as N jobs due in the same second through sqlcron (three nodes on
//! PostgreSQL and on MariaDB, one node on SQLite), for N = 1,000, 5,000 and 20,000
//! (`SQLCRON_BENCH_SIZES=1000,5000` to choose; `SQLCRON_BENCH_POOL_SIZE=3` sets the daemons'
//! `[database] pool_size`; `SQLCRON_BENCH_RUN_AS=nobody` has a root daemon run the bodies as
//! that account, as a service runs its jobs).
//!
//! Each burst through sqlcron meets daemons that have run 300 jobs first
//! (`SQLCRON_BENCH_WARM_UP`), as a node that has been up a while has: its connections open, its
//! statements prepared; then it waits 10.5 s, for PostgreSQL's backends to report the warm-up's
//! transactions and for the servers' background work. Its window opens once the rows are
//! inserted and closes when the last run is released. Each burst runs three times (`SQLCRON_BENCH_REPEAT`), and a line with the
//! medians follows the three.
//!
//! Printed per burst: the drain (first start to last start, from the body's own clock), p99
//! lateness (start minus the slot), the ratio of the drain to `xargs`'s, CPU per job of the
//! daemons (their job reapers included) and of the database server (from `/proc`), `xargs`'s
//! own CPU per body (what starting a body costs without a scheduler), the scheduler's CPU per
//! job (daemons and server) as a multiple of that (comparable between machines whose process
//! starts differ), the CPU spent in the window before the slot (the burst's fixed part), and
//! transactions and statements per job (from the server's statistics, read once the daemons
//! have stopped).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sqlcron::store::{Dialect, Store};

use super::{
    Daemon, Db, commits, cpu_seconds, db_url, my_admin, percentile, postmaster_pid, start_daemon,
    stop, wait_ready,
};

/// The body every start runs: its name (argument or `SQLCRON_JOB`) and the time it started.
const BODY: &str = "#!/bin/bash\necho \"${1:-$SQLCRON_JOB} $EPOCHREALTIME\" >> \"$RATIO_OUT\"\n";

/// Writes [`BODY`] to `dir` (made world-readable: the job user must reach it); its path.
pub(super) fn write_body(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let body = dir.join("body.sh");
    std::fs::write(&body, BODY).unwrap();
    std::fs::set_permissions(&body, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    body
}

/// Start times (ms since the epoch) the body wrote to `out`, one per line.
pub(super) fn starts(out: &Path) -> Vec<f64> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map(|s| s * 1000.0)
        .collect()
}

/// CPU seconds the server has used so far: its own process, its children that exited and those
/// still running (PostgreSQL's backends), so that a backend that has not exited yet counts too.
pub(super) fn server_cpu_seconds(pid: u32) -> f64 {
    let (own, reaped) = cpu_seconds(pid);
    let living: f64 = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| parent_of(p) == Some(pid))
                .map(|p| cpu_seconds(p).0)
                .sum()
        })
        .unwrap_or(0.0);
    own + reaped + living
}

/// The parent of process `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The CPU seconds of the job reaper a daemon started (`sqlcron-reaper`, its child): part of
/// what the scheduler costs, in a process of its own.
pub(super) fn reaper_cpu_seconds(daemon: u32) -> f64 {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| parent_of(p) == Some(daemon))
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "sqlcron-reaper")
                })
                .map(|p| cpu_seconds(p).0)
                .sum()
        })
        .unwrap_or(0.0)
}

/// What one way of starting N bodies measured.
pub(super) struct Drain {
    /// First start to last start, seconds.
    pub(super) drain: f64,
    /// p99 of start minus the moment they were all due, seconds.
    pub(super) p99: f64,
    pub(super) started: usize,
    /// CPU seconds of the starter itself (`xargs`), its bodies not counted.
    pub(super) starter_cpu: f64,
}

pub(super) fn drain_of(mut t: Vec<f64>, due_ms: f64) -> Drain {
    t.sort_by(|a, b| a.total_cmp(b));
    let late: Vec<f64> = t.iter().map(|s| (s - due_ms) / 1000.0).collect();
    Drain {
        drain: match (t.first(), t.last()) {
            (Some(a), Some(b)) => (b - a) / 1000.0,
            _ => f64::NAN,
        },
        p99: percentile(&late, 0.99),
        started: t.len(),
        starter_cpu: f64::NAN,
    }
}

/// The bodies alone: `seq N | xargs -P16 -n1 body`. Also measures what `xargs` itself spends
/// starting and reaping them: its own CPU, read from `/proc` once it has exited and before it
/// is reaped (the bodies' CPU is in its children's fields, not counted).
pub(super) fn xargs(dir: &Path, body: &Path, n: usize) -> Drain {
    use std::io::Write;
    let out = dir.join(format!("xargs-{n}.txt"));
    let _ = std::fs::remove_file(&out);
    let numbers: String = (1..=n).map(|i| format!("{i}\n")).collect();
    let due = now_ms();
    let mut child = Command::new("xargs")
        .args(["-P16", "-n1"])
        .arg(body)
        .env("RATIO_OUT", &out)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(numbers.as_bytes()).unwrap();
    drop(input);
    let pid = child.id();
    let exited = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(')')?.1.trim_start().starts_with('Z')))
            .unwrap_or(true)
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while !exited() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let starter_cpu = cpu_seconds(pid).0;
    assert!(child.wait().unwrap().success());
    Drain {
        starter_cpu,
        ..drain_of(starts(&out), due)
    }
}

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// The MariaDB server's process, found by its pid file.
pub(super) async fn mariadbd_pid() -> Option<u32> {
    let admin = Store::connect(&db_url(&my_admin()), 1).ok()?;
    let file = admin
        .scalar::<String>("SELECT @@pid_file")
        .await
        .ok()
        .flatten();
    admin.close().await;
    std::fs::read_to_string(file?).ok()?.trim().parse().ok()
}

/// The server's counters: (transactions, statements) so far, where the server keeps them.
/// `store` is connected to the bench's database, where `pg_stat_statements` was created.
pub(super) async fn server_counts(db: &Db, store: &Store) -> (Option<i64>, Option<i64>) {
    match db.dialect {
        Dialect::Postgres => {
            let tx = commits(db, true).await;
            let statements = store
                .scalar_i64(
                    "SELECT CAST(SUM(calls) AS BIGINT) FROM pg_stat_statements \
                     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                )
                .await
                .ok()
                .flatten();
            (Some(tx), statements)
        }
        Dialect::Mysql => {
            let admin = Store::connect(&db_url(&my_admin()), 1).unwrap();
            let read = |name: &str| {
                format!(
                    "SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS \
                     WHERE VARIABLE_NAME = '{name}'"
                )
            };
            let tx = admin
                .scalar_i64(&read("HANDLER_COMMIT"))
                .await
                .ok()
                .flatten();
            let statements = admin.scalar_i64(&read("QUESTIONS")).await.ok().flatten();
            admin.close().await;
            (tx, statements)
        }
        Dialect::Sqlite => (None, None),
    }
}

/// The statement that inserts `n` jobs named `prefix1`.. due at `slot`, each running `body`.
pub(super) fn insert_sql(
    dialect: Dialect,
    prefix: &str,
    n: usize,
    slot: i64,
    body: &Path,
) -> String {
    match dialect {
        Dialect::Postgres => format!(
            "INSERT INTO cron_table (name, schedule, command, slot, next_exec) \
             SELECT '{prefix}' || g, '0 0 1 1 *', '{}', {slot}, {slot} FROM generate_series(1, {n}) g",
            body.display()
        ),
        Dialect::Mysql => format!(
            "INSERT INTO cron_table (name, schedule, command, slot, next_exec) \
             SELECT CONCAT('{prefix}', seq), '0 0 1 1 *', '{}', {slot}, {slot} FROM seq_1_to_{n}",
            body.display()
        ),
        Dialect::Sqlite => format!(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n}) \
             INSERT INTO cron_table (name, schedule, command, slot, next_exec) \
             SELECT '{prefix}' || x, '0 0 1 1 *', '{}', {slot}, {slot} FROM g",
            body.display()
        ),
    }
}

/// Waits (at most a minute) until no row is held: the runs of a burst all released.
pub(super) async fn wait_released(store: &Store) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let running = store
            .scalar_i64("SELECT COUNT(*) FROM cron_table WHERE exec_by IS NOT NULL")
            .await
            .unwrap()
            .unwrap_or(0);
        if running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Jobs run through the daemons before the burst is measured (see [`through_sqlcron`]);
/// `SQLCRON_BENCH_WARM_UP` sets another number, 0 for none.
fn warm_up() -> usize {
    std::env::var("SQLCRON_BENCH_WARM_UP")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(300)
}

/// The figures of one burst through sqlcron that the targets are read on.
struct Burst {
    /// The drain as a multiple of `xargs`'s.
    ratio: f64,
    /// CPU per job, ms: the daemons (their reapers included) and the server (`None`: SQLite,
    /// whose database work is the daemon's).
    daemons_ms: f64,
    server_ms: Option<f64>,
    /// Transactions per job, where the server counts them.
    tx: Option<f64>,
}

impl Burst {
    fn scheduler_ms(&self) -> f64 {
        self.daemons_ms + self.server_ms.unwrap_or(0.0)
    }
}

/// N jobs due in the same second through sqlcron: `nodes` daemons, 16 places each.
async fn through_sqlcron(
    dialect: Dialect,
    nodes: usize,
    body: &Path,
    n: usize,
    xargs: &Drain,
) -> Burst {
    let db = Db::new(dialect).await;
    let store = db.store().await;
    if dialect == Dialect::Postgres {
        // Statement counts where the server has the extension loaded; "n/a" otherwise.
        let _ = store
            .execute_raw("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("starts.txt");
    let me = sqlcron::exec::account::current().expect("the bench user's account");
    // The account the bodies run as: the bench's own, or `SQLCRON_BENCH_RUN_AS` (a root daemon
    // running its jobs as another user, as a service does), which may then write `out`.
    let run_as = run_as().unwrap_or(me.name);
    if run_as_other() {
        // The bodies create `out` (again after the warm-up) as that account.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let extra = format!(
        "[daemon]\nmax_parallel = 16\ndefault_user = \"{0}\"\nallowed_users = [\"{0}\"]\n\
         inherit_env = [\"RATIO_OUT\"]\n",
        run_as
    );
    // SAFETY: set before the daemons start, read by them through inherit_env.
    unsafe { std::env::set_var("RATIO_OUT", &out) };
    // Logging at `info`, as a service does by default (two lines per run).
    let mut daemons: Vec<Daemon> = (0..nodes)
        .map(|i| start_daemon(dir.path(), &format!("r{i}"), &db.url, &extra, "info"))
        .collect();
    for d in &daemons {
        wait_ready(d).await;
    }
    let server = match dialect {
        Dialect::Postgres => postmaster_pid().await,
        Dialect::Mysql => mariadbd_pid().await,
        Dialect::Sqlite => None,
    };
    let server_cpu = |pid: Option<u32>| pid.map(server_cpu_seconds);
    // A warm-up first, not measured: jobs through the same daemons, so that the burst meets
    // them as it meets a daemon that has been up a while: its pool's connections open and its
    // statements prepared on each (about 200 prepares for three nodes on MariaDB).
    let warm = warm_up();
    if warm > 0 {
        let now = store.now().await.unwrap();
        let warm_slot = now - now.rem_euclid(1000) + 2_000;
        store
            .execute_raw(&insert_sql(dialect, "warm", warm, warm_slot, body))
            .await
            .unwrap();
        let warm_deadline = Instant::now() + Duration::from_secs(60);
        while starts(&out).len() < warm && Instant::now() < warm_deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            starts(&out).len(),
            warm,
            "the warm-up's jobs did not all start"
        );
        wait_released(&store).await;
        // The burst's starts only (each warm-up body has written its one line).
        std::fs::remove_file(&out).unwrap();
        // PostgreSQL's backends report the warm-up's transactions when idle, up to 10 s later
        // (`PGSTAT_IDLE_INTERVAL`), and the servers finish its background work: the burst's
        // counts and CPU start after both.
        tokio::time::sleep(Duration::from_millis(10_500)).await;
    }
    if dialect == Dialect::Postgres {
        // The burst's statements only (this database's; the setup's are forgotten).
        let _ = store
            .execute_raw(
                "SELECT pg_stat_statements_reset(0, \
                 (SELECT oid FROM pg_database WHERE datname = current_database()), 0)",
            )
            .await;
    }
    // Counted from here (PostgreSQL's once its backends have reported the warm-up's), so the
    // insert below is counted with the burst: one transaction, one statement.
    let (tx_before, st_before) = server_counts(&db, &store).await;
    let now = store.now().await.unwrap();
    let slot = now - now.rem_euclid(1000) + 3_000;
    let sql = insert_sql(dialect, "ratio", n, slot, body);
    // The daemons and their job reapers.
    let daemons_cpu_now = |daemons: &[Daemon]| -> (f64, f64) {
        let ids = daemons.iter().map(|d| d.child.id());
        (
            ids.clone().map(|p| cpu_seconds(p).0).sum(),
            ids.map(reaper_cpu_seconds).sum(),
        )
    };
    store.execute_raw(&sql).await.unwrap();
    let cpu_before = server_cpu(server);
    let (daemons_before, reapers_before) = daemons_cpu_now(&daemons);
    let deadline = Instant::now() + Duration::from_secs(300);
    // The CPU spent in the window before the slot (the daemons waiting for their slot, what the
    // server still had to write): a burst's fixed part, counted in the figures per job, where it
    // weighs most at N = 1,000. Read just before the slot.
    let to_slot = slot as f64 - 20.0 - now_ms();
    if to_slot > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(to_slot / 1000.0)).await;
    }
    let before_slot = {
        let (own, reapers) = daemons_cpu_now(&daemons);
        let server = server_cpu(server)
            .zip(cpu_before)
            .map_or(0.0, |(a, b)| a - b);
        (own + reapers - daemons_before - reapers_before, server)
    };
    while starts(&out).len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The releases of the last runs, then the daemons' own CPU before they stop.
    wait_released(&store).await;
    let (daemons_after, reapers_after) = daemons_cpu_now(&daemons);
    let reapers_cpu = reapers_after - reapers_before;
    let daemons_cpu = daemons_after - daemons_before + reapers_cpu;
    let server_after = server_cpu(server);
    // Transactions and statements once the daemons have stopped: PostgreSQL's backends report
    // theirs in their own time, at the latest when they exit (a few of the stop's own writes
    // are counted with the burst's).
    for d in &mut daemons {
        stop(d);
    }
    let (tx_after, st_after) = server_counts(&db, &store).await;
    let server_ms = match (server_after, cpu_before) {
        (Some(a), Some(b)) => Some((a - b) * 1000.0 / n as f64),
        _ => None,
    };
    let server_cpu = server_ms.map_or("n/a (in the daemons)".into(), |ms| format!("{ms:.2} ms"));
    // The scheduler's CPU per job (daemons and server) in units of what `xargs` itself spends
    // per body on the same machine: comparable between machines whose process starts differ.
    let scheduler_ms = daemons_cpu * 1000.0 / n as f64 + server_ms.unwrap_or(0.0);
    let relative = scheduler_ms / (xargs.starter_cpu * 1000.0 / n as f64);
    let per_job = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) if a >= b => format!("{:.2}", (a - b) as f64 / n as f64),
        _ => "n/a".into(),
    };
    let d = drain_of(starts(&out), slot as f64);
    println!(
        "ratio      {:<8} N={n:<6} {nodes} node(s): drain {:.2} s vs xargs -P16 {:.2} s = {:.2}x; \
         p99 lateness {:.2} s (xargs {:.2} s); started {}/{n}; CPU per job: daemons {:.2} ms \
         (their reapers {:.2} ms; xargs's own {:.2} ms), database {server_cpu}; scheduler \
         {scheduler_ms:.2} ms = {relative:.1}x xargs's own (of which before the slot: \
         {:.3} s of the daemons', {:.3} s of the server's); per job: {} transactions, {} statements",
        dialect.name(),
        d.drain,
        xargs.drain,
        d.drain / xargs.drain,
        d.p99,
        xargs.p99,
        d.started,
        daemons_cpu * 1000.0 / n as f64,
        reapers_cpu * 1000.0 / n as f64,
        xargs.starter_cpu * 1000.0 / n as f64,
        before_slot.0,
        before_slot.1,
        per_job(tx_after, tx_before),
        per_job(st_after, st_before),
    );
    if dialect == Dialect::Postgres
        && let Some(top) = top_statements(&store, n).await
    {
        println!("{top}");
    }
    store.close().await;
    db.drop_db().await;
    Burst {
        ratio: d.drain / xargs.drain,
        daemons_ms: daemons_cpu * 1000.0 / n as f64,
        server_ms,
        tx: match (tx_after, tx_before) {
            (Some(a), Some(b)) if a >= b => Some((a - b) as f64 / n as f64),
            _ => None,
        },
    }
}

/// The median burst of `bursts` (by the scheduler's CPU per job) and the median drain ratio,
/// with the range of each: one line the targets are read on.
fn median_line(dialect: Dialect, n: usize, mut bursts: Vec<Burst>) -> String {
    let count = bursts.len();
    let mut ratios: Vec<f64> = bursts.iter().map(|b| b.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    bursts.sort_by(|a, b| a.scheduler_ms().total_cmp(&b.scheduler_ms()));
    let (low, high) = (bursts[0].scheduler_ms(), bursts[count - 1].scheduler_ms());
    let mid = &bursts[count / 2];
    format!(
        "ratio      {:<8} N={n:<6} median of {count} bursts: drain {:.2}x ({:.2}-{:.2}x); \
         scheduler {:.2} ms per job ({low:.2}-{high:.2}): daemons {:.2} ms, database {}; {} \
         transactions per job",
        dialect.name(),
        ratios[count / 2],
        ratios[0],
        ratios[count - 1],
        mid.scheduler_ms(),
        mid.daemons_ms,
        mid.server_ms
            .map_or("in the daemons".into(), |ms| format!("{ms:.2} ms")),
        mid.tx.map_or("n/a".into(), |t| format!("{t:.2}")),
    )
}

/// Where PostgreSQL's time went in the burst: the statements of this database by total time,
/// with their calls per job (where the server has `pg_stat_statements` loaded).
async fn top_statements(store: &Store, n: usize) -> Option<String> {
    store
        .scalar::<String>(&format!(
            "SELECT string_agg(format('  %s calls (%s per job), %s ms executing (%s ms each), \
                 %s ms planning %s times: %s', \
                 calls, round(calls / {n}.0, 2), round(total_exec_time::numeric, 0), \
                 round(mean_exec_time::numeric, 3), round(total_plan_time::numeric, 0), plans, \
                 left(regexp_replace(query, '\\s+', ' ', 'g'), 140)), \
                 E'\\n' ORDER BY total_exec_time + total_plan_time DESC) \
             FROM (SELECT * FROM pg_stat_statements \
                   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                   ORDER BY total_exec_time + total_plan_time DESC LIMIT 12) s"
        ))
        .await
        .ok()
        .flatten()
}

/// `SQLCRON_BENCH_RUN_AS`: the account the daemons run the bodies as (a root daemon's jobs run
/// as another user, as under a service; the bench's own account otherwise).
fn run_as() -> Option<String> {
    std::env::var("SQLCRON_BENCH_RUN_AS")
        .ok()
        .filter(|u| !u.is_empty())
}

fn run_as_other() -> bool {
    run_as().is_some()
}

pub async fn ratio(dialects: &[Dialect]) {
    let sizes: Vec<usize> = std::env::var("SQLCRON_BENCH_SIZES")
        .unwrap_or_else(|_| "1000,5000,20000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // Each burst is run this many times and the median read (a burst of 1,000 lasts under a
    // second, and one such burst varies by a quarter on a 2-core machine).
    let repeat: usize = std::env::var("SQLCRON_BENCH_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1);
    let dir = tempfile::tempdir().unwrap();
    if run_as_other() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let body = write_body(dir.path());
    for &n in &sizes {
        // The bodies alone, three times: the median drain is the yardstick (one run of 5,000
        // varies by 15 % on a 2-core machine).
        let mut runs: Vec<Drain> = (0..3).map(|_| xargs(dir.path(), &body, n)).collect();
        runs.sort_by(|a, b| a.drain.total_cmp(&b.drain));
        let alone = runs.swap_remove(1);
        println!(
            "ratio      xargs    N={n:<6} the bodies alone, xargs -P16 (median of 3): drain {:.2} s, p99 lateness {:.2} s, started {}; xargs's own CPU per body {:.2} ms",
            alone.drain,
            alone.p99,
            alone.started,
            alone.starter_cpu * 1000.0 / n as f64
        );
        for &d in dialects {
            let nodes = if d == Dialect::Sqlite { 1 } else { 3 };
            let mut bursts = Vec::with_capacity(repeat);
            for _ in 0..repeat {
                bursts.push(through_sqlcron(d, nodes, &body, n, &alone).await);
            }
            if repeat > 1 {
                println!("{}", median_line(d, n, bursts));
            }
        }
    }
}
