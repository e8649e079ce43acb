//! Applying a job's [`Limits`]: `setrlimit` values set in the child before `exec`, and a control
//! group per run for the values only cgroup v2 can enforce. No database.
//!
//! Control groups are used only where the daemon owns a delegated cgroup v2 subtree (systemd
//! with `Delegate=yes`): at first use the daemon moves its own processes into a leaf
//! `supervisor`, enables the memory, cpu and pids controllers for its children, and then gives
//! each run its own child group (`run-<job>-<n>`), removed when the run ends. Anywhere else the
//! cgroup limits are not applied: one log line says why, and each affected run's history says
//! so too.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::job::Limits;

/// Seconds between SIGXCPU (the soft CPU limit) and SIGKILL (the hard one).
const CPU_KILL_GRACE_SECS: u64 = 5;
/// `cpu.max` period, microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// One `setrlimit` call: resource, soft, hard.
pub type Rlimit = (libc::__rlimit_resource_t, libc::rlim_t, libc::rlim_t);

/// The `setrlimit` calls for `limits`, after checking that this process may set them (a
/// process that is not root cannot raise a hard limit).
pub fn rlimits(limits: &Limits) -> Result<Vec<Rlimit>, String> {
    let mut out = Vec::new();
    let mut push = |name: &str, resource, soft: u64, hard: u64| -> Result<(), String> {
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: cur is a valid out-parameter.
        unsafe { libc::getrlimit(resource, &mut cur) };
        if hard > cur.rlim_max && !crate::exec::account::is_root() {
            return Err(format!(
                "limits.{name}: {soft} is above this daemon's own hard limit ({})",
                cur.rlim_max
            ));
        }
        out.push((resource, soft, hard));
        Ok(())
    };
    if let Some(n) = limits.nofile {
        push("nofile", libc::RLIMIT_NOFILE, n, n)?;
    }
    if let Some(n) = limits.memory {
        push("memory", libc::RLIMIT_AS, n, n)?;
    }
    if let Some(n) = limits.cpu_time {
        push("cpu_time", libc::RLIMIT_CPU, n, n + CPU_KILL_GRACE_SECS)?;
    }
    if let Some(n) = limits.processes {
        push("processes", libc::RLIMIT_NPROC, n, n)?;
    }
    Ok(out)
}

/// Why a run that ended by `signal` ended, when a limit explains it.
pub fn signal_reason(limits: &Limits, signal: Option<i32>, oom_killed: bool) -> Option<String> {
    if oom_killed {
        let max = limits
            .memory_max
            .map(|m| format!(" ({m} bytes)"))
            .unwrap_or_default();
        return Some(format!(
            "killed by the OOM killer: limits.memory_max{max} reached"
        ));
    }
    match (signal, limits.cpu_time) {
        (Some(libc::SIGXCPU), Some(secs)) => Some(format!(
            "killed by SIGXCPU: limits.cpu_time ({secs}s of CPU) reached"
        )),
        (Some(libc::SIGKILL), Some(secs)) => Some(format!(
            "killed by SIGKILL: limits.cpu_time ({secs}s of CPU) reached, or killed from outside"
        )),
        (Some(libc::SIGXFSZ), _) => Some("killed by SIGXFSZ: file size limit reached".into()),
        _ => None,
    }
}

/// The delegated cgroup v2 directory this daemon owns, prepared for per-run children, or why
/// there is none. Found once per process.
pub fn cgroup_base() -> Result<&'static Path, &'static str> {
    static BASE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let base = BASE.get_or_init(|| {
        let found = prepare_base();
        match &found {
            Ok(p) => tracing::info!(cgroup = %p.display(), "per-run control groups enabled"),
            Err(why) => tracing::info!(
                "no per-run control groups ({why}): cgroup limits (memory_max, cpu_weight, \
                 cpu_quota, tasks_max) are not applied, and processes that leave a run are ended \
                 by the daemon as their subreaper"
            ),
        }
        found
    });
    base.as_deref().map_err(|e| e.as_str())
}

