//! Runs one command: spawn it in its own process group, stream its output into the log, keep a
//! bounded tail, enforce the timeout, and stop it on request. Knows nothing about the database.
//!
//! Why the process group: a job is often a shell running a pipeline; a timeout or a lost lease
//! must stop all of it, so signals go to the whole group (`killpg`).
//!
//! Started by `clone_spawn`: a child that shares the daemon's memory until its `exec`, which
//! costs the daemon far less than a `fork` of its whole address space, also for a run set up
//! before `exec` (another account, limits, a control group); without pidfds, by the standard
//! library (`posix_spawn`, or `fork` for such a run). What ends a dead daemon's jobs is the unit's control
//! group under systemd, and the reaper elsewhere (see `reaper.rs`): each job's process group is
//! registered with it while the job runs.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::watch;

use crate::exec::child_setup::setup_child;
use crate::exec::run_process::{RunProcess, environment, null_fd, null_stdin};

use crate::exec::output_tail::{OutputTail, SharedTail};

pub use crate::exec::outcome::{RunOutcome, StopRequest};

/// Longest output line written to the log; longer lines are cut (the tail keeps every byte).
const MAX_LOG_LINE: usize = 4096;
/// How long the output pipes may stay open after the main process exited before the rest of
/// its process group is killed.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// What to run.
#[derive(Debug, Clone)]
pub enum Program {
    /// `/bin/sh -c TEXT`, the crontab habit.
    Shell(String),
    /// A program and its arguments, without a shell.
    Argv(Vec<String>),
    /// An HTTP request instead of a process (`model/http_target.rs`, sent by `exec/http.rs`).
    Http(Box<crate::model::http_target::HttpCall>),
}

#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The job's name, for log fields.
    pub job: String,
    pub program: Program,
    pub env: Vec<(String, String)>,
    pub workdir: Option<PathBuf>,
    pub timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Bytes of output kept.
    pub output_tail: usize,
    /// Lines and bytes of output written to the log; the rest is counted, not logged.
    pub log_lines: usize,
    pub log_bytes: usize,
    /// When the reaper kills the process group unless the deadline is refreshed (see
    /// `reaper.rs`); `None`: only when this process dies.
    pub reaper_deadline: Option<Instant>,
    /// The process group, once spawned (0 before and after): the lease holder refreshes the
    /// reaper's deadline through it.
    pub pgid: Arc<AtomicI32>,
    /// Give the command this process's stdin, stdout and stderr (`sqlcron lock`) instead of
    /// /dev/null and captured, logged output (jobs).
    pub inherit_io: bool,
    /// Start from an empty environment, so the command gets `env` and nothing else (jobs); else
    /// this process's environment less `crate::model::job::SECRET_VARS`, plus `env` (`sqlcron lock`).
    pub clear_env: bool,
    /// The account to switch to (uid, gid, supplementary groups) before `exec`; `None`: this
    /// process's own.
    pub account: Option<crate::exec::account::Account>,
    /// Resource limits of the run.
    pub limits: crate::model::job::Limits,
    /// Where the output's tail is kept, when the caller reads it while the run runs (made
    /// with `output_tail` bytes); `None`: the runner keeps its own.
    pub live: Option<SharedTail>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot start {what} for job \"{job}\": {source}")]
pub struct SpawnError {
    pub job: String,
    pub what: String,
    #[source]
    pub source: std::io::Error,
}

