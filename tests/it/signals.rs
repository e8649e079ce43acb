//! SIGTERM with a running job, SIGHUP with a valid and a broken file, and drift between nodes.

use std::time::{Duration, Instant};

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_a_running_job_for_takeover() {
    let db = TestDb::new(Dialect::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    // A long job, and a lease long enough that a takeover before it ends proves the release.
    let extra = format!(
        "[[job]]\nname = \"long\"\nschedule = \"0 0 1 1 *\"\nkill_grace = \"1s\"\ncommand = \"echo start $SQLCRON_NODE $SQLCRON_ATTEMPT >> {}; sleep 60\"\n",
        out.display()
    );
    let config = |name: &str| {
        node_config(&db.url, name, "")
            .replace("lease = \"3s\"", "lease = \"30s\"")
            .replace("shutdown_grace = \"5s\"", "shutdown_grace = \"1s\"")
            + &extra
    };
    let a = DaemonProcess::start(dir.path(), "a", &config("a"));
    let store = db.store().await;
    eventually(Duration::from_secs(10), "job applied", || async {
        store.job("long").await.unwrap().and_then(|j| j.next_exec)
    })
    .await;
    // Make it due now; only node a runs so far.
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET slot = {now}, next_exec = {now} WHERE name = 'long'"
        ))
        .await
        .unwrap();
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    eventually(
        Duration::from_secs(5),
        "node a to start the job",
        || async { read().contains("start a 1").then_some(()) },
    )
    .await;
    let b = DaemonProcess::start(dir.path(), "b", &config("b"));
    let t = Instant::now();
    let log_a = a.log_text();
    let status = a.stop();
    assert!(status.success(), "{log_a}");
    // Grace 1 s + kill grace 1 s, then the row is released at once.
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "stop took {:?}",
        t.elapsed()
    );
    eventually(
        Duration::from_secs(10),
        "node b to take the slot over",
        || async { read().contains("start b 2").then_some(()) },
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "takeover waited for the lease: {:?}",
        t.elapsed()
    );
    let history = store.history(Some("long"), 10).await.unwrap();
    let first = history.iter().find(|h| h.attempt == 1).unwrap();
    assert_eq!(first.outcome, "lost");
    assert!(
        first
            .message
            .as_deref()
            .unwrap_or("")
            .contains("shutdown of node a")
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_valid_file_and_keeps_the_old_one_when_broken() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str| {
        format!("[[job]]\nname = \"{name}\"\nschedule = \"@daily\"\ncommand = \"true\"\n")
    };
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &job("one")));
    let store = db.store().await;
    eventually(Duration::from_secs(10), "first apply", || async {
        store.job("one").await.unwrap().map(|_| ())
    })
    .await;
    let path = dir.path().join("n.toml");
    std::fs::write(&path, node_config(&db.url, "n", &job("two"))).unwrap();
    node.signal(libc::SIGHUP);
    eventually(Duration::from_secs(5), "reload", || async {
        let names: Vec<String> = store
            .jobs()
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.name)
            .collect();
        (names == vec!["two".to_string()]).then_some(())
    })
    .await;
    std::fs::write(&path, "[daemon]\nlease = \n").unwrap();
    node.signal(libc::SIGHUP);
    eventually(
        Duration::from_secs(5),
        "the broken file to be reported",
        || async {
            node.log_text()
                .contains("configuration not reloaded, keeping the running one")
                .then_some(())
        },
    )
    .await;
    let log = node.log_text();
    assert!(log.contains("n.toml: line 2:"), "{log}");
    assert_eq!(store.job("two").await.unwrap().unwrap().name, "two");
    assert!(node.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_drift_between_nodes() {
    let db = TestDb::new(Dialect::Mysql).await;
    let dir = tempfile::tempdir().unwrap();
    let a_jobs = "[[job]]\nname = \"x\"\nschedule = \"@daily\"\ncommand = \"true\"\n";
    let b_jobs = "[[job]]\nname = \"x\"\nschedule = \"@hourly\"\ncommand = \"true\"\n";
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", a_jobs));
    let store = db.store().await;
    eventually(Duration::from_secs(10), "node a registered", || async {
        (store.nodes().await.unwrap().len() == 1).then_some(())
    })
    .await;
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", b_jobs));
    eventually(Duration::from_secs(10), "node b registered", || async {
        (store.nodes().await.unwrap().len() == 2).then_some(())
    })
    .await;
    let cfg = dir.path().join("a.toml");
    let r = sqlcron(&["--config", cfg.to_str().unwrap(), "status", "--json"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let status: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let drift = status["drift"].as_array().unwrap();
    assert_eq!(drift.len(), 1, "{status}");
    assert_eq!(drift[0]["job"], "x");
    assert!(drift[0]["nodes"]["a"].is_string() && drift[0]["nodes"]["b"].is_string());
    assert_ne!(drift[0]["nodes"]["a"], drift[0]["nodes"]["b"]);
    let human = sqlcron(&["--config", cfg.to_str().unwrap(), "status"]);
    assert!(crate::util::stdout(&human).contains("CONFIGURATION DRIFT"));
    assert!(a.stop().success());
    assert!(b.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_sigterm_stops_running_jobs_at_once() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("started");
    let jobs = format!(
        "[[job]]\nname = \"long\"\nschedule = \"* * * * * *\"\nkill_grace = \"1s\"\ncommand = \"touch {}; sleep 60\"\n",
        out.display()
    );
    let config = node_config(&db.url, "n", &jobs)
        .replace("shutdown_grace = \"5s\"", "shutdown_grace = \"60s\"");
    let mut node = DaemonProcess::start(dir.path(), "n", &config);
    eventually(Duration::from_secs(5), "the job to start", || async {
        out.exists().then_some(())
    })
    .await;
    node.signal(libc::SIGTERM);
    eventually(Duration::from_secs(5), "the soft stop", || async {
        node.log_text()
            .contains("stopping: no more claims")
            .then_some(())
    })
    .await;
    let t = Instant::now();
    node.signal(libc::SIGTERM);
    let status = node.child.wait().unwrap();
    assert!(status.success());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the second SIGTERM did not cut the 60 s grace: {:?}",
        t.elapsed()
    );
}

/// Whether any process of the group is still alive.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// Waits until the daemon logged that it started the process group `pgid` (and so handed it to
/// its reaper: the shell may write its PID before the daemon gets there on a loaded machine).
async fn wait_registered(node: &DaemonProcess, pgid: i32) {
    eventually(
        Duration::from_secs(5),
        "the job's process handed over",
        || async {
            node.log_text()
                .lines()
                .any(|l| l.contains("job process started") && l.contains(&format!("pgid={pgid}")))
                .then_some(())
        },
    )
    .await;
}

/// Waits up to 5 s for a killed daemon's job group to end; kills it if not (the test started
/// it), then fails.
async fn assert_group_ends(pgid: i32, log: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while group_alive(pgid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let survived = group_alive(pgid);
    if survived {
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
    assert!(
        !survived,
        "the job's process group outlived the daemon by 5 s\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_daemon_takes_its_jobs_process_groups_with_it() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids.txt");
    // The shell writes its PID (= its process group) and leaves a grandchild running too.
    let extra = format!(
        "[[job]]\nname = \"tree\"\nschedule = \"* * * * * *\"\ncommand = \"echo $$ >> {}; sleep 60 & sleep 60\"\n",
        pids.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &extra));
    let pgid: i32 = eventually(Duration::from_secs(15), "the job to start", || async {
        std::fs::read_to_string(&pids)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
    })
    .await;
    assert!(group_alive(pgid));
    wait_registered(&node, pgid).await;
    let log = node.log_text();
    node.signal(libc::SIGKILL);
    assert_group_ends(pgid, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_reaper_is_replaced_and_told_the_running_jobs() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids.txt");
    // A long job, and a short one whose starts make the daemon talk to its reaper.
    let extra = format!(
        "[[job]]\nname = \"tree\"\nschedule = \"* * * * * *\"\ncommand = \"echo $$ >> {}; sleep 60\"\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        pids.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &extra));
    let reaper: i32 = eventually(Duration::from_secs(10), "the reaper's pid", || async {
        node.log_text()
            .lines()
            .find(|l| l.contains("job reaper started"))
            .and_then(|l| l.split("pid=").nth(1))
            .and_then(|p| p.trim().parse().ok())
    })
    .await;
    let pgid: i32 = eventually(Duration::from_secs(15), "the job to start", || async {
        std::fs::read_to_string(&pids)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
    })
    .await;
    wait_registered(&node, pgid).await;
    // SAFETY: the reaper is a child of the daemon this test started.
    unsafe { libc::kill(reaper, libc::SIGKILL) };
    eventually(Duration::from_secs(10), "a new reaper", || async {
        node.log_text()
            .contains("the job reaper was gone; started a new one")
            .then_some(())
    })
    .await;
    let log = node.log_text();
    node.signal(libc::SIGKILL);
    assert_group_ends(pgid, &log).await;
}

/// The first PID written to `file` by a job, once there is one.
async fn first_pid(file: &std::path::Path, what: &str) -> i32 {
    eventually(Duration::from_secs(15), what, || async {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
    })
    .await
}

/// Waits up to 5 s for a process a run left behind to end; kills it if not (the test's job
/// started it), then fails naming `what`.
async fn assert_ends(pid: i32, what: &str, log: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while crate::util::alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let survived = crate::util::alive(pid);
    if survived {
        // SAFETY: kill has no memory-safety preconditions; the PID is the test job's.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(!survived, "{what} outlived its run by 5 s\n{}", log());
}

/// Processes that leave the run's process group (`setsid`), with or without their environment,
/// and a plain `cmd &`, end with the run: when it ends `ok` and when it times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_a_run_leaves_behind_end_with_it() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let file = |n: &str| dir.path().join(format!("{n}.pid"));
    // The run waits until the escaped process has written its PID (it touches the file named
    // in its $0, one per run): a run that ended first would take it along before it wrote,
    // which is right but leaves nothing to watch.
    let escape = |n: &str, env: &str| {
        format!(
            "setsid {env} sh -c 'echo $$ >> {}; : > $0; exec sleep 300' {d}/ready.$$ >/dev/null 2>&1 & \
             while [ ! -e {d}/ready.$$ ]; do sleep 0.05; done;",
            file(n).display(),
            d = dir.path().display()
        )
    };
    let job = |name: &str, extra: &str, command: String| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"*/2 * * * * *\"\n{extra}command = \"{}\"\n",
            command.replace('"', "\\\"")
        )
    };
    let jobs = [
        job("setsid", "", format!("{} echo ok", escape("setsid", ""))),
        job(
            "cleared",
            "",
            format!("{} echo ok", escape("cleared", "env -i")),
        ),
        job(
            "background",
            "",
            format!(
                "sleep 300 >/dev/null 2>&1 & echo $! >> {}",
                file("background").display()
            ),
        ),
        job(
            "timeout",
            "timeout = \"1s\"\nkill_grace = \"1s\"\n",
            format!("{} sleep 60", escape("timeout", "")),
        ),
    ]
    .concat();
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &jobs));
    let store = db.store().await;
    for name in ["setsid", "cleared", "background", "timeout"] {
        let pid = first_pid(&file(name), &format!("{name}'s process")).await;
        assert_ends(pid, name, || node.log_text()).await;
    }
    // The runs that left something behind are recorded as they ended: ok, or timed out (the
    // record is written just after the sweep).
    for (job, outcome) in [("setsid", "ok"), ("timeout", "timeout")] {
        eventually(
            Duration::from_secs(15),
            &format!("a run of {job} recorded {outcome}"),
            || async {
                let history = store.history(Some(job), 20).await.unwrap();
                history.iter().any(|r| r.outcome == outcome).then_some(())
            },
        )
        .await;
    }
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// A process that leaves its run and sets `SQLCRON_RUN_ID` to another run's id is not spared
/// while that other run goes on: the id carries a secret the job cannot guess. The forger
/// tries every id the old form (`<instance>.<n>`) could give, with and without its own
/// secret, and made-up ones (`x1`); `hold` runs the whole time, and every escaped process ends
/// with the forger's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_run_id_spares_no_process() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let forge = dir.path().join("forge.sh");
    std::fs::write(
        &forge,
        format!(
            r#"id=$SQLCRON_RUN_ID
p=${{id%%.*}}; rest=${{id#*.}}; n=${{rest%%.*}}; secret=${{id##*.}}
total=0
for k in $(seq 1 $((n + 3))); do
  for forged in "$p.$k" "$p.$k.$secret" "x$k"; do
    SQLCRON_RUN_ID=$forged setsid sh -c 'echo $$ >> {d}/forged.pid; exec sleep 300' >/dev/null 2>&1 &
    total=$((total + 1))
  done
done
while [ "$(cat {d}/forged.pid 2>/dev/null | wc -l)" -lt "$total" ]; do sleep 0.05; done
echo forged $total
"#
        ),
    )
    .unwrap();
    let jobs = format!(
        "[[job]]\nname = \"hold\"\nschedule = \"*/2 * * * * *\"\ncommand = \"echo $$ > {d}/hold.pid; exec sleep 120\"\n\
         [[job]]\nname = \"forger\"\nschedule = \"0 0 1 1 *\"\ncommand = \"sh {}\"\n",
        forge.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &jobs));
    let store = db.store().await;
    let hold = first_pid(&dir.path().join("hold.pid"), "hold to start").await;
    eventually(Duration::from_secs(10), "forger applied", || async {
        store.job("forger").await.unwrap().and_then(|j| j.next_exec)
    })
    .await;
    let cfg = dir.path().join("n.toml");
    let r = sqlcron(&["--config", cfg.to_str().unwrap(), "run", "forger"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    eventually(
        Duration::from_secs(20),
        "the forger's run ended ok",
        || async {
            let history = store.history(Some("forger"), 5).await.unwrap();
            history.iter().any(|r| r.outcome == "ok").then_some(())
        },
    )
    .await;
    let pids: Vec<i32> = std::fs::read_to_string(dir.path().join("forged.pid"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(pids.len() >= 4, "{pids:?}");
    for pid in pids {
        assert_ends(pid, "a process with a forged run id", || node.log_text()).await;
    }
    assert!(
        crate::util::alive(hold),
        "hold's run, whose id the forger tried, ended: the test proved nothing\n{}",
        node.log_text()
    );
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// Under a root daemon, a run as another user keeps what it starts until it ends: a process
/// that left the run's process group ends with the run, whether it cleared its environment or
/// set `SQLCRON_RUN_ID` to the id of a run of the daemon's own account still going (here read
/// from a file, as if it had learned it). Before, both lived on while that other run went on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_escapes_end_with_their_run_whatever_their_environment() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED another_users_escapes_end_with_their_run: needs root to switch users");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = shared.display();
    let jobs = format!(
        r#"[[job]]
name = "hold"
schedule = "*/2 * * * * *"
command = '''echo $SQLCRON_RUN_ID > {s}/hold.id; echo $$ > {s}/hold.pid; exec sleep 120'''
[[job]]
name = "escaper"
schedule = "0 0 1 1 *"
user = "nobody"
command = '''setsid env -i sh -c 'echo $$ > {s}/cleared.pid; exec sleep 300' >/dev/null 2>&1 &
SQLCRON_RUN_ID=$(cat {s}/hold.id) setsid sh -c 'echo $$ > {s}/copied.pid; exec sleep 300' >/dev/null 2>&1 &
while [ ! -s {s}/cleared.pid ] || [ ! -s {s}/copied.pid ]; do sleep 0.05; done; id -un'''
"#
    );
    let config = format!(
        "[database]\nurl = \"{}\"\n[node]\nname = \"n\"\n[daemon]\ndefault_user = \"root\"\n\
         allowed_users = [\"root\", \"nobody\"]\npoll_interval = \"1s\"\nlease = \"3s\"\n\
         shutdown_grace = \"5s\"\n{jobs}",
        db.url
    );
    let node = DaemonProcess::start(dir.path(), "n", &config);
    let store = db.store().await;
    let hold = first_pid(&shared.join("hold.pid"), "hold to start").await;
    eventually(Duration::from_secs(10), "hold's id written", || async {
        std::fs::read_to_string(shared.join("hold.id"))
            .ok()
            .filter(|t| t.trim().len() > 10)
    })
    .await;
    eventually(Duration::from_secs(10), "escaper applied", || async {
        store
            .job("escaper")
            .await
            .unwrap()
            .and_then(|j| j.next_exec)
    })
    .await;
    let cfg = dir.path().join("n.toml");
    let r = sqlcron(&["--config", cfg.to_str().unwrap(), "run", "escaper"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let run = eventually(
        Duration::from_secs(20),
        "escaper's run ended ok",
        || async {
            let history = store.history(Some("escaper"), 5).await.unwrap();
            history.into_iter().find(|r| r.outcome == "ok")
        },
    )
    .await;
    assert!(
        format!("{run:?}").contains("nobody"),
        "the run switched to nobody: {run:?}"
    );
    for what in ["cleared", "copied"] {
        let pid = first_pid(&shared.join(format!("{what}.pid")), what).await;
        assert_ends(pid, &format!("nobody's {what} process"), || node.log_text()).await;
    }
    assert!(
        crate::util::alive(hold),
        "hold's run, whose id was copied, ended: the test proved nothing\n{}",
        node.log_text()
    );
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// A killed daemon's reaper ends what its runs left outside their process groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_daemon_takes_escaped_processes_with_it() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids.txt");
    let escaped = dir.path().join("escaped.txt");
    let extra = format!(
        "[[job]]\nname = \"tree\"\nschedule = \"0 0 1 1 *\"\ncommand = \"echo $$ >> {}; setsid sh -c 'echo $$ >> {}; exec sleep 300' >/dev/null 2>&1 & sleep 60\"\n",
        pids.display(),
        escaped.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &extra));
    let store = db.store().await;
    eventually(Duration::from_secs(10), "the job applied", || async {
        store.job("tree").await.unwrap().and_then(|j| j.next_exec)
    })
    .await;
    let cfg = dir.path().join("n.toml");
    let r = sqlcron(&["--config", cfg.to_str().unwrap(), "run", "tree"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let pgid = first_pid(&pids, "the job to start").await;
    let pid = first_pid(&escaped, "the escaped process").await;
    wait_registered(&node, pgid).await;
    let log = node.log_text();
    node.signal(libc::SIGKILL);
    assert_group_ends(pgid, &log).await;
    assert_ends(pid, "the escaped process", || log.clone()).await;
    store.close().await;
}

/// `CLOCK_MONOTONIC` now in milliseconds: the clock of the reaper's deadlines.
fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The reaper gathers the daemon's lines after each read; a refresh written while it gathers,
/// before the deadline it moves, must keep the group alive (the lines waiting are read before
/// any deadline is judged). At the end of file the group is killed.
#[test]
fn a_refresh_written_while_the_reaper_gathers_keeps_the_group() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut reaper = std::process::Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("__reaper")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = reaper.stdin.take().unwrap();
    let mut group = std::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = group.id();
    // The reaper waiting on its pipe: named, and asleep in `poll`.
    let pid = reaper.id();
    let ready = Instant::now() + Duration::from_secs(10);
    while Instant::now() < ready {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let asleep = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'));
        if comm.trim() == "sqlcron-reaper" && asleep {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // A registration whose deadline falls inside the gathering that its read starts, then,
    // once the reaper has read it and gathers, the refresh (the pause places the refresh in
    // the gathering; it synchronises nothing).
    let deadline = monotonic_ms() + 9;
    pipe.write_all(format!("+{pgid} {deadline} t.1\n").as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(3));
    pipe.write_all(format!("~{pgid} {}\n", deadline + 600_000).as_bytes())
        .unwrap();
    let refreshed_in_time = monotonic_ms() < deadline;
    // Well past the deadline and any gathering.
    let watch_until = Instant::now() + Duration::from_millis(300);
    let mut killed = None;
    while Instant::now() < watch_until && killed.is_none() {
        killed = group.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    if refreshed_in_time {
        assert_eq!(killed, None, "the group was killed despite its refresh");
    } else {
        eprintln!("the refresh was written after the deadline (a loaded machine): not judged");
    }
    // The end of file: every group still registered is killed.
    drop(pipe);
    let ended = Instant::now() + Duration::from_secs(10);
    while killed.is_none() && Instant::now() < ended {
        killed = group.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let outlived = killed.is_none();
    if outlived {
        let _ = group.kill();
    }
    let _ = group.wait();
    let _ = reaper.wait();
    assert!(!outlived, "the group outlived the reaper's end of file");
}
