//! What a run's process does between its start and its `exec`: become the subreaper of its
//! own processes, join its control group, take its limits, switch to the job's account and
//! enter its directory. Runs in the child (after `fork`, or in `clone_spawn`'s child that
//! shares the daemon's memory): system calls only, on data prepared before.

/// The system calls that set 32-bit ids (the plain ones are 16-bit on 32-bit x86 and ARM).
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETGROUPS: libc::c_long = libc::SYS_setgroups32;
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETGID: libc::c_long = libc::SYS_setgid32;
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
const SYS_SETUID: libc::c_long = libc::SYS_setuid32;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETGROUPS: libc::c_long = libc::SYS_setgroups;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETGID: libc::c_long = libc::SYS_setgid;
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
const SYS_SETUID: libc::c_long = libc::SYS_setuid;

/// In the child, before `exec`: with `subreaper` (a run that keeps its own orphans, see
/// `orphans.rs`), become the subreaper of what the run starts (kept across
/// `exec`: a process of the run whose parent dies is handed to the run's main process, not to
/// the daemon, as long as the main process lives), join the run's control group, set the
/// limits, drop to the job's account (groups first, then gid, then uid: after setuid nothing
/// else may change), then enter the working directory as that account.
pub(crate) fn setup_child(
    subreaper: bool,
    cgroup_procs: Option<&std::ffi::CString>,
    rlimits: &[crate::exec::limits::Rlimit],
    account: Option<&crate::exec::account::Account>,
    workdir: Option<&std::ffi::CString>,
) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls on pointers that stay valid for the call.
    unsafe {
        if subreaper {
            check(libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))?;
        }
        if let Some(path) = cgroup_procs {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if rc != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        for &(resource, soft, hard) in rlimits {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            check(libc::setrlimit(resource, &lim))?;
        }
        // Raw system calls: the C library's wrappers act on every thread of the process as the
        // library knows them, and a child sharing the daemon's memory (`clone_spawn`) sees the
        // daemon's list of threads. The raw calls change this process only, by construction.
        if let Some(a) = account {
            let raw = |rc: libc::c_long| check(if rc == 0 { 0 } else { -1 });
            raw(libc::syscall(
                SYS_SETGROUPS,
                a.groups.len(),
                a.groups.as_ptr(),
            ))?;
            raw(libc::syscall(SYS_SETGID, a.gid))?;
            raw(libc::syscall(SYS_SETUID, a.uid))?;
            // The switch made the memory this process shares with the daemon until its `exec`
            // "dumpable" as `fs.suid_dumpable` says: not while it has the job's ids (the daemon
            // puts its own setting back once this process has called `exec`).
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
        }
        if let Some(dir) = workdir {
            check(libc::chdir(dir.as_ptr()))?;
        }
    }
    Ok(())
}