/// How much of a run's output may still go to the log, and how much was left out.
#[derive(Debug)]
struct LogBudget {
    lines_left: usize,
    bytes_left: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl LogBudget {
    /// Whether a line of `len` bytes may be logged; counts it as dropped if not.
    fn take(&mut self, len: usize) -> bool {
        if self.dropped_lines == 0 && self.lines_left > 0 && len <= self.bytes_left {
            self.lines_left -= 1;
            self.bytes_left -= len;
            true
        } else {
            self.dropped_lines += 1;
            self.dropped_bytes += len as u64;
            false
        }
    }

    fn note(&self) -> Option<String> {
        (self.dropped_lines > 0).then(|| {
            format!(
                "{} line(s), {} byte(s) of output not logged (output_log_lines / output_log_bytes)",
                self.dropped_lines, self.dropped_bytes
            )
        })
    }
}

fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: killpg has no memory-safety preconditions; a stale group id fails with ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Runs the command to its end. `stop` asks for an early stop.
///
/// A shell command that needs no shell (`exec/plain_command.rs`) is started directly; if that
/// program cannot be started, nothing ran, and the text goes through `/bin/sh -c` after all,
/// so that what is recorded (the shell's message, 127 or 126) is what the shell says.
pub async fn run(
    spec: &RunSpec,
    stop: watch::Receiver<StopRequest>,
) -> Result<RunOutcome, SpawnError> {
    if let Program::Shell(text) = &spec.program
        && let Some(words) = crate::exec::plain_command::plain_words(text)
    {
        // What `/bin/sh` would have exported: the directory the program starts in, as
        // `getcwd` names it.
        let pwd = match &spec.workdir {
            Some(dir) => std::fs::canonicalize(dir).ok(),
            None => daemon_dir(),
        };
        match run_program(spec, &Program::Argv(words), pwd, stop.clone()).await {
            Err(e) => {
                tracing::debug!(job = %spec.job, error = %e, "started through the shell after all");
            }
            done => return done,
        }
    }
    run_program(spec, &spec.program, None, stop).await
}

/// The daemon's own directory, canonical, looked up once: the daemon never changes it, and
/// looking it up for every run (`getcwd` and a `readlink` per component) was about 1.5 % of
/// the daemon's CPU in a burst. Should the directory be renamed under a running daemon, `PWD`
/// keeps its old name until the daemon restarts (the service runs in `/`, which is not).
fn daemon_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        std::env::current_dir()
            .ok()
            .and_then(|d| std::fs::canonicalize(d).ok())
    })
    .clone()
}

