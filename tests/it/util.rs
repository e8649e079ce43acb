//! Helpers shared by the integration tests: a fresh database per test for each dialect, the
//! built binary, and daemon processes that are ended (by PID) when the test ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlcron::store::{Dialect, Store};

pub const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
pub const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306/mysql";

/// The `sqlcron` binary the tests run: the one this build made, or `$SQLCRON_TEST_BIN` (a copy
/// kept apart, so that long soaks run repeatedly are not disturbed by a rebuild).
pub fn sqlcron_bin() -> PathBuf {
    std::env::var_os("SQLCRON_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sqlcron")))
}

/// Runs the built `sqlcron` binary with arguments and returns its output.
pub fn sqlcron(args: &[&str]) -> Output {
    Command::new(sqlcron_bin())
        .args(args)
        .env_remove("SQLCRON_CONFIG")
        .env_remove("SQLCRON_DATABASE_URL")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .expect("run sqlcron")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn unique_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "sqlcron_t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    )
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDb {
    pub dialect: Dialect,
    pub url: String,
    /// The database's name on its server.
    pub name: String,
    /// Keeps the SQLite file's directory alive.
    _dir: Option<tempfile::TempDir>,
}

async fn admin_exec(admin: &str, sql: &str) -> Result<(), String> {
    let store = Store::connect(&crate::util::db_url(admin), 1).map_err(|e| e.to_string())?;
    let r = store
        .execute_raw(sql)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    store.close().await;
    r
}

impl TestDb {
    /// Creates the database. A server that does not answer fails the test: these tests must run.
    pub async fn new(dialect: Dialect) -> TestDb {
        let name = unique_name();
        match dialect {
            Dialect::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}/sqlcron.db", dir.path().display());
                TestDb {
                    dialect,
                    url,
                    name,
                    _dir: Some(dir),
                }
            }
            Dialect::Postgres => {
                admin_exec(PG_ADMIN, &format!("CREATE DATABASE {name}"))
                    .await
                    .unwrap_or_else(|e| panic!("PostgreSQL at 127.0.0.1:5432 is required (scripts/ensure-databases.sh starts it): {e}"));
                TestDb {
                    dialect,
                    url: format!("postgres://postgres@127.0.0.1:5432/{name}"),
                    name,
                    _dir: None,
                }
            }
            Dialect::Mysql => {
                admin_exec(MY_ADMIN, &format!("CREATE DATABASE {name}"))
                    .await
                    .unwrap_or_else(|e| panic!("MariaDB/MySQL at 127.0.0.1:3306 is required (scripts/ensure-databases.sh starts it): {e}"));
                TestDb {
                    dialect,
                    url: format!("mysql://root@127.0.0.1:3306/{name}"),
                    name,
                    _dir: None,
                }
            }
        }
    }

    /// A migrated store on this database.
    pub async fn store(&self) -> Store {
        let store = Store::connect(&crate::util::db_url(&self.url), 4).unwrap();
        store.migrate().await.unwrap();
        store
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let sql = match self.dialect {
            Dialect::Sqlite => return,
            Dialect::Postgres => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            Dialect::Mysql => format!("DROP DATABASE IF EXISTS {}", self.name),
        };
        let admin = match self.dialect {
            Dialect::Postgres => PG_ADMIN,
            _ => MY_ADMIN,
        };
        // Drop runs outside any runtime: use a short-lived one on its own thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = rt.block_on(admin_exec(admin, &sql));
        })
        .join();
    }
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `sqlcron daemon` process, killed by PID when dropped.
pub struct DaemonProcess {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
}

impl DaemonProcess {
    /// Starts a daemon with a configuration written to `dir/<name>.toml`.
    pub fn start(dir: &Path, name: &str, config: &str) -> DaemonProcess {
        Self::start_with_env(dir, name, config, &[])
    }

