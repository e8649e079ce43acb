//! The daemon's threads go ahead of its jobs on a busy CPU (`exec/priority.rs`): where it may,
//! the daemon lowers the nice value of its own threads, and its jobs keep the nice value the
//! daemon was started with.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::{DaemonProcess, node_config};

/// The nice value in a `/proc/.../stat` file.
fn nice_in(stat: &str) -> i32 {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(16))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no nice value in {stat:?}"))
}

/// The nice value of each thread of process `pid`, by thread name.
fn thread_nices(pid: i32) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue;
        };
        out.push((comm.trim().to_string(), nice_in(&stat)));
    }
    out
}

/// Started with nice 2: as root the daemon's own threads run at -3 and its job at 2; without
/// the right to lower a nice value everything stays at 2 and the log says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_keep_the_daemons_nice_value_while_its_threads_go_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nice.txt");
    let url = format!("sqlite://{}", dir.path().join("db.sqlite").display());
    let config = format!(
        "{node}\n[[job]]\nname = \"nice\"\nschedule = \"* * * * * *\"\n\
         command = 'cut -d \" \" -f 19 /proc/$$/stat > {out}.tmp && mv {out}.tmp {out}'\n",
        node = node_config(&url, "n", ""),
        out = out.display()
    );
    let path = dir.path().join("n.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("n.log");
    // `nice` replaces itself with the daemon: the child's PID is the daemon's.
    let child = Command::new("nice")
        .args(["-n", "2"])
        .arg(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("--config")
        .arg(&path)
        .arg("daemon")
        .env_remove("SQLCRON_DATABASE_URL")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .env_remove("INVOCATION_ID")
        .env("RUST_LOG", "sqlcron=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let daemon = DaemonProcess {
        child,
        name: "n".into(),
        log,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let job_nice: i32 = loop {
        if let Some(n) = std::fs::read_to_string(&out)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job never wrote its nice value; the daemon's log:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        job_nice, 2,
        "the job runs at the nice value the daemon started with"
    );
    let threads = thread_nices(daemon.pid());
    let lease = threads.iter().find(|(name, _)| name == "lease");
    assert!(
        lease.is_some(),
        "the daemon has a lease thread: {threads:?}"
    );
    let root = unsafe { libc::geteuid() } == 0;
    let own = if root {
        2 - sqlcron::exec::priority::BOOST
    } else {
        2
    };
    for (name, nice) in &threads {
        assert_eq!(*nice, own, "thread {name} of the daemon: {threads:?}");
    }
    let text = daemon.log_text();
    if root {
        assert!(
            text.contains("the daemon's threads go ahead of its jobs"),
            "{text}"
        );
    } else {
        assert!(text.contains("share the CPU with its jobs"), "{text}");
    }
    let status = daemon.stop();
    assert!(status.success(), "{status:?}");
}