/// Runs `program` with `spec`; `pwd`: set `PWD` (a command started without its shell).
async fn run_program(
    spec: &RunSpec,
    program: &Program,
    pwd: Option<PathBuf>,
    mut stop: watch::Receiver<StopRequest>,
) -> Result<RunOutcome, SpawnError> {
    let (mut cmd, what) = match program {
        Program::Http(call) => {
            let stop = stop.clone();
            return Ok(crate::exec::http::call(call, spec.timeout, spec.output_tail, stop).await);
        }
        Program::Shell(text) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(text);
            (c, "/bin/sh".to_string())
        }
        Program::Argv(argv) => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            (c, argv[0].clone())
        }
    };
    cmd.process_group(0).kill_on_drop(false);
    if spec.clear_env {
        cmd.env_clear();
    } else {
        for k in crate::model::job::SECRET_VARS {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    if let Some(pwd) = pwd {
        cmd.env("PWD", pwd);
    }
    // Set last: a job's own `env` cannot choose which run its processes belong to.
    let run_id = crate::exec::orphans::begin();
    cmd.env(crate::exec::orphans::VAR, &run_id);
    let started = Started(&run_id);
    let spawn_err = |what: &str, source| SpawnError {
        job: spec.job.clone(),
        what: what.to_string(),
        source,
    };
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    // Without an account switch the standard library enters the directory; with one, the child
    // enters it only after dropping to the job's account (`setup_child`), so a directory the job's
    // user cannot enter is refused rather than entered with the daemon's rights.
    let switch = spec.account.clone();
    let workdir = match (&spec.workdir, &switch) {
        (Some(dir), None) => {
            cmd.current_dir(dir);
            None
        }
        (Some(dir), Some(_)) => Some(
            std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
                .map_err(|_| spawn_err(&what, invalid("workdir holds a NUL byte".into())))?,
        ),
        (None, _) => None,
    };
    let rlimits =
        crate::exec::limits::rlimits(&spec.limits).map_err(|m| spawn_err(&what, invalid(m)))?;
    let mut notes = Vec::new();
    // Every run has a control group of its own where the daemon has a delegated subtree: killed
    // whole at the run's end, whatever left the process group.
    let cgroup = match crate::exec::limits::cgroup_base() {
        Ok(base) => Some(
            crate::exec::limits::RunCgroup::create(base, &spec.job, &spec.limits)
                .map_err(|m| spawn_err(&what, invalid(m)))?,
        ),
        Err(why) => {
            if spec.limits.needs_cgroup() {
                notes.push(format!("cgroup limits not applied: {why}"));
            }
            None
        }
    };
    // A run forked for its account, limits or control group keeps its own orphans: its main
    // process is a child subreaper (`setup_child`), so nothing it starts reaches the daemon
    // before it ends (see `orphans.rs`).
    let keeps_orphans = switch.is_some() || !rlimits.is_empty() || cgroup.is_some();
    // Where `fs.suid_dumpable` is 1, a process switched to the job's account could be traced
    // by that account between its `setuid` and its `exec`, while it shares the daemon's
    // memory: such a run is forked, as before.
    let shared = crate::exec::clone_spawn::available()
        && (switch.is_none() || !crate::exec::clone_spawn::dumpable_after_setuid());
    let mut child = if shared {
        // Started by a child that shares the daemon's memory until its `exec` (no `fork`; and
        // less to do per run than the standard library's `posix_spawn`, docs/benchmarks.md).
        let procs = cgroup.as_ref().map(|c| c.procs.clone());
        let std = cmd.as_std();
        let workdir = match (workdir, std.get_current_dir()) {
            (Some(w), _) => Some(w),
            (None, Some(dir)) => Some(
                std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
                    .map_err(|_| spawn_err(&what, invalid("workdir holds a NUL byte".into())))?,
            ),
            (None, None) => None,
        };
        let setup = || {
            setup_child(
                keeps_orphans,
                procs.as_ref(),
                &rlimits,
                switch.as_ref(),
                workdir.as_ref(),
            )
        };
        let plan = crate::exec::clone_spawn::Plan {
            program: std.get_program(),
            args: std.get_args().collect(),
            env: environment(std, spec.clear_env),
            piped: !spec.inherit_io,
            null: null_fd(),
            setup: &setup,
        };
        RunProcess::Cloned(
            crate::exec::clone_spawn::spawn(&plan).map_err(|source| spawn_err(&what, source))?,
        )
    } else {
        if spec.inherit_io {
            cmd.stdin(Stdio::inherit())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit());
        } else {
            cmd.stdin(null_stdin().unwrap_or_else(Stdio::null))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        if keeps_orphans {
            let procs = cgroup.as_ref().map(|c| c.procs.clone());
            // SAFETY: the closure runs in the child between fork and exec and only makes
            // async-signal-safe system calls on data prepared before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    setup_child(
                        true,
                        procs.as_ref(),
                        &rlimits,
                        switch.as_ref(),
                        workdir.as_ref(),
                    )
                });
            }
        }
        RunProcess::Std(cmd.spawn().map_err(|source| spawn_err(&what, source))?)
    };
    // The command holds the parent's copy of the run's stdin (`null_stdin`): closed now, not at
    // the run's end.
    drop(cmd);
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    crate::exec::orphans::spawned(&run_id, pgid, keeps_orphans);
    crate::exec::reaper::register(pgid, spec.reaper_deadline, &run_id);
    spec.pgid.store(pgid, Ordering::SeqCst);
    tracing::debug!(job = %spec.job, pgid, "job process started");
    // The daemon's tail when it follows the run's output as it comes (`spec.live`).
    let tail = spec
        .live
        .clone()
        .unwrap_or_else(|| OutputTail::shared(spec.output_tail));
    let budget = Arc::new(Mutex::new(LogBudget {
        lines_left: spec.log_lines,
        bytes_left: spec.log_bytes,
        dropped_lines: 0,
        dropped_bytes: 0,
    }));
    let sink = |stream| Sink {
        job: spec.job.clone(),
        stream,
        tail: tail.clone(),
        budget: budget.clone(),
    };
    let mut readers = tokio::task::JoinSet::new();
    let (out, err) = child.output();
    if let Some(out) = out {
        readers.spawn(pump(out, sink("stdout")));
    }
    if let Some(err) = err {
        readers.spawn(pump(err, sink("stderr")));
    }

    let mut timed_out = false;
    let mut stopped = false;
    let deadline = tokio::time::sleep(spec.timeout);
    tokio::pin!(deadline);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = &mut deadline, if !timed_out && !stopped => {
                timed_out = true;
                tracing::warn!(job = %spec.job, timeout = %humantime::format_duration(spec.timeout), "job timed out; stopping its process group");
                break terminate(&mut child, pgid, spec.kill_grace).await;
            }
            changed = stop.changed(), if !stopped => {
                if changed.is_err() || *stop.borrow() == StopRequest::Kill {
                    stopped = true;
                    break terminate(&mut child, pgid, spec.kill_grace).await;
                }
            }
        }
    };
    // Let the pipes drain; whatever of the group still holds them open is killed.
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        signal_group(pgid, libc::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while readers.join_next().await.is_some() {}
        })
        .await;
        readers.abort_all();
    }
    // The run ends with its main process: what it left in its group (`cmd &`) is killed, then
    // what left the group (see `orphans.rs`).
    signal_group(pgid, libc::SIGKILL);
    // Done with the group: from here on its id may be reused by an unrelated process.
    spec.pgid.store(0, Ordering::SeqCst);
    crate::exec::reaper::unregister(pgid);
    started.end().await;
    let output = tail.lock().unwrap_or_else(|e| e.into_inner()).text();
    let (exit_code, signal) = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            (s.code(), s.signal())
        }
        Err(e) => {
            tracing::error!(job = %spec.job, error = %e, "waiting for the job's process failed");
            (None, None)
        }
    };
    let oom_killed = cgroup.as_ref().is_some_and(|c| c.oom_killed());
    // Removing the group may wait for what it still holds to die (up to half a second): not on
    // the daemon's one thread.
    if let Some(group) = cgroup {
        let _ = tokio::task::spawn_blocking(move || drop(group)).await;
    }
    if let Some(reason) = crate::exec::limits::signal_reason(&spec.limits, signal, oom_killed) {
        tracing::warn!(job = %spec.job, "{reason}");
        notes.insert(0, reason);
    }
    let log_note = budget.lock().unwrap_or_else(|e| e.into_inner()).note();
    if let Some(note) = log_note {
        tracing::warn!(target: "sqlcron::model::job", job = %spec.job, "{note}");
        notes.push(note);
    }
    Ok(RunOutcome {
        exit_code,
        signal,
        timed_out,
        stopped,
        output,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        http_ok: None,
    })
}

