//! The job reaper: what ends a dead or frozen daemon's jobs, in a process of its own.
//!
//! A daemon killed with SIGKILL (or by the OOM killer) must not leave its jobs running while
//! another node reruns their slots, and neither must a daemon that is *stopped* (SIGSTOP, a
//! stalled VM thread, a debugger): its event loop cannot enforce anything then. So every daemon,
//! under systemd too, and every `sqlcron lock` / `sqlcron sem`, starts one small helper,
//! `sqlcron __reaper`, in a process group of its own, reading a pipe whose only writer is its
//! parent. The parent writes `+PGID DEADLINE RUN` when a job starts (DEADLINE `-` for none, RUN
//! the run's `SQLCRON_RUN_ID`), `~PGID DEADLINE` each time the job's lease is extended, and `-PGID`
//! when the job's process group is done. DEADLINE is a
//! `CLOCK_MONOTONIC` instant in milliseconds (the same clock in both processes): the end of the
//! claim's trust window plus a tenth of the lease, before the lease itself ends. A job whose
//! deadline passes without a refresh is killed with SIGKILL (a job with `on_lease_lost =
//! "ignore"` is registered without a deadline). When the parent dies, the kernel closes the
//! pipe; the reaper reads end-of-file, kills every process group still registered, and exits.
//! With each group it kills every process on the host that carries the run's id (one that left
//! the group with `setsid`, see `orphans.rs`), and at end-of-file every process carrying any of
//! the daemon's run ids.
//!
//! The one case no process on the host can cover is the whole host frozen (a suspended VM):
//! nothing runs there, the reaper included. When it wakes, the reaper kills the expired groups
//! first thing, but another node may have started the rerun meanwhile. For that case the job
//! gets `SQLCRON_FENCING_TOKEN`: storage that rejects writes carrying an older token than it has
//! seen keeps the stale run from doing harm.
//!
//! Why not `PR_SET_PDEATHSIG` on each job: it needs a hook between `fork` and `exec`, which
//! rules out `posix_spawn`; forking the daemon for every job cost about a quarter of the burst
//! start rate. It also reaches only the direct child, where the reaper ends the whole process
//! group (a shell and its pipeline). What it does not cover: a job's process that both leaves
//! its process group and clears its environment (under systemd the unit's control group ends
//! it), the moment between a job's spawn and its registration (microseconds, unless the
//! machine pauses the daemon's thread right there), and the daemon dying
//! while its reaper is dead. The reaper ignores the terminal and termination signals; if it is
//! killed anyway, the daemon starts a new one at the next job start or end and tells it every
//! group still registered.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The hidden subcommand the reaper runs as.
pub const SUBCOMMAND: &str = "__reaper";

/// One registered process group: its deadline (monotonic milliseconds) and its run's id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    deadline: Option<u64>,
    run: String,
}

/// The daemon's side: the running reaper and what it was told.
struct Link {
    reaper: Option<(Child, ChildStdin)>,
    /// Process groups registered and not yet unregistered, with their deadline and run id: a new
    /// reaper is told them again.
    groups: HashMap<i32, Group>,
}

static LINK: OnceLock<Mutex<Link>> = OnceLock::new();

