//! Issue 9: the chaos soak. Three real `sqlcron daemon` processes share one database; a few short
//! jobs run every 2 s and a long one every 10 s; faults come one after another at random:
//! SIGKILL and restart of a node, SIGSTOP of a node for twice the lease, a stall and a reset of a
//! node's connections (through the proxy), one restart of the database server (a throwaway one
//! of the test's own; on SQLite: an exclusive write lock held for twice the lease).
//!
//! The jobs keep their own record (start, heartbeat, end, with pid, slot, attempt and token), so
//! the verdict does not trust the daemons' bookkeeping. Zero tolerated: two processes of one job
//! alive at once, a slot completed twice, a slot with neither a completed run nor a recorded
//! decision about it, a history row left `running`, a daemon that exits or panics, or does not
//! exit 30 s after SIGTERM. A slot not yet run that its row still owes (the row's `slot` has not
//! moved past it) is late, not lost: counted as "owed at the end" (a machine too busy to keep up
//! ends with some), and a defect only when it is over a minute old.
//!
//! A chained job follows one short job (`after`, with `rerun_lost = false`): each run of the
//! short job in the fault phase that succeeded must have its chained run, recorded once.
//! One short job keeps to a calendar: it skips ten seconds of every thirty (`skip_on`); a slot of
//! it that runs inside one of those stretches is a defect too, and the skipped ones are accounted
//! for by the calendar's history lines.
//!
//! The cluster's start rate is on (4 a second, 2 at once): the slots that fall due together take
//! turns, so faults also hit rows waiting for their turn under their lease and rows handed back.
//!
//! `SQLCRON_SOAK_SECS` sets the length of the fault phase per database (default 60).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::DateTime;
use sqlcron::store::{Dialect, HistoryRow, Store};

use crate::mariadb_outage::ThrowawayMariadb;
use crate::outage::ThrowawayPostgres;
use crate::proxy::Proxy;
use crate::util::{DaemonProcess, eventually};