    /// The same with more variables in the daemon's environment.
    pub fn start_with_env(
        dir: &Path,
        name: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> DaemonProcess {
        Self::spawn(&sqlcron_bin(), dir, name, config, env, false)
    }

    /// The same with another build of sqlcron (a rolling upgrade's previous release). The log
    /// is appended to: a node restarted under the same name keeps one log.
    pub fn start_binary(bin: &Path, dir: &Path, name: &str, config: &str) -> DaemonProcess {
        Self::spawn(bin, dir, name, config, &[], true)
    }

    fn spawn(
        bin: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        env: &[(&str, &str)],
        append: bool,
    ) -> DaemonProcess {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        let log = dir.join(format!("{name}.log"));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&log)
            .unwrap();
        let child = Command::new(bin)
            .arg("--config")
            .arg(&path)
            .arg("daemon")
            .env_remove("SQLCRON_DATABASE_URL")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            // Not a systemd service, even when the tests run inside one.
            .env_remove("INVOCATION_ID")
            .env("RUST_LOG", "sqlcron=debug")
            // The node's state (the generations of signatures it ran) in the test's own
            // folder, not the host's /var/lib/sqlcron.
            .env("STATE_DIRECTORY", dir)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start sqlcron daemon");
        DaemonProcess {
            child,
            name: name.to_string(),
            log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, signal: i32) {
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.child.wait().unwrap()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A child process of a test, killed (by its PID) and reaped when the test ends however it ends.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The configuration of one test node.
pub fn node_config(url: &str, name: &str, extra: &str) -> String {
    format!(
        "[database]\nurl = \"{url}\"\n[node]\nname = \"{name}\"\n[daemon]\n{}\npoll_interval = \"1s\"\nlease = \"3s\"\nshutdown_grace = \"5s\"\n{extra}\n",
        default_user()
    )
}

/// `default_user = "<the user running the tests>"`: a daemon running as root needs a user for
/// its jobs, and any other daemon may name only itself. Root must also be allowed explicitly
/// (`allowed_users`).
pub fn default_user() -> String {
    let me = sqlcron::exec::account::current().expect("the test user's account");
    if me.uid == 0 {
        format!(
            "default_user = \"{}\"\nallowed_users = [\"{}\"]",
            me.name, me.name
        )
    } else {
        format!("default_user = \"{}\"", me.name)
    }
}

/// A TCP port free on 127.0.0.1 right now, for a throwaway server.
///
/// Ports come from below the kernel's ephemeral range (32768 and up on Linux), so that no
/// outgoing connection of the suite takes one between this check and the server's own bind (a
/// port the kernel handed out by binding port 0 may be picked as another connection's source
/// port a moment later); each is handed out once per test process.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919) % COUNT;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < COUNT, "no free port left below the ephemeral range");
        let port = (FIRST + (start + n) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Whether a process runs (a zombie waiting for its parent counts as ended).
/// Waits for a child to exit, polling with a deadline; panics naming `what` when it does not.
pub async fn wait_exit(
    child: &mut std::process::Child,
    timeout: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
    matches!(state, Some(s) if s != 'Z' && s != 'X')
}

/// Processes whose command line is exactly `argv`.
pub fn pids_with_cmdline(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == want) {
            out.push(pid);
        }
    }
    out
}

/// Makes a job's row due now, serving a slot one second ago (by the database clock), with no
/// attempt started; waits for the row to exist. Returns the slot.
pub async fn make_due_now(store: &Store, job: &str) -> i64 {
    eventually(Duration::from_secs(5), "the job row", || async {
        store.job(job).await.unwrap().map(|_| ())
    })
    .await;
    let now = store.now().await.unwrap();
    let slot = now - 1000;
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET slot = {slot}, next_exec = {slot}, attempt = 0 WHERE name = '{job}'"
        ))
        .await
        .unwrap();
    slot
}

/// The file a test's jobs append a line to at each run (`echo $SQLCRON_JOB $SQLCRON_NODE >>`).
pub struct RunLog(pub PathBuf);

impl RunLog {
    /// `runs.txt` in the test's directory.
    pub fn in_dir(dir: &Path) -> RunLog {
        RunLog(dir.join("runs.txt"))
    }

    /// What has been written so far (nothing before the first run).
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }

    /// How many lines so far are exactly `line` (`"job node"`).
    pub fn count(&self, line: &str) -> usize {
        count_lines(&self.text(), line)
    }
}

/// How many lines of `text` are exactly `line`.
pub fn count_lines(text: &str, line: &str) -> usize {
    text.lines().filter(|l| *l == line).count()
}

/// Gives `path` and everything below it to `user` (`user:user`) when the tests run as root:
/// servers that refuse root (initdb, PgBouncer) or switch to their own account (mariadbd
/// `--user`) must own their files.
pub fn chown_if_root(path: &std::path::Path, user: &str) {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let status = std::process::Command::new("chown")
        .args(["-R", &format!("{user}:{user}")])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "chown {user} {}", path.display());
}