/// A run registered with `orphans`: ended there when the run is done, or when it could not be
/// spawned (dropped).
struct Started<'a>(&'a str);

impl Started<'_> {
    async fn end(self) {
        // Dropped after: forgetting an ended run changes nothing.
        crate::exec::orphans::end(self.0).await;
    }
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        crate::exec::orphans::forget(self.0);
    }
}

/// SIGTERM to the group, SIGKILL after the grace, and the main process's status.
async fn terminate(
    child: &mut RunProcess,
    pgid: i32,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    signal_group(pgid, libc::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => {
            // The main process is gone; make sure the rest of the group is too.
            signal_group(pgid, libc::SIGKILL);
            status
        }
        Err(_) => {
            signal_group(pgid, libc::SIGKILL);
            child.wait().await
        }
    }
}

/// Where one output stream goes: the log (within the run's budget) and the tail.
struct Sink {
    job: String,
    stream: &'static str,
    tail: SharedTail,
    budget: Arc<Mutex<LogBudget>>,
}

impl Sink {
    fn line(&self, line: &[u8], read_len: usize, cut: bool) {
        let allowed = self
            .budget
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(read_len);
        if !allowed {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        let (job, stream) = (&self.job, self.stream);
        if cut {
            tracing::info!(target: "sqlcron::model::job", job = %job, stream, "{text} [line cut]");
        } else {
            tracing::info!(target: "sqlcron::model::job", job = %job, stream, "{text}");
        }
    }
}

/// Reads one output stream in chunks (never a whole line into memory: a job may print
/// gigabytes without a newline), logs it line by line within the budget, and feeds the tail.
async fn pump(mut stream: impl AsyncRead + Unpin, sink: Sink) {
    // Read into spare capacity, never zeroed: most runs print nothing, and zeroing two buffers
    // of 16 KiB per run was about 5 % of the daemon's CPU in a burst (docs/benchmarks.md).
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    // Bytes of the current line as read (it may be longer than what is kept of it).
    let mut read_len = 0usize;
    loop {
        buf.clear();
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let chunk = &buf[..];
        sink.tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(chunk);
        for &b in chunk {
            if b == b'\n' {
                sink.line(&line, read_len + 1, read_len > MAX_LOG_LINE);
                line.clear();
                read_len = 0;
            } else {
                read_len += 1;
                if line.len() < MAX_LOG_LINE {
                    line.push(b);
                }
            }
        }
    }
    if read_len > 0 {
        sink.line(&line, read_len, read_len > MAX_LOG_LINE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cmd: &str) -> RunSpec {
        RunSpec {
            job: "t".into(),
            program: Program::Shell(cmd.into()),
            env: vec![("SQLCRON_JOB".into(), "t".into())],
            workdir: None,
            timeout: Duration::from_secs(30),
            kill_grace: Duration::from_secs(2),
            output_tail: 64,
            log_lines: 1000,
            log_bytes: 1 << 20,
            reaper_deadline: None,
            pgid: Default::default(),
            inherit_io: false,
            clear_env: true,
            account: None,
            limits: Default::default(),
            live: None,
        }
    }

    fn no_stop() -> watch::Receiver<StopRequest> {
        let (tx, rx) = watch::channel(StopRequest::None);
        std::mem::forget(tx);
        rx
    }

    #[tokio::test]
    async fn exit_code_env_and_output() {
        let out = run(&spec("echo \"hi $SQLCRON_JOB\"; exit 3"), no_stop())
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.output, "hi t\n");
        assert!(!out.success());
        let out = run(&spec("true"), no_stop()).await.unwrap();
        assert!(out.success());
    }

    /// A script that prints the name of the process that started it.
    fn parent_teller(dir: &std::path::Path) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("parent.sh");
        std::fs::write(&path, "#!/bin/sh\ncat /proc/$PPID/comm\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    #[tokio::test]
    async fn a_command_that_needs_no_shell_is_started_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let script = parent_teller(dir.path());
        let direct = run(&spec(&format!("{script} plain-arg")), no_stop())
            .await
            .unwrap();
        assert!(direct.success());
        assert_ne!(direct.output, "sh\n", "started by a shell");
        // The environment is the shell's: `PWD` as `/bin/sh` exports it.
        let mut s = spec("/usr/bin/env");
        s.workdir = Some(dir.path().to_path_buf());
        s.output_tail = 4096;
        let env = run(&s, no_stop()).await.unwrap();
        s.program = Program::Shell("/usr/bin/env; true".into());
        let shell_env = run(&s, no_stop()).await.unwrap();
        // Each run has its own id.
        let lines = |o: &str| -> Vec<String> {
            o.lines()
                .filter(|l| !l.starts_with("SQLCRON_RUN_ID="))
                .map(str::to_string)
                .collect()
        };
        let mut a = lines(&env.output);
        let mut b = lines(&shell_env.output);
        a.sort();
        b.sort();
        assert_eq!(a, b);
        // Shell syntax keeps the shell.
        let shell = run(&spec(&format!("{script}; true")), no_stop())
            .await
            .unwrap();
        assert_eq!(shell.output, "sh\n");
    }

    #[tokio::test]
    async fn a_plain_command_that_cannot_start_is_the_shells_to_report() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // Not found: the shell's message and 127.
        let missing = dir.path().join("missing");
        let out = run(&spec(&missing.display().to_string()), no_stop())
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(127));
        assert!(out.output.contains("not found"), "{}", out.output);
        // Not executable: 126.
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "echo never\n").unwrap();
        let out = run(&spec(&plain.display().to_string()), no_stop())
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(126), "{}", out.output);
        // A script without `#!`: the shell runs it, as it always did.
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = run(&spec(&plain.display().to_string()), no_stop())
            .await
            .unwrap();
        assert!(out.success(), "{}", out.output);
        assert_eq!(out.output, "never\n");
    }

    #[tokio::test]
    async fn tail_is_bounded() {
        let out = run(
            &spec("head -c 10000000 /dev/zero | tr '\\0' x; echo END"),
            no_stop(),
        )
        .await
        .unwrap();
        assert_eq!(out.output.len(), 64);
        assert!(out.output.ends_with("xxEND\n"));
    }

    #[tokio::test]
    async fn log_is_bounded_and_says_how_much_it_left_out() {
        let mut s = spec("yes | head -n 100000");
        s.log_lines = 10;
        let out = run(&s, no_stop()).await.unwrap();
        assert!(out.success());
        let note = out.note.expect("a note on what was left out");
        assert!(note.starts_with("99990 line(s), 199980 byte(s)"), "{note}");
        let mut s = spec("head -c 5000 /dev/zero | tr '\\0' x; echo; echo more");
        s.log_bytes = 100;
        let out = run(&s, no_stop()).await.unwrap();
        assert!(out.note.unwrap().starts_with("2 line(s), 5006 byte(s)"));
        let out = run(&spec("echo one; echo two"), no_stop()).await.unwrap();
        assert_eq!(out.note, None);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut s = spec(&format!(
            "sleep 300 & echo $! > {}; wait",
            pidfile.display()
        ));
        s.timeout = Duration::from_millis(300);
        let out = run(&s, no_stop()).await.unwrap();
        assert!(out.timed_out);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background sleep was in the group: it dies (signals are delivered
        // asynchronously, so poll with a deadline; a zombie waiting for its reaper counts as dead).
        let alive = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
            matches!(state, Some(s) if s != 'Z' && s != 'X')
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let alive = alive();
        assert!(!alive, "grandchild {pid} survived");
    }

    #[tokio::test]
    async fn stop_request_terminates() {
        let (tx, rx) = watch::channel(StopRequest::None);
        let s = spec("sleep 300");
        let handle = tokio::spawn(async move { run(&s, rx).await });
        tx.send(StopRequest::Kill).unwrap();
        let out = handle.await.unwrap().unwrap();
        assert!(out.stopped);
        assert_eq!(out.signal, Some(libc::SIGTERM));
    }

    #[tokio::test]
    async fn missing_program_is_a_spawn_error() {
        let mut s = spec("");
        s.program = Program::Argv(vec!["/nonexistent/prog".into()]);
        let e = run(&s, no_stop()).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot start /nonexistent/prog for job \"t\"")
        );
    }

    /// A run with limits (or another account, or a control group) is set up before `exec` and
    /// started by `clone_spawn`: the same exit code, environment, output, working directory,
    /// program lookup and errors as a run started by the standard library.
    #[tokio::test]
    async fn a_run_set_up_before_exec_is_like_any_other() {
        use std::os::unix::fs::PermissionsExt;
        assert!(crate::exec::clone_spawn::available());
        let limited = |cmd: &str| {
            let mut s = spec(cmd);
            s.limits.nofile = Some(256);
            s.output_tail = 4096;
            s
        };
        let out = run(
            &limited("echo \"hi $SQLCRON_JOB\"; ulimit -n; exit 3"),
            no_stop(),
        )
        .await
        .unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.output, "hi t\n256\n");
        // Its own process group, led by its main process.
        let out = run(&limited("ps -o pid=,pgid= -p $$"), no_stop())
            .await
            .unwrap();
        let ids: Vec<&str> = out.output.split_whitespace().collect();
        assert_eq!(ids.len(), 2, "{}", out.output);
        assert_eq!(ids[0], ids[1]);
        // SIGPIPE is the default again (the daemon ignores it): `yes` ends quietly.
        let out = run(&limited("yes | head -n 1; echo done"), no_stop())
            .await
            .unwrap();
        assert_eq!(out.output, "y\ndone\n");
        // The working directory, entered by the child.
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let mut s = limited("pwd");
        s.workdir = Some(dir.clone());
        assert_eq!(
            run(&s, no_stop()).await.unwrap().output,
            format!("{}\n", dir.display())
        );
        // A directory that is not there: the run cannot start, and says why.
        s.workdir = Some(dir.join("gone"));
        s.program = Program::Argv(vec!["/bin/true".into()]);
        let e = run(&s, no_stop()).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound, "{e}");
        // A bare name is looked for on the run's own PATH.
        let tool = dir.join("hello-tool");
        std::fs::write(&tool, "#!/bin/sh\necho from the path\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = limited("");
        s.program = Program::Argv(vec!["hello-tool".into()]);
        s.env
            .push(("PATH".into(), format!("/nonexistent:{}", dir.display())));
        assert_eq!(run(&s, no_stop()).await.unwrap().output, "from the path\n");
        // Not found, and not executable: the errors `execvp` gives.
        s.program = Program::Argv(vec!["/nonexistent/prog".into()]);
        let e = run(&s, no_stop()).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound, "{e}");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
        s.program = Program::Argv(vec![tool.display().to_string()]);
        let e = run(&s, no_stop()).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        // A plain command that cannot start is the shell's to report, as without limits.
        let out = run(&limited(&tool.display().to_string()), no_stop())
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(126), "{}", out.output);
        // A directory of PATH where the file may not be run is passed over for a later one;
        // with none later, the error is "permission denied", not "not found".
        let other = tempfile::tempdir().unwrap();
        let runnable = other.path().join("hello-tool");
        std::fs::write(&runnable, "#!/bin/sh\necho the later one\n").unwrap();
        std::fs::set_permissions(&runnable, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = limited("");
        s.program = Program::Argv(vec!["hello-tool".into()]);
        s.env.push((
            "PATH".into(),
            format!("{}:{}", dir.display(), other.path().display()),
        ));
        assert_eq!(run(&s, no_stop()).await.unwrap().output, "the later one\n");
        s.env.pop();
        s.env
            .push(("PATH".into(), format!("{}:/nonexistent", dir.display())));
        let e = run(&s, no_stop()).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        // A file without `#!` that may be run: the shell runs it, as `execvp` has it.
        let script = dir.join("no-shebang");
        std::fs::write(&script, "echo \"shell ran $0 with $1\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        s.program = Program::Argv(vec![script.display().to_string(), "an-arg".into()]);
        assert_eq!(
            run(&s, no_stop()).await.unwrap().output,
            format!("shell ran {} with an-arg\n", script.display())
        );
        // The timeout ends its whole group: nothing of it is left.
        let mut s = limited("sleep 30.4242 & sleep 30.4243");
        s.timeout = Duration::from_millis(300);
        let out = run(&s, no_stop()).await.unwrap();
        assert!(out.timed_out);
        let left = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .filter(|c| c.windows(7).any(|w| w == b"30.4242" || w == b"30.4243"))
            .count();
        assert_eq!(left, 0, "the run's processes outlived it");
    }

    /// The environment a run gets: this process's less what is removed, plus what is set; or
    /// only what is set.
    #[test]
    fn the_environment_is_the_daemons_with_the_commands_changes() {
        use std::ffi::OsString;
        let mut cmd = std::process::Command::new("true");
        cmd.env_remove("PATH").env("SQLCRON_TEST_SET", "1");
        let env = environment(&cmd, false);
        let has = |env: &[(OsString, OsString)], k: &str| env.iter().any(|(n, _)| n == k);
        assert!(!has(&env, "PATH"));
        assert!(has(&env, "SQLCRON_TEST_SET"));
        assert_eq!(env.len(), std::env::vars_os().count());
        let mut cmd = std::process::Command::new("true");
        cmd.env_clear().env("ONLY", "this");
        assert_eq!(
            environment(&cmd, true),
            [(OsString::from("ONLY"), OsString::from("this"))]
        );
    }

    /// Under root, a run as another account has that account's ids and groups, and the daemon
    /// keeps its own on every thread: the child that switches shares the daemon's memory until
    /// its `exec`, and nothing of the switch may reach the daemon.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_account_switch_changes_the_run_only() {
        if !crate::exec::account::is_root() {
            return;
        }
        let nobody = crate::exec::account::lookup("nobody", None).unwrap();
        let own_groups = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Groups:"))
            .unwrap()
            .to_string();
        // SAFETY: prctl reads a setting of this process.
        let dumpable = || unsafe { libc::prctl(libc::PR_GET_DUMPABLE) };
        let before = dumpable();
        let mut s = spec("id -u; id -g; id -G");
        s.account = Some(nobody.clone());
        let out = run(&s, no_stop()).await.unwrap();
        // The switch changed the "dumpable" setting of the memory it shared with this
        // process: put back (the daemon keeps it off, against core files of its secrets).
        assert_eq!(dumpable(), before);
        assert!(out.success(), "{}", out.output);
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines[0], nobody.uid.to_string());
        assert_eq!(lines[1], nobody.gid.to_string());
        let groups: Vec<u32> = lines[2]
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect();
        let mut want = nobody.groups.clone();
        want.sort();
        let mut got = groups.clone();
        got.sort();
        got.dedup();
        want.dedup();
        assert_eq!(got, want);
        let ids = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
                .map(str::to_string)
                .collect()
        };
        // SAFETY: as above, and the value is put back below.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
        run(&s, no_stop()).await.unwrap();
        assert_eq!(dumpable(), 0);
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, before as libc::c_ulong) };
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
            assert_eq!(
                ids(&status),
                ["Uid:\t0\t0\t0\t0", "Gid:\t0\t0\t0\t0"],
                "{status}"
            );
            let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
            assert_eq!(groups, own_groups, "{status}");
        }
    }
}
