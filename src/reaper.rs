//! The job reaper: outside systemd, what ends a dead daemon's jobs.
//!
//! A daemon killed with SIGKILL (or by the OOM killer) must not leave its jobs running while
//! another node reruns their slots. Under systemd the unit's control group ends them. Elsewhere
//! the daemon starts one small helper at start, `sqlcron __reaper`, in a process group of its
//! own, reading a pipe whose only writer is the daemon. The daemon writes `+PGID` when a job
//! starts and `-PGID` when the job's process group is done. When the daemon dies, for whatever
//! reason, the kernel closes the pipe; the reaper reads end-of-file, sends SIGKILL to every
//! process group still registered, and exits.
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

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The hidden subcommand the reaper runs as.
pub const SUBCOMMAND: &str = "__reaper";

/// The daemon's side: the running reaper and what it was told.
struct Link {
    reaper: Option<(Child, ChildStdin)>,
    /// Process groups registered and not yet unregistered: a new reaper is told them again.
    groups: HashSet<i32>,
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
        groups: HashSet::new(),
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
        let all: String = link.groups.iter().map(|g| format!("+{g}\n")).collect();
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

/// A job's process group started (no-op without a reaper).
pub fn register(pgid: i32) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    if pgid > 0 && link.groups.insert(pgid) {
        send(&mut link, &format!("+{pgid}\n"));
    }
}

/// A job's process group is done (no-op without a reaper).
pub fn unregister(pgid: i32) {
    let Some(link) = LINK.get() else { return };
    let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
    if link.groups.remove(&pgid) {
        send(&mut link, &format!("-{pgid}\n"));
    }
}

/// The reaper process: follow the registrations on stdin; at end-of-file, kill what is left.
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
    let groups = follow(std::io::stdin().lock());
    for pgid in groups {
        // SAFETY: killpg has no memory-safety preconditions; a finished group fails with ESRCH.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    0
}

/// The process groups still registered when `input` ends (or fails).
fn follow(input: impl BufRead) -> HashSet<i32> {
    let mut groups = HashSet::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        let (op, pgid) = line.split_at(line.len().min(1));
        match (op, pgid.trim().parse::<i32>()) {
            ("+", Ok(p)) if p > 0 => {
                groups.insert(p);
            }
            ("-", Ok(p)) => {
                groups.remove(&p);
            }
            _ => {}
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_was_registered_and_not_unregistered() {
        let input = "+10\n+11\n-10\n+12\ngarbage\n+0\n+-5\n-99\n";
        let left = follow(std::io::Cursor::new(input));
        assert_eq!(left, HashSet::from([11, 12]));
    }
}
