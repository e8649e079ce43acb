//! Starting a run whose process must be set up before `exec` (another account, limits, a
//! control group) without copying the daemon's address space.
//!
//! The standard library starts such a process with `fork`: the child gets a copy of the
//! daemon's page tables, and every page the daemon writes afterwards faults once to be copied
//! or taken back. A root daemon running jobs as another user (or under systemd, where every
//! run has a control group) paid that for every run: about 150 page faults and 0.5 ms of the
//! daemon's CPU per run, three times what a run of its own account costs (docs/benchmarks.md,
//! "Runs as another user started without a fork"). Here the child shares the daemon's memory
//! and the daemon's thread waits until it has called `exec` (`CLONE_VM | CLONE_VFORK`, what the
//! C library's `posix_spawn` does), so nothing is copied.
//!
//! A child that shares the parent's memory may only make system calls on data prepared before
//! it was started: no allocation, no lock, no C library call that keeps state. Everything it
//! needs (the program's candidate paths, the arguments, the environment, the descriptors) is
//! built first; the child sets up the process (`child_setup::setup_child`, whose account switch is
//! made with raw system calls, which change the calling process only), resets the signals the
//! daemon handles, and calls `execve`. If it fails, it writes
//! the error where the parent reads it and exits with 127.
//!
//! The parent waits for the child through a pidfd (Linux 5.3); where there is none, the runner
//! starts the run as before ([`available`]).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;

use tokio::io::unix::AsyncFd;

/// Stack of the child until its `exec`: its own set-up and `execve`'s few frames.
const CHILD_STACK: usize = 256 * 1024;

/// Whether this kernel has `pidfd_open` (asked once).
pub fn available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        // SAFETY: pidfd_open on our own PID; the descriptor is closed at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        if fd >= 0 {
            // SAFETY: a descriptor we just opened.
            unsafe { libc::close(fd as RawFd) };
            true
        } else {
            false
        }
    })
}

/// Whether `fs.suid_dumpable` is 1: a process that switches accounts stays traceable by the
/// new account until its `exec` (read at most once a second).
pub fn dumpable_after_setuid() -> bool {
    static SEEN: std::sync::Mutex<Option<(std::time::Instant, bool)>> = std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let now = std::time::Instant::now();
    match *seen {
        Some((at, one)) if now.duration_since(at) < std::time::Duration::from_secs(1) => one,
        _ => {
            // Not readable: taken as 1 (such runs are then forked), not as safe.
            let one = std::fs::read_to_string("/proc/sys/fs/suid_dumpable")
                .map(|v| v.trim() == "1")
                .unwrap_or(true);
            *seen = Some((now, one));
            one
        }
    }
}

/// What the child does between its start and `exec`, prepared by the caller: runs in the
/// child, so it may only make system calls on data prepared before.
pub type Setup<'a> = &'a (dyn Fn() -> io::Result<()> + Sync);

/// A process to start.
pub struct Plan<'a> {
    pub program: &'a OsStr,
    /// Every argument after the program's name (which is the first).
    pub args: Vec<&'a OsStr>,
    /// The whole environment of the new process.
    pub env: Vec<(OsString, OsString)>,
    /// `/dev/null` for its standard input and pipes for its output; `false`: the daemon's own
    /// three descriptors.
    pub piped: bool,
    /// A descriptor of `/dev/null` for its standard input when `piped` (`None`: the child
    /// opens one).
    pub null: Option<RawFd>,
    pub setup: Setup<'a>,
}

/// The started process: its PID (and process group), the read ends of its output.
pub struct Child {
    pid: i32,
    /// Readable once the process has exited; `None` if it could not be registered with the
    /// runtime (the wait then looks every 50 ms).
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdout: Option<tokio::net::unix::pipe::Receiver>,
    pub stderr: Option<tokio::net::unix::pipe::Receiver>,
}