/// A database URL as the store takes it (parsed as `config` parses it).
pub fn db_url(text: &str) -> sqlcron::store::DatabaseUrl {
    sqlcron::store::DatabaseUrl::parse(text).unwrap()
}

/// The first finished run of `job` (any outcome), waiting up to 30 s.
pub async fn first_run(store: &Store, job: &str) -> sqlcron::store::HistoryRow {
    eventually(
        Duration::from_secs(30),
        &format!("a run of {job}"),
        || async {
            store
                .history(Some(job), 10)
                .await
                .unwrap()
                .into_iter()
                .find(|r| r.outcome != "running")
        },
    )
    .await
}

/// The first run of `job` that ended ok, waiting up to 20 s.
pub async fn ran_ok(store: &Store, job: &str) -> sqlcron::store::HistoryRow {
    eventually(
        Duration::from_secs(20),
        &format!("an ok run of {job}"),
        || async {
            store
                .history(Some(job), 10)
                .await
                .unwrap()
                .into_iter()
                .find(|r| r.outcome == "ok")
        },
    )
    .await
}

/// A release after a run that ended `ok` with `output`: slot 61 000, the next run at `next_exec`.
pub fn ok_release(next_exec: i64, output: &str) -> sqlcron::store::Release {
    sqlcron::store::Release {
        slot: 61_000,
        attempts: 0,
        next_exec,
        clear_run_now: false,
        outcome: Some(sqlcron::store::RunResult {
            outcome: sqlcron::model::job::Outcome::Ok,
            exit_code: Some(0),
            signal: None,
            started: 1_000,
            output: output.into(),
            message: None,
        }),
    }
}

/// Claims up to `n` due rows for `node` and records the start of each one's run of `slot`
/// (attempt 0), all of which must succeed: the rows and their runs.
pub async fn claim_and_start(
    store: &Store,
    node: &str,
    n: usize,
    slot: i64,
) -> (Vec<sqlcron::store::JobRow>, Vec<sqlcron::store::RunKey>) {
    let (_, rows) = store.claim(node, n, Duration::from_secs(30)).await.unwrap();
    let keys: Vec<sqlcron::store::RunKey> = rows
        .iter()
        .map(|r| sqlcron::store::RunKey {
            job: r.name.clone(),
            slot,
            attempt: 0,
        })
        .collect();
    let starts: Vec<(i64, i64, &sqlcron::store::RunKey)> = rows
        .iter()
        .zip(&keys)
        .map(|(r, k)| (r.id, r.token, k))
        .collect();
    assert_eq!(
        store.start_runs(node, &starts).await.unwrap(),
        vec![true; rows.len()]
    );
    (rows, keys)
}

/// One thread of a process held in a ptrace stop while the process's other threads run on (a
/// thread starved of CPU, to its process); it goes on when this is dropped.
pub struct StoppedThread {
    release: Option<std::sync::mpsc::Sender<()>>,
    tracer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for StoppedThread {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(t) = self.tracer.take() {
            let _ = t.join();
        }
    }
}

/// Stops the thread of `pid` named `name` (`/proc/PID/task/*/comm`). Every ptrace call on it
/// comes from one thread of the test, as ptrace wants.
pub fn stop_thread(pid: i32, name: &str) -> StoppedThread {
    let tid: i32 = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .and_then(|t| t.file_name().to_string_lossy().parse().ok())
        .unwrap_or_else(|| panic!("process {pid} has no thread named {name}"));
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (stopped, is_stopped) = std::sync::mpsc::channel::<Result<(), String>>();
    let tracer = std::thread::spawn(move || {
        // SAFETY: ptrace and waitpid on a thread of a process the test started; no memory of
        // ours is handed over.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
                let _ = stopped.send(Err(std::io::Error::last_os_error().to_string()));
                return;
            }
            libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
            let mut status = 0;
            libc::waitpid(tid, &mut status, libc::__WALL);
            let _ = stopped.send(Ok(()));
            let _ = released.recv();
            libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        }
    });
    is_stopped
        .recv()
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot trace thread {tid}: {e}"));
    StoppedThread {
        release: Some(release),
        tracer: Some(tracer),
    }
}