fn prepare_base() -> Result<PathBuf, String> {
    let root = Path::new("/sys/fs/cgroup");
    if !root.join("cgroup.controllers").exists() {
        return Err("no cgroup v2 hierarchy at /sys/fs/cgroup".into());
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 group")?;
    let mut base = root.join(rel.trim_start_matches('/'));
    // After a first preparation (a restart inside the same unit keeps nothing, but a second
    // call path might), the daemon already sits in the leaf.
    if base.file_name().is_some_and(|n| n == "supervisor") {
        base.pop();
    }
    if base == root {
        return Err("the daemon runs in the root cgroup (not a systemd service)".into());
    }
    let writable = |f: &str| {
        let c = CString::new(base.join(f).as_os_str().as_encoded_bytes()).unwrap_or_default();
        // SAFETY: c is a valid NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    };
    if !writable("cgroup.subtree_control") || !writable("cgroup.procs") {
        return Err(format!(
            "{} is not delegated to this daemon (set Delegate=yes in the unit)",
            base.display()
        ));
    }
    let leaf = base.join("supervisor");
    std::fs::create_dir_all(&leaf).map_err(|e| format!("{}: {e}", leaf.display()))?;
    // No process may stay in a group whose controllers are handed to children.
    let procs = std::fs::read_to_string(base.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter(|l| !l.is_empty()) {
        let _ = std::fs::write(leaf.join("cgroup.procs"), pid);
    }
    let available = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<String> = ["memory", "cpu", "pids"]
        .iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .map(|c| format!("+{c}"))
        .collect();
    std::fs::write(base.join("cgroup.subtree_control"), wanted.join(" "))
        .map_err(|e| format!("enabling {} in {}: {e}", wanted.join(" "), base.display()))?;
    Ok(base)
}

/// One run's control group; removed when dropped.
#[derive(Debug)]
pub struct RunCgroup {
    path: PathBuf,
    /// `<path>/cgroup.procs`, ready for the child to write itself into before `exec`.
    pub procs: CString,
}

impl RunCgroup {
    /// Creates the group of one run of `job` under `base` with the cgroup values of `limits`.
    pub fn create(base: &Path, job: &str, limits: &Limits) -> Result<RunCgroup, String> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let safe: String = job
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let path = base.join(format!(
            "run-{safe}-{}",
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path).map_err(|e| format!("cgroup {}: {e}", path.display()))?;
        let group = RunCgroup {
            procs: CString::new(path.join("cgroup.procs").as_os_str().as_encoded_bytes())
                .map_err(|_| "cgroup path has a NUL byte".to_string())?,
            path,
        };
        let set = |file: &str, value: String| {
            std::fs::write(group.path.join(file), &value)
                .map_err(|e| format!("cgroup {file} = {value}: {e}"))
        };
        if let Some(m) = limits.memory_max {
            set("memory.max", m.to_string())?;
            // Without this the limit would only push the job into swap.
            let _ = set("memory.swap.max", "0".into());
        }
        if let Some(w) = limits.cpu_weight {
            set("cpu.weight", w.to_string())?;
        }
        if let Some(pct) = limits.cpu_quota {
            set(
                "cpu.max",
                format!("{} {CPU_PERIOD_US}", pct * CPU_PERIOD_US / 100),
            )?;
        }
        if let Some(n) = limits.tasks_max {
            set("pids.max", n.to_string())?;
        }
        Ok(group)
    }

    /// Whether the kernel's OOM killer ended a process of the run.
    pub fn oom_killed(&self) -> bool {
        std::fs::read_to_string(self.path.join("memory.events"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.strip_prefix("oom_kill ").is_some_and(|n| n.trim() != "0"))
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        // Whatever of the run is left dies with its group (kernel 5.14+), then the group goes.
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        tracing::warn!(cgroup = %self.path.display(), "could not remove a run's control group");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rlimits_map_keys_to_resources() {
        let l = Limits {
            nofile: Some(64),
            cpu_time: Some(10),
            ..Limits::default()
        };
        let r = rlimits(&l).unwrap();
        assert_eq!(r[0], (libc::RLIMIT_NOFILE, 64, 64));
        assert_eq!(r[1], (libc::RLIMIT_CPU, 10, 10 + CPU_KILL_GRACE_SECS));
    }

    /// The files a run's group gets, checked in a plain directory (the kernel's cgroup v2
    /// interface is files of the same names; this machine's tests cannot delegate one).
    #[test]
    fn run_group_gets_the_cgroup_values_and_reads_oom_kills() {
        let base = tempfile::tempdir().unwrap();
        let l = Limits {
            memory_max: Some(64 << 20),
            cpu_weight: Some(50),
            cpu_quota: Some(25),
            tasks_max: Some(16),
            ..Limits::default()
        };
        let group = RunCgroup::create(base.path(), "nightly backup/1", &l).unwrap();
        let dir = std::fs::read_dir(base.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("run-nightly_backup_1-"), "{name}");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("memory.max"), "67108864");
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("cpu.weight"), "50");
        assert_eq!(read("cpu.max"), format!("25000 {CPU_PERIOD_US}"));
        assert_eq!(read("pids.max"), "16");
        assert_eq!(
            group.procs.to_str().unwrap(),
            dir.join("cgroup.procs").to_str().unwrap()
        );
        assert!(!group.oom_killed());
        std::fs::write(dir.join("memory.events"), "low 0\noom 1\noom_kill 1\n").unwrap();
        assert!(group.oom_killed());
    }

    #[test]
    fn reasons_name_the_limit() {
        let l = Limits {
            cpu_time: Some(2),
            memory_max: Some(1 << 20),
            ..Limits::default()
        };
        assert_eq!(
            signal_reason(&l, Some(libc::SIGXCPU), false).unwrap(),
            "killed by SIGXCPU: limits.cpu_time (2s of CPU) reached"
        );
        assert!(
            signal_reason(&l, Some(libc::SIGKILL), true)
                .unwrap()
                .starts_with("killed by the OOM killer: limits.memory_max (1048576 bytes)")
        );
        assert_eq!(
            signal_reason(&Limits::default(), Some(libc::SIGTERM), false),
            None
        );
    }
}
