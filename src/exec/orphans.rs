//! What a run leaves behind: processes that left the run's process group (`setsid`, a double
//! fork) and so escape the `killpg` that ends a run, a timeout, a lost lease or a replace.
//!
//! Every process a run starts carries `SQLCRON_RUN_ID=<daemon instance>.<n>.<secret>` in its
//! environment, inherited by whatever it starts. The secret is 64 random bits drawn for each
//! run: a job can set the variable to anything, but to name *another* run it would need that
//! run's secret, which only a process allowed to read the other run's environment (the same
//! user, or root, who can signal and trace that run anyway) can learn. A guessed id names no
//! run, so it spares nothing. The daemon is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`): a process whose parent dies is handed to the daemon instead of
//! init. After each run's end, and every second, the daemon looks at those of its children it
//! did not start itself (orphans):
//!
//! - an orphan of another account than the daemon's (its real uid) is killed (SIGKILL; its
//!   process group too when it leads one), whatever its environment says: a run switched to
//!   another account keeps its own orphans while it goes (below), so one that reaches the
//!   daemon is of a run that has ended, or forged;
//! - an orphan whose environment names a run still going that was started as the daemon's own
//!   account is that run's, and left alone;
//! - one that names anything else (a run that has ended, a run that keeps its own orphans, a
//!   guess) is killed;
//! - one without the variable (it cleared its environment) came from one of the runs of the
//!   daemon's own account going when it was first seen: it is killed once all of those have
//!   ended (at once when there were none).
//!
//! A run forked for an account switch, limits or a control group makes its main process a child
//! subreaper before `exec` (`child_setup::setup_child`; the setting is kept across `exec`): while the
//! main process lives, a process of the run whose parent dies is handed to it, not to the
//! daemon. So under a root daemon, where every run as another user is forked, the variable
//! decides nothing for those runs: the run's end does, and the account. Only runs started
//! with `posix_spawn` (the daemon's own account, no limits, no control group: no hook before
//! `exec`) still rely on the variable; a process of the daemon's account can signal the daemon
//! itself, so it is no boundary there (docs/security.md).
//!
//! Orphans that exited are reaped by their PID (never `waitpid(-1)`: the runtime reaps the
//! processes the daemon started). When the daemon itself dies, its orphans go to init; the job
//! reaper then kills every process that carries one of the daemon's run ids (`reaper.rs`).
//! Where the daemon has a delegated control group (systemd, `Delegate=yes`), each run also has a
//! group of its own, killed whole with `cgroup.kill` at the run's end (`limits.rs`): that covers
//! a process that both cleared its environment and left its group while the daemon died.
//! No database.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// The variable that ties a process to its run.
pub const VAR: &str = "SQLCRON_RUN_ID";

struct State {
    /// This daemon's prefix of run ids: its PID and start time, unique on the host.
    instance: String,
    next: u64,
    /// Runs going: id -> the PID of the run's main process once spawned (0 before).
    live: HashMap<String, i32>,
    /// Runs going whose main process is a subreaper of its own (`child_setup::setup_child`): none
    /// of their processes is handed to the daemon while they go.
    keeping: HashSet<String>,
    /// Orphans without the variable: PID -> the runs going when first seen, still going.
    unmarked: HashMap<i32, HashSet<String>>,
    subreaper: bool,
    /// The job reaper's PID: the daemon's own child, never an orphan (0: none yet).
    reaper: i32,
}

fn state() -> MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            Mutex::new(State {
                instance: format!("{}-{:x}", std::process::id(), nanos),
                next: 0,
                live: HashMap::new(),
                keeping: HashSet::new(),
                unmarked: HashMap::new(),
                subreaper: false,
                reaper: 0,
            })
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Makes this process the subreaper of everything it starts. The daemon calls it once at start;
/// without it (other commands) orphans go to init as usual and only the process group is ended.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    state().subreaper = true;
    Ok(())
}

/// The job reaper was (re)started as `pid`: a child of the daemon that is not an orphan.
pub fn set_reaper(pid: i32) {
    state().reaper = pid;
}

/// A run is about to start: its id, for [`VAR`]. From now on its processes are left alone.
pub fn begin() -> String {
    let mut s = state();
    s.next += 1;
    let id = format!("{}.{}.{:016x}", s.instance, s.next, rand::random::<u64>());
    s.live.insert(id.clone(), 0);
    id
}