impl Child {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// The process's exit status, once it has exited. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            match &self.pidfd {
                Some(fd) => {
                    let mut ready = fd.readable().await?;
                    if reap(self.pid, &mut self.status)?.is_none() {
                        ready.clear_ready();
                    }
                }
                None => {
                    if reap(self.pid, &mut self.status)?.is_none() {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }
}

/// Reaps process `pid` into `status` if it has exited.
fn reap(pid: i32, status: &mut Option<ExitStatus>) -> io::Result<Option<ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    if status.is_none() {
        let mut raw = 0;
        // SAFETY: waitpid on our own child, not waited for by anything else.
        let r = unsafe { libc::waitpid(pid, &mut raw, libc::WNOHANG) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if r == pid {
            *status = Some(ExitStatus::from_raw(raw));
        }
    }
    Ok(*status)
}

impl Drop for Child {
    fn drop(&mut self) {
        // Only if it has exited. One dropped while it runs (an error in the run's supervision)
        // is one of the daemon's children it did not start, for the orphan sweep to kill and
        // reap (outside the daemon, `sqlcron lock`, it stays a zombie until the command ends).
        let _ = reap(self.pid, &mut self.status);
    }
}

/// What the child reads: pointers into the parent's memory, valid until `execve`.
struct ChildArgs<'a> {
    candidates: &'a [CString],
    argv: &'a [*const libc::c_char],
    /// `/bin/sh`, a place for the candidate, then the arguments: for a file the kernel cannot
    /// run (no `#!`), run by the shell as `execvp` does. The child writes the second place.
    sh_argv: *mut *const libc::c_char,
    envp: &'a [*const libc::c_char],
    /// stdin, stdout, stderr for the child, or -1: keep the daemon's.
    stdio: [RawFd; 3],
    setup: Setup<'a>,
    /// The error that ended the child before `exec` (an `errno`), 0 if none.
    error: i32,
}

/// Starts `plan` in a process of its own group (its PID is the group's id).
pub fn spawn(plan: &Plan<'_>) -> io::Result<Child> {
    let c = |s: &OsStr| {
        CString::new(s.as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command"))
    };
    let mut arg_strings = vec![c(plan.program)?];
    for a in &plan.args {
        arg_strings.push(c(a)?);
    }
    let mut env_strings = Vec::with_capacity(plan.env.len());
    for (k, v) in &plan.env {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        env_strings.push(CString::new(kv).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the environment")
        })?);
    }
    let path = plan
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"));
    let candidates = candidates(plan.program, path.as_deref())?;
    let argv: Vec<*const libc::c_char> = arg_strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let mut sh_argv: Vec<*const libc::c_char> = [c"/bin/sh".as_ptr(), std::ptr::null()]
        .into_iter()
        .chain(arg_strings[1..].iter().map(|s| s.as_ptr()))
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = env_strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    // The read ends are made ready before the process exists: no error after it does.
    let receiver = |r: OwnedFd| tokio::net::unix::pipe::Receiver::from_owned_fd(r);
    let (stdout, out_w, stderr, err_w) = if plan.piped {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        (
            Some(receiver(out_r)?),
            Some(out_w),
            Some(receiver(err_r)?),
            Some(err_w),
        )
    } else {
        (None, None, None, None)
    };
    let mut args = ChildArgs {
        candidates: &candidates,
        argv: &argv,
        sh_argv: sh_argv.as_mut_ptr(),
        envp: &envp,
        stdio: [
            plan.null.filter(|_| plan.piped).unwrap_or(-1),
            out_w.as_ref().map_or(-1, |w| w.as_raw_fd()),
            err_w.as_ref().map_or(-1, |w| w.as_raw_fd()),
        ],
        setup: plan.setup,
        error: 0,
    };
    let start = crate::exec::spawn_watch::begin();
    let pid = clone_vfork(&mut args, &start);
    crate::exec::spawn_watch::end(&start);
    // The write ends are the child's now.
    drop((out_w, err_w));
    let pid = pid?;
    // SAFETY: written by the kernel at the clone (`CLONE_PIDFD`), owned from here on.
    let pidfd = unsafe { OwnedFd::from_raw_fd(start.pidfd.load(Ordering::SeqCst)) };
    // SAFETY: written by the child, which has exec'd or exited by now.
    let error = unsafe { std::ptr::read_volatile(&args.error) };
    drop(sh_argv);
    if error != 0 || start.killed.load(Ordering::SeqCst) {
        let mut status = 0;
        // SAFETY: our child, which has exited (it ends with `_exit` when it cannot `exec`) or
        // was killed before its `exec`.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(if error != 0 {
            io::Error::from_raw_os_error(error)
        } else {
            io::Error::other(
                "its process was stopped or hung before it could start (SIGSTOP from another \
                 process of the job's account, or a set-up that did not return within 10 s) \
                 and was killed",
            )
        });
    }
    // SAFETY: the pidfd is owned by the `AsyncFd` and stays open as long as it.
    let pidfd =
        unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }.ok();
    Ok(Child {
        pid,
        pidfd,
        status: None,
        stdout,
        stderr,
    })
}

