//! The job reaper: what ends a dead or frozen daemon's jobs, in a process of its own.
//!
//! A daemon killed with SIGKILL (or by the OOM killer) must not leave its jobs running while
//! another node reruns their slots, and neither must a daemon that is *stopped* (SIGSTOP, a
//! stalled VM thread, a debugger): its event loop cannot enforce anything then. So every daemon,
//! under systemd too, and every `sqlcron lock` / `sqlcron sem`, starts one small helper,
//! `sqlcron __reaper`, in a process group of its own, reading a pipe whose only writer is its
//! parent. The parent writes `+PGID DEADLINE` when a job starts, `~PGID DEADLINE` each time the
//! job's lease is extended, and `-PGID` when the job's process group is done. DEADLINE is a
//! `CLOCK_MONOTONIC` instant in milliseconds (the same clock in both processes): the end of the
//! claim's trust window plus a tenth of the lease, before the lease itself ends. A job whose
//! deadline passes without a refresh is killed with SIGKILL (a job with `on_lease_lost =
//! "ignore"` is registered without a deadline). When the parent dies, the kernel closes the
//! pipe; the reaper reads end-of-file, kills every process group still registered, and exits.
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
//! group (a shell and its pipeline). What it does not cover: a job that leaves its process group
//! (`setsid`), the moment between a job's spawn and its registration (microseconds, unless the
//! machine pauses the daemon's thread right there), and the daemon dying
//! while its reaper is dead. The reaper ignores the terminal and termination signals; if it is
//! killed anyway, the daemon starts a new one at the next job start or end and tells it every
//! group still registered.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The hidden subcommand the reaper runs as.
pub const SUBCOMMAND: &str = "__reaper";

/// The daemon's side: the running reaper and what it was told.
struct Link {
    reaper: Option<(Child, ChildStdin)>,
    /// Process groups registered and not yet unregistered, with their deadline: a new reaper is
    /// told them again.
    groups: HashMap<i32, Option<u64>>,
}

static LINK: OnceLock<Mutex<Link>> = OnceLock::new();

fn spawn() -> std::io::Result<(Child, ChildStdin)> {
    // `/proc/self/exe` is this very binary, even if the file was replaced by an upgrade since.
    let mut child = Command::new("/proc/self/exe")
        .arg0("sqlcron")
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()?;
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
            .map(|(g, d)| register_line(*g, *d))
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

fn register_line(pgid: i32, deadline: Option<u64>) -> String {
    match deadline {
        Some(d) => format!("+{pgid} {d}\n"),
        None => format!("+{pgid}\n"),
    }
}

/// A job's process group started; the reaper kills it at `deadline` unless refreshed (no-op
/// without a reaper).
pub fn register(pgid: i32, deadline: Option<Instant>) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = deadline.map(deadline_ms);
    if pgid > 0 && link.groups.insert(pgid, deadline).is_none() {
        send(&mut link, &register_line(pgid, deadline));
    }
}

/// Moves a registered group's deadline (its lease was extended).
pub fn refresh(pgid: i32, deadline: Instant) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = deadline_ms(deadline);
    if let Some(d) = link.groups.get_mut(&pgid)
        && d.is_some()
    {
        *d = Some(deadline);
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

fn kill_group(pgid: i32) {
    // SAFETY: killpg has no memory-safety preconditions; a finished group fails with ESRCH.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
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
    }
    let mut groups: HashMap<i32, Option<u64>> = HashMap::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let now = monotonic_ms();
        groups.retain(|pgid, deadline| match deadline {
            Some(d) if *d <= now => {
                kill_group(*pgid);
                false
            }
            _ => true,
        });
        let timeout = groups
            .values()
            .flatten()
            .min()
            .map(|d| d.saturating_sub(now).min(60_000) as i32)
            .unwrap_or(-1);
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own.
        let ready = unsafe { libc::poll(&mut fds, 1, timeout) };
        if ready <= 0 {
            continue;
        }
        // SAFETY: read into a buffer we own, at most its length.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n as usize]);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            apply(&mut groups, &String::from_utf8_lossy(&line));
        }
    }
    for pgid in groups.keys() {
        kill_group(*pgid);
    }
    0
}

/// Applies one line of the protocol (see the module documentation); garbage is ignored.
fn apply(groups: &mut HashMap<i32, Option<u64>>, line: &str) {
    let line = line.trim();
    let (op, rest) = line.split_at(line.len().min(1));
    let mut fields = rest.split_whitespace();
    let Some(Ok(pgid)) = fields.next().map(str::parse::<i32>) else {
        return;
    };
    let deadline = fields.next().and_then(|d| d.parse::<u64>().ok());
    match op {
        "+" if pgid > 0 => {
            groups.insert(pgid, deadline);
        }
        "~" => {
            if let (Some(d), Some(Some(old))) = (deadline, groups.get_mut(&pgid)) {
                *old = d;
            }
        }
        "-" => {
            groups.remove(&pgid);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_was_registered_and_not_unregistered() {
        let mut groups = HashMap::new();
        for line in "+10\n+11 500\n-10\n+12\ngarbage\n+0\n+-5\n-99\n~11 900\n~12 100\n".lines() {
            apply(&mut groups, line);
        }
        assert_eq!(groups, HashMap::from([(11, Some(900)), (12, None)]));
    }
}