fn spawn() -> std::io::Result<(Child, ChildStdin)> {
    // `/proc/self/exe` is this very binary, even if the file was replaced by an upgrade since.
    // An empty environment: the daemon's may hold the database password (`PGPASSWORD`, a
    // URL), and a job running as the daemon's user can read a same-user process's
    // `/proc/PID/environ` unless it is non-dumpable, which the reaper becomes only once it
    // runs (`serve`); the reaper needs no variable.
    let mut child = Command::new("/proc/self/exe")
        .arg0("sqlcron")
        .arg(SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()?;
    // Not an orphan of a run, for the daemon's sweeps.
    crate::exec::orphans::set_reaper(child.id() as i32);
    // The pipe is created close-on-exec: jobs do not inherit it, so only the daemon's death
    // (or exit) closes it.
    let pipe = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no pipe to the reaper"))?;
    Ok((child, pipe))
}

/// Starts the reaper for this process. Later calls do nothing. Returns the reaper's PID.
pub fn start() -> std::io::Result<u32> {
    if let Some(link) = LINK.get() {
        let link = link.lock().unwrap_or_else(|e| e.into_inner());
        return Ok(link.reaper.as_ref().map(|(c, _)| c.id()).unwrap_or(0));
    }
    let (child, pipe) = spawn()?;
    let pid = child.id();
    let _ = LINK.set(Mutex::new(Link {
        reaper: Some((child, pipe)),
        groups: HashMap::new(),
    }));
    Ok(pid)
}

/// At a clean stop, once no job is left: the reaper is told to end (its pipe closed) and waited
/// for, up to 2 s, so that it is gone before the service manager ends what is left of the
/// service (systemd logged `Killing process N (sqlcron) with signal SIGKILL` at every stop).
pub fn stop() {
    let Some(link) = LINK.get() else {
        return;
    };
    let reaper = link.lock().unwrap_or_else(|e| e.into_inner()).reaper.take();
    let Some((mut child, pipe)) = reaper else {
        return;
    };
    drop(pipe);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}

/// Writes to the reaper; if it is gone (killed by someone), starts a new one and tells it every
/// group still registered.
fn send(link: &mut Link, line: &str) {
    if let Some((_, pipe)) = link.reaper.as_mut()
        && pipe.write_all(line.as_bytes()).is_ok()
    {
        return;
    }
    if let Some((mut old, _)) = link.reaper.take() {
        // Reap the dead one (it is our child).
        let _ = old.kill();
        let _ = old.wait();
    }
    let replaced = spawn().and_then(|(child, mut pipe)| {
        let all: String = link
            .groups
            .iter()
            .map(|(g, group)| register_line(*g, group))
            .collect();
        pipe.write_all(all.as_bytes())?;
        Ok((child, pipe))
    });
    match replaced {
        Ok((child, pipe)) => {
            tracing::warn!(
                pid = child.id(),
                "the job reaper was gone; started a new one"
            );
            link.reaper = Some((child, pipe));
        }
        Err(e) => {
            tracing::error!(error = %e, "the job reaper is gone and cannot be restarted: jobs will not be stopped if this daemon dies");
        }
    }
}

/// `CLOCK_MONOTONIC` now, in milliseconds: the clock the reaper compares deadlines with.
fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A deadline given as an `Instant` (also `CLOCK_MONOTONIC` on Linux), in the reaper's terms.
fn deadline_ms(deadline: Instant) -> u64 {
    let now = Instant::now();
    let ahead = deadline.saturating_duration_since(now).as_millis() as u64;
    monotonic_ms().saturating_add(ahead)
}

fn register_line(pgid: i32, group: &Group) -> String {
    match group.deadline {
        Some(d) => format!("+{pgid} {d} {}\n", group.run),
        None => format!("+{pgid} - {}\n", group.run),
    }
}

/// A job's process group started for the run `run` (its `SQLCRON_RUN_ID`); the reaper kills it
/// at `deadline` unless refreshed (no-op without a reaper).
pub fn register(pgid: i32, deadline: Option<Instant>, run: &str) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    // A run id is the daemon's own text without spaces; anything else would break the line.
    let run: String = run.chars().filter(|c| c.is_ascii_graphic()).collect();
    let group = Group {
        deadline: deadline.map(deadline_ms),
        run,
    };
    if pgid > 0 && !link.groups.contains_key(&pgid) {
        let line = register_line(pgid, &group);
        link.groups.insert(pgid, group);
        send(&mut link, &line);
    }
}

/// Moves a registered group's deadline (its lease was extended).
pub fn refresh(pgid: i32, deadline: Instant) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = deadline_ms(deadline);
    if let Some(g) = link.groups.get_mut(&pgid)
        && g.deadline.is_some()
    {
        g.deadline = Some(deadline);
        send(&mut link, &format!("~{pgid} {deadline}\n"));
    }
}