/// The run's main process is `pid` (the daemon's own child, reaped by the runtime);
/// `keeps_orphans`: it was made a subreaper of its own before `exec`.
pub fn spawned(id: &str, pid: i32, keeps_orphans: bool) {
    let mut s = state();
    if let Some(p) = s.live.get_mut(id) {
        *p = pid;
        if keeps_orphans {
            s.keeping.insert(id.to_string());
        }
    }
}

/// The run has ended: whatever it left behind is killed (as a subreaper), and the call returns
/// once those are gone or after a second at most.
pub async fn end(id: &str) {
    let subreaper = {
        let mut s = state();
        s.live.remove(id);
        s.keeping.remove(id);
        s.subreaper
    };
    // One look is a read of one file; only when it killed something does the wait for those
    // to go (and their children, handed over in turn) move to a blocking thread.
    if subreaper && !sweep_once() {
        let _ = tokio::task::spawn_blocking(sweep).await;
    }
}

/// The run is gone without an end (it could not be spawned, or its task was dropped): what it
/// left is found by the next periodic sweep.
pub fn forget(id: &str) {
    let mut s = state();
    s.live.remove(id);
    s.keeping.remove(id);
}

/// Kills the orphans of ended runs and reaps exited ones, repeating while any remain (a killed
/// orphan's own children are handed to the daemon in turn), for a second at most.
pub fn sweep() {
    for _ in 0..100 {
        if sweep_once() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One look: returns whether nothing of an ended run is left.
fn sweep_once() -> bool {
    let children = children();
    let mut guard = state();
    let reaper = guard.reaper;
    let s = &mut *guard;
    let own: HashSet<i32> = s.live.values().copied().filter(|p| *p > 0).collect();
    // SAFETY: getuid cannot fail and touches no memory.
    let me = unsafe { libc::getuid() };
    // A run being spawned has a main process not yet in `own`: it may already have exited, and
    // reaping it here would take its exit status from the runtime. Zombies wait for a later look.
    let spawning = s.live.values().any(|p| *p == 0);
    s.unmarked.retain(|pid, _| children.contains(pid));
    let mut pending = false;
    for &pid in &children {
        if own.contains(&pid) || pid == reaper {
            continue;
        }
        // Only a process that is this daemon's child now is reaped or ended here.
        let Some(stat) = Stat::read(pid).filter(|s| s.ppid == std::process::id() as i32) else {
            continue;
        };
        if stat.zombie {
            if !spawning {
                reap(pid);
            }
            continue;
        }
        // A run being spawned may be this very child, switched to its account already but
        // not yet in `own`: judged at a later look (the sweep every second).
        if spawning {
            continue;
        }
        // Runs of the daemon's own account that may still hand it their processes.
        let (live, keeping) = (&s.live, &s.keeping);
        let handing = |id: &String| live.contains_key(id) && !keeping.contains(id);
        let ended = if real_uid(pid) != Some(me) {
            // Another account's: a run switched to it keeps its own orphans while it goes.
            true
        } else {
            match marker(pid) {
                // Only this daemon's runs' processes are handed to it: an id that names none of
                // its runs going (an ended run's, a guess, another daemon's), or a run that
                // keeps its own orphans, spares nothing.
                Some(id) => !handing(&id),
                // None: the runs going now that hand over orphans are its possible origins.
                None => {
                    let origins = s
                        .unmarked
                        .entry(pid)
                        .or_insert_with(|| live.keys().filter(|id| handing(id)).cloned().collect());
                    origins.retain(|id| handing(id));
                    origins.is_empty()
                }
            }
        };
        if ended {
            if stat.pgid == pid && !own.contains(&pid) {
                kill_group(pid);
            }
            kill(pid);
            pending = true;
            tracing::warn!(
                pid,
                "ended a process its run left behind (it had left the run's process group)"
            );
        }
    }
    !pending
}

/// The children of this process's main thread: where the kernel hands a subreaper's adopted
/// processes (the first live thread of its thread group). The runs' own processes are children
/// of whichever thread spawned them and are not read here; one file read, not one per thread.
///
/// The file is opened once and read again from its start at each look (procfs makes the list
/// anew then): opening it at each run's end was about 4 % of the daemon's CPU in a burst.
fn children() -> Vec<i32> {
    use std::os::unix::fs::FileExt;
    // One reader at a time: procfs keeps one position per open file, and a read that goes on
    // from an offset after another thread read from the start would get the rest of a newer
    // list, not of its own.
    static FILE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let path = || format!("/proc/self/task/{}/children", std::process::id());
    let text = match FILE.get_or_init(|| std::fs::File::open(path()).ok().map(Mutex::new)) {
        Some(file) => {
            let file = file.lock().unwrap_or_else(|e| e.into_inner());
            let mut text = Vec::with_capacity(256);
            let mut chunk = [0u8; 4096];
            loop {
                match file.read_at(&mut chunk, text.len() as u64) {
                    Ok(0) => break,
                    Ok(n) => text.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        text.clear();
                        break;
                    }
                }
            }
            String::from_utf8(text).unwrap_or_default()
        }
        None => std::fs::read_to_string(path()).unwrap_or_default(),
    };
    text.split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .collect()
}

/// Whether process `pid` runs on this host: it exists and is not a zombie (dead, not reaped).
pub fn running(pid: i32) -> bool {
    Stat::read(pid).is_some_and(|s| !s.zombie)
}

/// The fields of `/proc/PID/stat` this needs.
struct Stat {
    zombie: bool,
    ppid: i32,
    pgid: i32,
}

impl Stat {
    fn read(pid: i32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command name in parentheses (which may hold spaces and parentheses):
        // state, ppid, pgrp, ...
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        let ppid: i32 = fields.next()?.parse().ok()?;
        let pgid = fields.next()?.parse().ok()?;
        Some(Stat {
            zombie: state == "Z" || state == "X",
            ppid,
            pgid,
        })
    }
}

/// A process's real user id (`Uid:` in `/proc/PID/status`): not the owner of `/proc/PID`,
/// which a process that makes itself non-dumpable hands to root.
fn real_uid(pid: i32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    uid_in(&text)
}

fn uid_in(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The run id in a process's environment, if it has one and it can be read.
pub fn marker(pid: i32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    marker_in(&env)
}

fn marker_in(environ: &[u8]) -> Option<String> {
    let prefix = format!("{VAR}=");
    environ
        .split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Kills every process on the host whose run id is `id`, or starts with `prefix.` when `id`
/// ends in `.`: what the job reaper does for a run whose lease ran out, and for all of a dead
/// daemon's runs.
pub fn kill_marked(id: &str) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    let me = std::process::id() as i32;
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Some(m) = marker(pid) else { continue };
        let hit = if id.ends_with('.') {
            m.starts_with(id)
        } else {
            m == id
        };
        if hit {
            kill(pid);
        }
    }
}

fn kill(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions; a PID that is gone fails with ESRCH.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn kill_group(pgid: i32) {
    // SAFETY: as for kill.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid on one PID that is our child and not one the runtime waits for.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_read_from_an_environment_block() {
        let env = b"PATH=/bin\0SQLCRON_RUN_ID=12-ab.7.00ff\0HOME=/\0";
        assert_eq!(marker_in(env).as_deref(), Some("12-ab.7.00ff"));
        assert_eq!(marker_in(b"PATH=/bin\0XSQLCRON_RUN_ID=1\0"), None);
        assert_eq!(marker_in(b""), None);
    }

    #[test]
    fn the_real_uid_is_the_first_of_the_uid_line() {
        let status =
            "Name:\tsleep\nUmask:\t0022\nUid:\t65534\t0\t0\t0\nGid:\t65534\t65534\t65534\t65534\n";
        assert_eq!(uid_in(status), Some(65534));
        assert_eq!(uid_in("Name:\tx\n"), None);
        // This process's own.
        assert_eq!(
            real_uid(std::process::id() as i32),
            Some(unsafe { libc::getuid() })
        );
    }

    #[test]
    fn a_run_id_is_the_instance_a_count_and_a_secret() {
        let (a, b) = (begin(), begin());
        forget(&a);
        forget(&b);
        let parts: Vec<&str> = a.split('.').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[2].len(), 16, "{a}");
        assert_eq!(a.split_once('.').unwrap().0, b.split_once('.').unwrap().0);
        // Knowing one's own id does not give the next one.
        let next_guess = format!("{}.{}", parts[0], parts[1].parse::<u64>().unwrap() + 1);
        assert!(
            !b.starts_with(&format!("{next_guess}.{}", parts[2])),
            "{a} {b}"
        );
    }
}