const LEASE_SECS: u64 = 3;
const NODES: usize = 3;
/// Jobs every 2 s that run for a moment, with `rerun_lost = false`: each slot runs at most once,
/// so a second completion is a defect whatever happened.
/// `SQLCRON_SOAK_SHORT_JOBS` of them (default 3, at most 26): more rows per claim and release.
fn short_jobs() -> Vec<String> {
    let n: usize = std::env::var("SQLCRON_SOAK_SHORT_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .clamp(3, 26);
    (b'a'..)
        .take(n)
        .map(|c| format!("short-{}", c as char))
        .collect()
}
/// A job every 10 s that runs for 4 s, with the default `rerun_lost = true`. Its work is done by a
/// process that leaves the run's process group (`setsid`), so a run whose group is killed but
/// whose escaped worker lives on shows up as an overlap with its rerun. A run its node lost
/// is run again; a second completion is a defect unless the first was recorded lost (its end
/// could not be written: the documented at-least-once case).
const LONG: &str = "long";
/// The short job that skips the calendar's stretches.
const QUIET_JOB: &str = "short-b";
/// The job chained to `short-a` (`after`): one run for each of its successful runs.
const CHAINED: &str = "chained";

/// Ten quiet seconds out of every thirty, from 20 s after `from` (ms) for `secs` and a margin:
/// `(start, end)` in ms.
fn quiet_spans(from: i64, secs: u64) -> Vec<(i64, i64)> {
    let first = (from / 1000 + 20) * 1000;
    (0..)
        .map(|i| first + i * 30_000)
        .take_while(|s| *s < from + (secs as i64 + 180) * 1000)
        .map(|s| (s, s + 10_000))
        .collect()
}

/// The `[[calendar]]` of the quiet spans (UTC, the jobs' zone).
fn quiet_calendar(spans: &[(i64, i64)]) -> String {
    let at = |ms: i64| {
        DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    let entries: Vec<String> = spans
        .iter()
        .enumerate()
        .map(|(i, (s, e))| format!("\"{}..{} quiet {i}\"", at(*s), at(*e)))
        .collect();
    format!(
        "[[calendar]]\nname = \"soak-quiet\"\nentries = [{}]\n",
        entries.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_sqlite() {
    soak(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_postgres() {
    soak(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_mysql() {
    soak(Dialect::Mysql).await;
}

/// A tiny deterministic generator (xorshift64*); the seed is printed so a run can be repeated.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n
    }
}

/// The database under test: a throwaway server (it gets restarted) or a SQLite file.
enum Server {
    Sqlite(tempfile::TempDir),
    Postgres(ThrowawayPostgres),
    Mysql(ThrowawayMariadb),
}

impl Server {
    async fn start(dialect: Dialect) -> Server {
        match dialect {
            Dialect::Sqlite => Server::Sqlite(tempfile::tempdir().unwrap()),
            Dialect::Postgres => Server::Postgres(ThrowawayPostgres::start()),
            Dialect::Mysql => {
                let my = ThrowawayMariadb::start();
                let admin = Store::connect(&crate::util::db_url(&my.url()), 1).unwrap();
                admin.execute_raw("CREATE DATABASE soak").await.unwrap();
                admin.close().await;
                Server::Mysql(my)
            }
        }
    }

    /// The URL a node uses, through `proxy` for the servers.
    fn url(&self, proxy: Option<&Proxy>) -> String {
        match self {
            Server::Sqlite(dir) => format!("sqlite://{}/soak.db", dir.path().display()),
            Server::Postgres(pg) => format!(
                "postgres://postgres@127.0.0.1:{}/postgres",
                proxy.map_or(pg.port, |p| p.port)
            ),
            Server::Mysql(my) => format!(
                "mysql://root@127.0.0.1:{}/soak",
                proxy.map_or(my.port, |p| p.port)
            ),
        }
    }

    fn address(&self) -> Option<String> {
        match self {
            Server::Sqlite(_) => None,
            Server::Postgres(pg) => Some(format!("127.0.0.1:{}", pg.port)),
            Server::Mysql(my) => Some(format!("127.0.0.1:{}", my.port)),
        }
    }

    /// Stops the server and starts it again (SQLite: holds the write lock instead).
    async fn restart(&mut self, hold: Duration) {
        match self {
            Server::Sqlite(_) => self.lock_sqlite(hold).await,
            Server::Postgres(pg) => {
                pg.down();
                tokio::time::sleep(Duration::from_secs(2)).await;
                pg.up();
            }
            Server::Mysql(my) => {
                my.down();
                tokio::time::sleep(Duration::from_secs(2)).await;
                my.up();
            }
        }
    }

    /// SQLite's stall: another connection holds the write lock.
    async fn lock_sqlite(&self, hold: Duration) {
        let pool = sqlx::AnyPool::connect(&self.url(None)).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("UPDATE cron_nodes SET last_seen = last_seen")
            .execute(&mut *tx)
            .await
            .unwrap();
        tokio::time::sleep(hold).await;
        tx.rollback().await.unwrap();
        pool.close().await;
    }
}

/// The job script: registers its pid with its start time, notes any other live process of the
/// same job, records its start, heartbeats and end. A pid counts only with the start time it was
/// registered with: pids are reused (`pid_max` is 32768 here), and a campaign of soaks once
/// reported dozens of "overlaps" that were other processes given an old run's pid.
fn write_job_script(dir: &Path) -> PathBuf {
    let script = dir.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "d={d}; j=$SQLCRON_JOB\n\
             started() {{ sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f1,20; }}\n\
             echo \"$$ $(started $$ | cut -d' ' -f2)\" >> $d/$j.pids\n\
             while read -r p t; do\n\
               [ $p = $$ ] && continue\n\
               [ -e /proc/$p ] || continue\n\
               s=$(started $p)\n\
               if [ -n \"$s\" ] && [ \"$s\" != \"Z $t\" ] && [ \"${{s#* }}\" = \"$t\" ]; then echo \"overlap $j $$ $p\" >> $d/records; fi\n\
             done < $d/$j.pids\n\
             echo \"start $j $SQLCRON_SLOT $SQLCRON_ATTEMPT $SQLCRON_FENCING_TOKEN $$\" >> $d/records\n\
             i=0; while [ $i -lt $1 ]; do sleep 1; i=$((i+1)); echo \"beat $j $SQLCRON_SLOT $$\" >> $d/records; done\n\
             sleep 0.1\n\
             echo \"end $j $SQLCRON_SLOT $SQLCRON_ATTEMPT $SQLCRON_FENCING_TOKEN $$\" >> $d/records\n",
            d = dir.display()
        ),
    )
    .unwrap();
    script
}

fn node_config(url: &str, name: &str, script: &Path, calendar: &str) -> String {
    let run_as = crate::util::default_user();
    let mut text = format!(
        "[database]\nurl = \"{url}\"\n[node]\nname = \"{name}\"\ntags = [\"soak\"]\n[daemon]\n{run_as}\npoll_interval = \"500ms\"\n\
         lease = \"{LEASE_SECS}s\"\nshutdown_grace = \"10s\"\n[defaults]\nkill_grace = \"1s\"\n{calendar}\n\
         [cluster]\nmax_starts_per_second = 4\nburst = 2\n"
    );
    // Placement on most jobs (matched by every node), so the filtered claim and peek are what
    // the faults hit; one job has none.
    let short = short_jobs();
    for (i, job) in short.iter().enumerate() {
        let on = match i % 3 {
            0 => "on = { nodes = [\"*\"] }\n",
            1 => "on = { tags = [\"soak\"] }\n",
            _ => "",
        };
        let skip = if *job == QUIET_JOB {
            "skip_on = [\"soak-quiet\"]\n"
        } else {
            ""
        };
        text.push_str(&format!(
            "[[job]]\nname = \"{job}\"\nschedule = \"*/2 * * * * *\"\nrerun_lost = false\n\
             {on}{skip}command = \"sh {} 0\"\n",
            script.display()
        ));
    }
    text.push_str(&format!(
        "[[job]]\nname = \"{CHAINED}\"\nafter = [\"{}\"]\nrerun_lost = false\n\
         command = \"sh {} 0\"\n",
        short[0],
        script.display()
    ));
    text.push_str(&format!(
        "[[job]]\nname = \"{LONG}\"\nschedule = \"*/10 * * * * *\"\nretries = 2\n\
         on = {{ tags = [\"soak\"] }}\ncommand = \"setsid sh {} 4 & wait $!\"\n",
        script.display()
    ));
    text
}

/// One node: its proxy (servers only), its configuration, its process.
struct Node {
    name: String,
    config: String,
    proxy: Option<Proxy>,
    process: Option<DaemonProcess>,
    starts: usize,
}

impl Node {
    fn start(&mut self, dir: &Path) {
        self.starts += 1;
        let file = format!("{}-{}", self.name, self.starts);
        self.process = Some(DaemonProcess::start(dir, &file, &self.config));
    }

    fn process(&self) -> &DaemonProcess {
        self.process.as_ref().unwrap()
    }
}

/// What the soak saw, for the verdict and the benchmarks note.
#[derive(Debug, Default)]
struct Tally {
    faults: BTreeMap<&'static str, u32>,
    runs_started: usize,
    runs_completed: usize,
    overlaps: Vec<String>,
    doubles: Vec<String>,
    unaccounted: Vec<String>,
    /// Slots not yet run when the soak ended, which the job's row still owes (its `slot` has not
    /// moved past them): late, not lost. A machine too busy to keep up shows here.
    owed: Vec<String>,
    /// Runs of the quiet job inside a stretch its calendar skips.
    in_calendar: Vec<String>,
    left_running: Vec<String>,
    exits: Vec<String>,
}

async fn soak(dialect: Dialect) {
    let secs: u64 = std::env::var("SQLCRON_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed = std::env::var("SQLCRON_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u64>() | 1);
    println!("soak {}: seed {seed}, {secs} s", dialect.name());
    let mut rng = Rng(seed);
    let mut server = Server::start(dialect).await;
    // Under the build's own scratch folder, so that a failed run's records stay where the log
    // says (a clean checkout's `target/tmp/`), not in a /tmp that CI throws away.
    let dir = tempfile::Builder::new()
        .prefix(&format!("soak-{}-", dialect.name()))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let script = write_job_script(dir.path());
    let spans = quiet_spans(chrono::Utc::now().timestamp_millis(), secs);
    let calendar = quiet_calendar(&spans);
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let proxy = match server.address() {
            Some(addr) => Some(Proxy::start(&addr).await),
            None => None,
        };
        let name = format!("n{i}");
        let config = node_config(&server.url(proxy.as_ref()), &name, &script, &calendar);
        nodes.push(Node {
            name,
            config,
            proxy,
            process: None,
            starts: 0,
        });
    }
    for node in &mut nodes {
        node.start(dir.path());
    }
    let store = Store::connect(&crate::util::db_url(&server.url(None)), 2).unwrap();
    eventually(
        Duration::from_secs(30),
        "the jobs to be scheduled",
        || async {
            let jobs = store.jobs().await.ok()?;
            (jobs.len() == short_jobs().len() + 2 && jobs.iter().all(|j| j.next_exec.is_some()))
                .then_some(())
        },
    )
    .await;
    let begin = store.now().await.unwrap();
    let lease = Duration::from_secs(LEASE_SECS);
    let mut tally = Tally::default();
    let mut restarted = false;
    let phase = Instant::now();
    while phase.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_millis(2000 + rng.below(4000))).await;
        check_alive(&mut nodes, &mut tally);
        let i = rng.below(NODES as u64) as usize;
        let choice = rng.below(if server.address().is_some() { 5 } else { 3 });
        match choice {
            0 => {
                *tally.faults.entry("kill").or_default() += 1;
                if let Some(mut p) = nodes[i].process.take() {
                    p.child.kill().unwrap();
                    p.child.wait().unwrap();
                }
                tokio::time::sleep(Duration::from_millis(rng.below(2000))).await;
                nodes[i].start(dir.path());
            }
            1 => {
                *tally.faults.entry("stop").or_default() += 1;
                nodes[i].process().signal(libc::SIGSTOP);
                tokio::time::sleep(lease * 2).await;
                nodes[i].process().signal(libc::SIGCONT);
            }
            2 if !restarted && phase.elapsed() > Duration::from_secs(secs / 3) => {
                restarted = true;
                *tally.faults.entry(restart_label(dialect)).or_default() += 1;
                server.restart(lease * 2).await;
            }
            2 if dialect == Dialect::Sqlite => {
                *tally.faults.entry("write lock").or_default() += 1;
                server.lock_sqlite(lease * 2).await;
            }
            2 | 3 => {
                *tally.faults.entry("stall").or_default() += 1;
                let proxy = nodes[i].proxy.as_ref().unwrap();
                proxy.stall(true);
                tokio::time::sleep(lease * 2).await;
                proxy.stall(false);
            }
            _ => {
                *tally.faults.entry("reset").or_default() += 1;
                nodes[i].proxy.as_ref().unwrap().reset();
            }
        }
    }
    if !restarted {
        *tally.faults.entry(restart_label(dialect)).or_default() += 1;
        server.restart(lease * 2).await;
    }
    let end = store.now().await.unwrap();
    // Settle: no faults, every node up, long enough for every lost run to be taken over.
    tokio::time::sleep(lease * 4 + Duration::from_secs(10)).await;
    check_alive(&mut nodes, &mut tally);
    for node in &mut nodes {
        if let Some(mut p) = node.process.take() {
            // A daemon that does not exit after SIGTERM is a defect, reported, not a hung test.
            p.signal(libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            let status = loop {
                match p.child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    _ => break None,
                }
            };
            let log = p.log_text();
            match status {
                Some(status) if status.success() => {}
                Some(status) => tally
                    .exits
                    .push(format!("{} stopped with {status:?}", node.name)),
                None => {
                    let stacks = thread_stacks(p.pid());
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    tally.exits.push(format!(
                        "{} had not exited 30 s after SIGTERM (killed); its threads:\n{stacks}\nthe end of its log:\n{}",
                        node.name,
                        log.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
                    ));
                }
            }
            if log.contains("panicked") {
                tally.exits.push(format!("{} panicked:\n{log}", node.name));
            }
        }
    }
    verdict(&store, dir.path(), (begin, end), &spans, &mut tally).await;
    println!(
        "soak {}: faults {:?}; runs started {}, completed {}; overlaps {}, doubles {}, unaccounted {}, owed at the end {}, run in the calendar {}, left running {}, exits {}",
        dialect.name(),
        tally.faults,
        tally.runs_started,
        tally.runs_completed,
        tally.overlaps.len(),
        tally.doubles.len(),
        tally.unaccounted.len(),
        tally.owed.len(),
        tally.in_calendar.len(),
        tally.left_running.len(),
        tally.exits.len()
    );
    let bad = tally.overlaps.len()
        + tally.doubles.len()
        + tally.unaccounted.len()
        + tally.in_calendar.len()
        + tally.left_running.len()
        + tally.exits.len();
    if bad > 0 {
        keep_records(&store, &server, dir.path(), &tally).await;
        let kept = dir.keep();
        panic!(
            "seed {seed}, the daemons' logs, the job records, history.tsv, events.tsv and \
             unaccounted.txt in {}: {tally:#?}",
            kept.display()
        );
    }
    assert!(tally.runs_completed > 0);
    store.close().await;
}

/// Writes what a failed run needs to be understood beside the daemons' logs and the jobs' own
/// records: the whole history and the events as the database holds them, and for each
/// unaccounted slot the history rows around it (the node that last held the row) and what
/// `sqlcron explain` says of it. Also printed, so that CI's log holds it too.
async fn keep_records(store: &Store, server: &Server, dir: &Path, tally: &Tally) {
    let history = store.history(None, 1_000_000).await.unwrap_or_default();
    let mut text = String::from(
        "id\tjob\tslot\tattempt\tnode\ttoken\tstarted\tended\toutcome\texit\tskipped_last\tmessage\n",
    );
    for h in history.iter().rev() {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            h.id,
            h.job,
            h.slot,
            h.attempt,
            h.node.as_deref().unwrap_or("-"),
            h.token.map_or("-".into(), |t| t.to_string()),
            h.started.map_or("-".into(), |t| t.to_string()),
            h.ended.map_or("-".into(), |t| t.to_string()),
            h.outcome,
            h.exit_code.map_or("-".into(), |t| t.to_string()),
            h.skipped_last.map_or("-".into(), |t| t.to_string()),
            h.message
                .as_deref()
                .unwrap_or("")
                .replace(['\n', '\t'], " "),
        ));
    }
    let _ = std::fs::write(dir.join("history.tsv"), text);
    let events = store.events(None, 1_000_000).await.unwrap_or_default();
    let text: String = events
        .iter()
        .rev()
        .map(|e| {
            format!(
                "{}\t{}\t{}\t{:?}\t{}\t{}\t{:?}\n",
                e.id, e.job, e.kind, e.run_id, e.created, e.state, e.node
            )
        })
        .collect();
    let _ = std::fs::write(dir.join("events.tsv"), text);
    let config = dir.join("explain.toml");
    let _ = std::fs::write(
        &config,
        format!("[database]\nurl = \"{}\"\n", server.url(None)),
    );
    let mut report = String::new();
    for line in &tally.unaccounted {
        report.push_str(&format!("== {line}\n"));
        // "JOB slot S: ..." or "JOB run N (slot S): ...".
        let Some(job) = line.split_whitespace().next() else {
            continue;
        };
        let Some(slot) = line
            .split("slot ")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|t| t.parse::<i64>().ok())
        else {
            continue;
        };
        let period = if job == LONG { 10_000 } else { 2_000 };
        for h in history
            .iter()
            .rev()
            .filter(|h| h.job == job && (h.slot - slot).abs() <= 2 * period)
        {
            report.push_str(&format!(
                "   history {} slot {} attempt {} node {} token {:?} outcome {} message {:?}\n",
                h.id,
                h.slot,
                h.attempt,
                h.node.as_deref().unwrap_or("-"),
                h.token,
                h.outcome,
                h.message
            ));
        }
        let at = |ms: i64| {
            DateTime::from_timestamp_millis(ms)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let out = std::process::Command::new(crate::util::sqlcron_bin())
            .arg("--config")
            .arg(&config)
            .args([
                "explain",
                job,
                "--from",
                &at(slot - 2 * period),
                "--to",
                &at(slot + 2 * period),
            ])
            .env_remove("SQLCRON_CONFIG")
            .env_remove("SQLCRON_DATABASE_URL")
            .output();
        if let Ok(out) = out {
            for l in String::from_utf8_lossy(&out.stdout)
                .lines()
                .chain(String::from_utf8_lossy(&out.stderr).lines())
            {
                report.push_str(&format!("   explain: {l}\n"));
            }
        }
    }
    println!("{report}");
    let _ = std::fs::write(dir.join("unaccounted.txt"), report);
}