/// A job's process group is done (no-op without a reaper).
pub fn unregister(pgid: i32) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    if link.groups.remove(&pgid).is_some() {
        send(&mut link, &format!("-{pgid}\n"));
    }
}

/// Kills a registered group and every process carrying its run's id.
fn kill_group(pgid: i32, group: &Group) {
    // SAFETY: killpg has no memory-safety preconditions; a finished group fails with ESRCH.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
    if !group.run.is_empty() {
        crate::exec::orphans::kill_marked(&group.run);
    }
}

/// How long the reaper lets the daemon's lines gather in the pipe after reading some, so that a
/// burst of job starts and ends wakes it once per gathering rather than twice per job. Nothing
/// is lost meanwhile: the lines wait in the pipe, are all read before any deadline is judged (a
/// refresh or an end written during the wait counts), and a daemon that dies leaves them there
/// for the reaper to read before the end-of-file. A deadline due sooner cuts the wait short.
const GATHER: Duration = Duration::from_millis(10);

/// The wait after a read: [`GATHER`], or less when a registered deadline is nearer.
fn gather(groups: &HashMap<i32, Group>, now: u64) -> Duration {
    let nearest = groups
        .values()
        .filter_map(|g| g.deadline)
        .min()
        .map(|d| Duration::from_millis(d.saturating_sub(now)));
    nearest.map_or(GATHER, |n| n.min(GATHER))
}

/// What one look at the daemon's pipe (the reaper's stdin) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Some,
    /// As much as the buffer holds: more may be waiting.
    More,
    Nothing,
    /// End of file: the daemon is gone.
    End,
}

/// The reaper's end of the daemon's pipe, with the part of a line read so far.
struct Pipe {
    pending: Vec<u8>,
    buf: [u8; 16384],
}

impl Pipe {
    /// Waits up to `timeout` ms (-1: without end) for input and reads what is there.
    fn read(&mut self, timeout: i32) -> Read {
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own.
        if unsafe { libc::poll(&mut fds, 1, timeout) } <= 0 {
            return Read::Nothing;
        }
        // SAFETY: read into a buffer we own, at most its length.
        let n = unsafe { libc::read(0, self.buf.as_mut_ptr().cast(), self.buf.len()) };
        if n <= 0 {
            return Read::End;
        }
        self.pending.extend_from_slice(&self.buf[..n as usize]);
        if n as usize == self.buf.len() {
            Read::More
        } else {
            Read::Some
        }
    }

    /// The whole lines read so far, taken out.
    fn lines(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line).into_owned());
        }
        lines
    }
}

/// The reaper process: follow the registrations on stdin, kill groups whose deadline passed,
/// and at end-of-file kill what is left.
pub fn serve() -> u8 {
    // SAFETY: setting signal dispositions to SIG_IGN has no preconditions. A Ctrl-C or a
    // `pkill sqlcron` is meant for the daemon; the reaper must outlive it to do its work.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Started through /proc/self/exe, it would be called "exe" in top and ps.
        libc::prctl(libc::PR_SET_NAME, c"sqlcron-reaper".as_ptr());
        // Like the daemon: a same-user job can neither read its memory nor attach to it.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let mut groups: HashMap<i32, Group> = HashMap::new();
    // Every daemon instance whose runs were registered (`<instance>.` of each run id,
    // `<instance>.<n>.<secret>`).
    let mut instances: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut pipe = Pipe {
        pending: Vec::new(),
        buf: [0u8; 16384],
    };
    let mut take = |pipe: &mut Pipe, groups: &mut HashMap<i32, Group>, timeout: i32| {
        let read = pipe.read(timeout);
        for line in pipe.lines() {
            if let Some(g) = apply(groups, &line)
                && let Some((instance, _)) = g.run.split_once('.')
            {
                instances.insert(format!("{instance}."));
            }
        }
        read
    };
    'serve: loop {
        // What waits in the pipe is read before any deadline is judged: a refresh the daemon
        // wrote while the reaper was gathering (below) counts.
        loop {
            match take(&mut pipe, &mut groups, 0) {
                Read::End => break 'serve,
                Read::More => continue,
                Read::Some | Read::Nothing => break,
            }
        }
        let now = monotonic_ms();
        groups.retain(|pgid, group| match group.deadline {
            Some(d) if d <= now => {
                kill_group(*pgid, group);
                false
            }
            _ => true,
        });
        let timeout = groups
            .values()
            .filter_map(|g| g.deadline)
            .min()
            .map(|d| d.saturating_sub(now).min(60_000) as i32)
            .unwrap_or(-1);
        match take(&mut pipe, &mut groups, timeout) {
            Read::End => break,
            // A full buffer (a new reaper told every group at once): read on at once.
            Read::Nothing | Read::More => continue,
            // What the daemon writes next waits in the pipe (see `GATHER`), and is read at
            // the top of the loop before any deadline is judged.
            Read::Some => std::thread::sleep(gather(&groups, monotonic_ms())),
        }
    }
    for (pgid, group) in &groups {
        kill_group(*pgid, group);
    }
    for instance in &instances {
        crate::exec::orphans::kill_marked(instance);
    }
    0
}