/// The paths `execve` tries for `program`, in order, as `execvp` would search them: the
/// program itself if it names a path, else each directory of `path` (the new process's
/// `PATH`, or the daemon's; the C library's default without either).
fn candidates(program: &OsStr, path: Option<&OsStr>) -> io::Result<Vec<CString>> {
    let bytes = program.as_bytes();
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command");
    if bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if bytes.contains(&b'/') {
        return Ok(vec![CString::new(bytes).map_err(|_| nul())?]);
    }
    let path = path.map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = if dir.is_empty() {
                Vec::new()
            } else {
                let mut d = dir.to_vec();
                d.push(b'/');
                d
            };
            full.extend_from_slice(bytes);
            CString::new(full).map_err(|_| nul())
        })
        .collect()
}

/// A pipe, both ends closed on `exec`: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two descriptors just opened, owned from here on.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts the child on a stack of its own, with every signal blocked in this thread meanwhile
/// (a handler of the daemon's must not run in the child), and returns once it has called
/// `exec` or exited. The kernel writes the child's pidfd into `start` (`CLONE_PIDFD`) before
/// the child runs, for `spawn_watch`. A child that switches accounts changes the "dumpable"
/// setting of the memory it shares with this process: put back here.
fn clone_vfork(
    args: &mut ChildArgs<'_>,
    start: &crate::exec::spawn_watch::Start,
) -> io::Result<i32> {
    // SAFETY: an anonymous private mapping, unmapped below.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHILD_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigset and prctl calls on this process; the mask and the setting are put back.
    unsafe {
        let dumpable = libc::prctl(libc::PR_GET_DUMPABLE);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = (stack as *mut u8).add(CHILD_STACK);
        let pid = libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            (args as *mut ChildArgs<'_>).cast(),
            start.pidfd.as_ptr(),
        );
        let e = io::Error::last_os_error();
        if dumpable >= 0 && libc::prctl(libc::PR_GET_DUMPABLE) != dumpable {
            libc::prctl(libc::PR_SET_DUMPABLE, dumpable as libc::c_ulong);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::munmap(stack, CHILD_STACK);
        if pid < 0 { Err(e) } else { Ok(pid) }
    }
}

/// The child, until `exec`. Only system calls on the prepared data; the error number is
/// written into `ChildArgs::error` for the parent, which is suspended until this process
/// execs or exits.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent waits for us.
    let args = unsafe { &mut *(arg as *mut ChildArgs<'_>) };
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    let fail = |args: &mut ChildArgs<'_>, e: i32| -> libc::c_int {
        // A failure without an error number (a short write) still reads as one.
        args.error = if e == 0 { libc::EIO } else { e };
        // SAFETY: ends this process only; nothing of the parent's is touched.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: plain system calls on descriptors and data prepared by the parent.
    unsafe {
        for (target, &fd) in args.stdio.iter().enumerate() {
            if fd >= 0 && libc::dup2(fd, target as RawFd) < 0 {
                return fail(args, errno());
            }
        }
        if args.stdio[0] < 0 && args.stdio[1] >= 0 {
            // Piped output without a prepared /dev/null: open one.
            let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if fd < 0 || libc::dup2(fd, 0) < 0 {
                return fail(args, errno());
            }
            libc::close(fd);
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(args, errno());
        }
    }
    if let Err(e) = (args.setup)() {
        return fail(args, e.raw_os_error().unwrap_or(libc::EINVAL));
    }
    // SAFETY: sigaction on this process's own table (not shared: no CLONE_SIGHAND); signals
    // are blocked until the mask is emptied just before `exec`.
    unsafe {
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            // What the daemon ignores stays ignored across `exec` (as with `fork`), except
            // SIGPIPE, which the Rust runtime ignores for itself; what it handles is reset
            // now, not at `exec`, so that no handler of the daemon's runs in this process.
            if old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        let mut denied = false;
        let mut last = libc::ENOENT;
        for path in args.candidates {
            libc::execve(path.as_ptr(), args.argv.as_ptr(), args.envp.as_ptr());
            last = errno();
            if last == libc::ENOEXEC {
                // Not a program the kernel runs (a script without `#!`): the shell runs it.
                *args.sh_argv.add(1) = path.as_ptr();
                libc::execve(c"/bin/sh".as_ptr(), args.sh_argv, args.envp.as_ptr());
                last = errno();
                break;
            }
            match last {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => break,
            }
        }
        let lost = matches!(
            last,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT
        );
        let e = if denied && lost { libc::EACCES } else { last };
        fail(args, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set-up that hangs (here it sleeps; a working directory on a mount that does not
    /// answer would) is killed after ten seconds: the thread that started it is not held.
    #[tokio::test]
    async fn a_process_hung_before_its_exec_is_killed() {
        let setup = || {
            let t = libc::timespec {
                tv_sec: 60,
                tv_nsec: 0,
            };
            // SAFETY: a plain system call in the child.
            unsafe { libc::nanosleep(&t, std::ptr::null_mut()) };
            Ok(())
        };
        let plan = Plan {
            program: OsStr::new("/bin/true"),
            args: vec![],
            env: vec![],
            piped: true,
            null: None,
            setup: &setup,
        };
        let e = match spawn(&plan) {
            Ok(_) => panic!("a hung process was taken for started"),
            Err(e) => e,
        };
        assert!(e.to_string().contains("hung before it could start"), "{e}");
    }

    /// A process stopped before its `exec` (here by itself, as another process of the job's
    /// account could stop it) is found and killed, and the start fails saying so: the thread
    /// that started it is not held for good.
    #[tokio::test]
    async fn a_process_stopped_before_its_exec_is_killed() {
        let setup = || {
            // SAFETY: signals this process (the child) only.
            unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
            Ok(())
        };
        let plan = Plan {
            program: OsStr::new("/bin/true"),
            args: vec![],
            env: vec![],
            piped: true,
            null: None,
            setup: &setup,
        };
        let e = match spawn(&plan) {
            Ok(_) => panic!("a stopped process was taken for started"),
            Err(e) => e,
        };
        assert!(
            e.to_string()
                .contains("stopped or hung before it could start"),
            "{e}"
        );
    }

    #[test]
    fn a_bare_name_is_looked_for_on_the_path_in_order() {
        let c = candidates(OsStr::new("true"), Some(OsStr::new("/a:/b/c::/d"))).unwrap();
        let c: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        assert_eq!(c, [&b"/a/true"[..], b"/b/c/true", b"true", b"/d/true"]);
        let c = candidates(OsStr::new("./x"), Some(OsStr::new("/a"))).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].as_bytes(), b"./x");
        assert!(candidates(OsStr::new(""), None).is_err());
        assert!(candidates(OsStr::new("a\0b"), None).is_err());
    }
}