/// Each thread of a process with what it waits in (`/proc/PID/task/*/{comm,wchan}`).
fn thread_stacks(pid: i32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "(gone)".into();
    };
    tasks
        .flatten()
        .map(|t| {
            let read = |f: &str| {
                std::fs::read_to_string(t.path().join(f))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            format!(
                "  {} {} {}",
                t.file_name().to_string_lossy(),
                read("comm"),
                read("wchan")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// SQLite has no server to restart: its restart slot holds the write lock instead.
fn restart_label(dialect: Dialect) -> &'static str {
    if dialect == Dialect::Sqlite {
        "write lock"
    } else {
        "database restart"
    }
}

/// A node whose daemon exited on its own is a defect (it is restarted to go on).
fn check_alive(nodes: &mut [Node], tally: &mut Tally) {
    for node in nodes.iter_mut() {
        let Some(p) = node.process.as_mut() else {
            continue;
        };
        if let Ok(Some(status)) = p.child.try_wait() {
            tally.exits.push(format!(
                "{} exited on its own ({status:?}):\n{}",
                node.name,
                p.log_text()
            ));
        }
    }
}

fn ms(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| t.timestamp_millis())
        .unwrap_or(-1)
}

async fn verdict(
    store: &Store,
    dir: &Path,
    (begin, end): (i64, i64),
    quiet: &[(i64, i64)],
    tally: &mut Tally,
) {
    let short = short_jobs();
    let records = std::fs::read_to_string(dir.join("records")).unwrap_or_default();
    // (job, slot) → completed runs (attempt, token).
    let mut completed: HashMap<(String, i64), Vec<(String, String)>> = HashMap::new();
    for line in records.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["overlap", ..] => tally.overlaps.push(line.to_string()),
            ["start", ..] => tally.runs_started += 1,
            ["end", job, slot, attempt, token, _pid] => {
                tally.runs_completed += 1;
                completed
                    .entry((job.to_string(), ms(slot)))
                    .or_default()
                    .push((attempt.to_string(), token.to_string()));
            }
            _ => {}
        }
    }
    let history: Vec<HistoryRow> = store.history(None, 1_000_000).await.unwrap();
    // Where each row stands now: the slot it waits for (every slot from it on is still owed),
    // and the chained runs made but not yet run.
    let rows = store.jobs().await.unwrap();
    let owes = |job: &str, slot: i64| {
        rows.iter()
            .any(|r| r.name == job && r.slot.is_some_and(|waiting| waiting <= slot))
    };
    for h in &history {
        if h.outcome == "running" {
            tally
                .left_running
                .push(format!("{} slot {} attempt {}", h.job, h.slot, h.attempt));
        }
    }
    let recorded = |job: &str, slot: i64, outcomes: &[&str]| {
        history.iter().any(|h| {
            h.job == job
                && outcomes.contains(&h.outcome.as_str())
                && (h.slot == slot
                    || (h.outcome == "skipped"
                        && h.slot <= slot
                        && slot <= h.skipped_last.unwrap_or(h.slot)))
        })
    };
    for ((job, slot), runs) in &completed {
        if runs.len() > 1 && !(job == LONG && recorded(job, *slot, &["lost"])) {
            tally.doubles.push(format!(
                "{job} slot {slot} completed {} times: {runs:?}",
                runs.len()
            ));
        }
    }
    // Each successful run of the chained job's upstream has its chained run, recorded (a run
    // lost with its node is recorded lost: rerun_lost = false).
    for up in history.iter().filter(|h| {
        h.job == short[0] && h.outcome == "ok" && h.slot > begin + 4_000 && h.slot < end - 15_000
    }) {
        let name = format!("{CHAINED}#after-{}", up.id);
        if rows.iter().any(|r| r.name == name) && !history.iter().any(|h| h.job == name) {
            tally
                .owed
                .push(format!("{name}: made, not yet run (slot {})", up.slot));
        } else if !history
            .iter()
            .any(|h| h.job == name && h.outcome != "running")
        {
            tally.unaccounted.push(format!(
                "{} run {} (slot {}): no chained run recorded",
                short[0], up.id, up.slot
            ));
        }
    }
    // The quiet job never runs inside its calendar's stretches, and what the calendar skipped
    // is recorded as such.
    for (job, slot) in completed.keys().filter(|(j, _)| j == QUIET_JOB) {
        if quiet.iter().any(|(s, e)| (*s..*e).contains(slot)) {
            tally
                .in_calendar
                .push(format!("{job} slot {slot} ran inside its calendar"));
        }
    }
    let calendar_lines = history
        .iter()
        .filter(|h| {
            h.job == QUIET_JOB
                && h.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("calendar: "))
        })
        .count();
    if calendar_lines == 0 && quiet.iter().any(|(s, _)| *s > begin && *s < end - 15_000) {
        tally
            .in_calendar
            .push("no slot was recorded as skipped by the calendar".into());
    }
    // Every slot of the fault phase (a margin at each end) is accounted for: completed by the
    // job's own record, or a decision about it is in the history.
    for (job, period) in short
        .iter()
        .map(|j| (j.as_str(), 2_000))
        .chain([(LONG, 10_000)])
    {
        let mut slot = (begin / period + 2) * period;
        while slot < end - 15_000 {
            let done = completed.contains_key(&(job.to_string(), slot));
            let decided = recorded(
                job,
                slot,
                &["lost", "failed", "timeout", "abandoned", "skipped"],
            );
            if !done && !decided {
                if owes(job, slot) && slot >= end - 60_000 {
                    tally.owed.push(format!("{job} slot {slot}"));
                } else if owes(job, slot) {
                    // Owed for over a minute (the default misfire threshold): the row is stuck.
                    tally.unaccounted.push(format!(
                        "{job} slot {slot}: still owed {} s after it fell due",
                        (end - slot) / 1000
                    ));
                } else {
                    tally
                        .unaccounted
                        .push(format!("{job} slot {slot}: no completed run, no record"));
                }
            }
            slot += period;
        }
    }
}