/// Applies one line of the protocol (see the module documentation); garbage is ignored. Returns
/// the group a `+` line registered.
fn apply<'a>(groups: &'a mut HashMap<i32, Group>, line: &str) -> Option<&'a Group> {
    let line = line.trim();
    let (op, rest) = line.split_at(line.len().min(1));
    let mut fields = rest.split_whitespace();
    let pgid = fields.next()?.parse::<i32>().ok()?;
    let deadline = fields.next().and_then(|d| d.parse::<u64>().ok());
    let run = fields.next().unwrap_or_default().to_string();
    match op {
        "+" if pgid > 0 => {
            groups.insert(pgid, Group { deadline, run });
            return groups.get(&pgid);
        }
        "~" => {
            if let (Some(d), Some(g)) = (deadline, groups.get_mut(&pgid))
                && g.deadline.is_some()
            {
                g.deadline = Some(d);
            }
        }
        "-" => {
            groups.remove(&pgid);
        }
        _ => {}
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_are_taken_and_a_partial_one_waits_for_its_end() {
        let mut pipe = Pipe {
            pending: b"+10 - a.1\n~10 900\n-1".to_vec(),
            buf: [0; 16384],
        };
        assert_eq!(pipe.lines(), vec!["+10 - a.1\n", "~10 900\n"]);
        pipe.pending.extend_from_slice(b"0\n");
        assert_eq!(pipe.lines(), vec!["-10\n"]);
        assert!(pipe.lines().is_empty());
    }

    #[test]
    fn gathers_no_longer_than_the_nearest_deadline() {
        let group = |deadline| Group {
            deadline,
            run: String::new(),
        };
        let mut groups = HashMap::from([(10, group(None))]);
        assert_eq!(gather(&groups, 1_000), GATHER);
        groups.insert(11, group(Some(1_004)));
        assert_eq!(gather(&groups, 1_000), Duration::from_millis(4));
        groups.insert(12, group(Some(900)));
        assert_eq!(gather(&groups, 1_000), Duration::ZERO);
        groups.retain(|g, _| *g == 10);
        groups.insert(13, group(Some(60_000)));
        assert_eq!(gather(&groups, 1_000), GATHER);
    }

    #[test]
    fn keeps_what_was_registered_and_not_unregistered() {
        let mut groups = HashMap::new();
        for line in
            "+10 - a.1\n+11 500 a.2\n-10\n+12\ngarbage\n+0\n+-5\n-99\n~11 900\n~12 100\n".lines()
        {
            apply(&mut groups, line);
        }
        let group = |deadline, run: &str| Group {
            deadline,
            run: run.to_string(),
        };
        assert_eq!(
            groups,
            HashMap::from([(11, group(Some(900), "a.2")), (12, group(None, ""))])
        );
    }
}
