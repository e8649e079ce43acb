//! The service around the daemon: the systemd unit, the install script, the sd_notify protocol
//! (this test plays systemd) and native journald logging.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlcron::store::Dialect;

use crate::outage::ThrowawayPostgres;
use crate::util::{DaemonProcess, TestDb, node_config};

#[test]
fn completions_offer_the_visible_subcommands_only() {
    for shell in ["bash", "zsh", "fish"] {
        let out = crate::util::sqlcron(&["completions", shell]);
        assert!(out.status.success());
        let text = crate::util::stdout(&out);
        for visible in ["daemon", "status", "history", "lock", "next", "config"] {
            assert!(text.contains(visible), "{shell}: {visible} missing");
        }
        for hidden in ["__reaper", "completions"] {
            assert!(!text.contains(hidden), "{shell}: offers {hidden}");
        }
    }
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string("systemd/sqlcron.service").unwrap();
    // verify checks that ExecStart exists: point it at the binary under test.
    let unit = unit.replace("/usr/bin/sqlcron", env!("CARGO_BIN_EXE_sqlcron"));
    let path = dir.path().join("sqlcron.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze is required (apt-get install systemd; scripts/test.sh does it)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn unit_gives_the_daemon_time_to_release_before_killing() {
    let unit = std::fs::read_to_string("systemd/sqlcron.service").unwrap();
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} missing"))
            .to_string()
    };
    assert_eq!(value("Type"), "notify");
    assert_eq!(value("KillMode"), "mixed");
    let stop = humantime::parse_duration(&value("TimeoutStopSec")).unwrap();
    let defaults = sqlcron::config::DaemonConfig::default();
    let policy = sqlcron::model::job::Policy::default();
    assert!(
        stop > defaults.shutdown_grace + policy.kill_grace + Duration::from_secs(10),
        "TimeoutStopSec {stop:?} must exceed shutdown_grace + kill_grace with room to release"
    );
    let watchdog = humantime::parse_duration(&value("WatchdogSec")).unwrap();
    assert!(watchdog > Duration::from_secs(10) + defaults.poll_interval);
}

#[test]
fn install_script_stages_binary_unit_config_man_page_and_completions() {
    let dest = tempfile::tempdir().unwrap();
    let out = Command::new("scripts/install.sh")
        .env("DESTDIR", dest.path())
        .env("SQLCRON_BIN", env!("CARGO_BIN_EXE_sqlcron"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in [
        "usr/bin/sqlcron",
        "lib/systemd/system/sqlcron.service",
        "etc/sqlcron/sqlcron.toml",
        "usr/share/man/man8/sqlcron.8.gz",
        "usr/share/man/man8/sqlcron-daemon.8.gz",
        "usr/share/man/man1/sqlcron-status.1.gz",
        "usr/share/man/man5/sqlcron.toml.5.gz",
        "usr/share/bash-completion/completions/sqlcron",
        "usr/share/zsh/vendor-completions/_sqlcron",
        "usr/share/fish/vendor_completions.d/sqlcron.fish",
    ] {
        let meta = std::fs::metadata(dest.path().join(file)).unwrap_or_else(|_| panic!("{file}"));
        assert!(meta.len() > 0, "{file} is empty");
    }
    // The installed configuration is valid and defines no job yet.
    let cfg = dest.path().join("etc/sqlcron/sqlcron.toml");
    let check = crate::util::sqlcron(&["--config", cfg.to_str().unwrap(), "check"]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        crate::util::stderr(&check)
    );
    assert!(crate::util::stdout(&check).contains("ok (0 job(s)"));
}

/// Messages received on a NOTIFY_SOCKET, with their arrival time.
struct NotifyListener {
    socket: UnixDatagram,
    seen: Vec<(Instant, String)>,
}

impl NotifyListener {
    fn bind(path: &Path) -> NotifyListener {
        let socket = UnixDatagram::bind(path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        NotifyListener {
            socket,
            seen: vec![],
        }
    }

    fn drain(&mut self) {
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            for line in text.lines() {
                self.seen.push((Instant::now(), line.to_string()));
            }
        }
    }

    /// Waits for a message starting with `prefix` that arrives after `since`.
    fn wait_for(&mut self, prefix: &str, since: Instant, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            self.drain();
            if let Some((_, m)) = self
                .seen
                .iter()
                .find(|(t, m)| *t >= since && m.starts_with(prefix))
            {
                return m.clone();
            }
            assert!(
                start.elapsed() < timeout,
                "no {prefix} within {timeout:?}; got {:?}",
                self.seen.iter().map(|(_, m)| m).collect::<Vec<_>>()
            );
        }
    }

    fn count_since(&mut self, prefix: &str, since: Instant) -> usize {
        self.drain();
        self.seen
            .iter()
            .filter(|(t, m)| *t >= since && m.starts_with(prefix))
            .count()
    }
}

/// All processes of a PostgreSQL instance: the postmaster and its children.
fn postgres_pids(data: &Path) -> Vec<i32> {
    let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
    let master: i32 = pid_file.lines().next().unwrap().trim().parse().unwrap();
    let mut pids = vec![master];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(master) {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plays_systemd_ready_watchdog_status_reload_stall_and_stop() {
    let pg = ThrowawayPostgres::start();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("notify.sock");
    let mut notify = NotifyListener::bind(&sock);
    let cfg_path = dir.path().join("n.toml");
    let job = "[[job]]\nname = \"later\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";
    std::fs::write(&cfg_path, node_config(&pg.url(), "n", job)).unwrap();
    let log = dir.path().join("n.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("--config")
        .arg(&cfg_path)
        .arg("daemon")
        .env("NOTIFY_SOCKET", &sock)
        .env("WATCHDOG_USEC", "3000000")
        .env_remove("WATCHDOG_PID")
        .env_remove("JOURNAL_STREAM")
        .env_remove("INVOCATION_ID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let guard = scopeguard(child.id() as i32);
    let t0 = Instant::now();
    notify.wait_for("READY=1", t0, Duration::from_secs(20));
    // The poll loop pings at least once per poll interval (1 s).
    let after_ready = Instant::now();
    std::thread::sleep(Duration::from_millis(3200));
    let pings = notify.count_since("WATCHDOG=1", after_ready);
    assert!(pings >= 2, "only {pings} watchdog pings in 3.2 s");
    let status = notify.wait_for("STATUS=", after_ready, Duration::from_secs(2));
    assert!(
        status.starts_with("STATUS=0 running, next: later in "),
        "{status}"
    );

    // SIGHUP: RELOADING=1 then READY=1.
    let hup = Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    notify.wait_for("RELOADING=1", hup, Duration::from_secs(5));
    let reloaded = notify.wait_for("READY=1", hup, Duration::from_secs(5));
    assert_eq!(reloaded, "READY=1");

    // A database that stops answering wedges the loop: the pings stop.
    let pids = postgres_pids(&pg.data);
    for pid in &pids {
        unsafe { libc::kill(*pid, libc::SIGSTOP) };
    }
    std::thread::sleep(Duration::from_millis(1500));
    let frozen = Instant::now();
    std::thread::sleep(Duration::from_millis(3000));
    let pings_frozen = notify.count_since("WATCHDOG=1", frozen);
    for pid in &pids {
        unsafe { libc::kill(*pid, libc::SIGCONT) };
    }
    assert_eq!(pings_frozen, 0, "watchdog pinged while the loop was stuck");
    let thawed = Instant::now();
    notify.wait_for("WATCHDOG=1", thawed, Duration::from_secs(10));

    // SIGTERM: STOPPING=1, then a clean exit.
    let term = Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    notify.wait_for("STOPPING=1", term, Duration::from_secs(5));
    let status = child.wait().unwrap();
    drop(guard);
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// Kills a process by PID if the test panics before it ends.
fn scopeguard(pid: i32) -> impl Drop {
    struct Guard(i32);
    impl Drop for Guard {
        fn drop(&mut self) {
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    Guard(pid)
}

/// The journald path: with no journald on the machine the test listens on the journal socket
/// itself and checks the native-protocol fields; with a journald it asks journalctl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_natively_to_journald_with_job_fields() {
    const SOCKET: &str = "/run/systemd/journal/socket";
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let job = "[log]\ntarget = \"journald\"\n[[job]]\nname = \"journaled\"\nschedule = \"* * * * * *\"\ncommand = \"echo hello-journal\"\n";
    // A socket file nobody listens on (left by an interrupted run of this test) is not a journald.
    let real_journald = Path::new(SOCKET).exists()
        && UnixDatagram::unbound()
            .and_then(|s| s.connect(SOCKET))
            .is_ok();
    if !real_journald {
        let _ = std::fs::remove_file(SOCKET);
    }
    if real_journald {
        let node = DaemonProcess::start(dir.path(), "j", &node_config(&db.url, "j", job));
        let mut found = String::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            let out = Command::new("journalctl")
                .args([
                    "-o",
                    "verbose",
                    "--no-pager",
                    "SQLCRON_JOB=journaled",
                    "SQLCRON_NODE=j",
                ])
                .output()
                .unwrap();
            found = String::from_utf8_lossy(&out.stdout).into_owned();
            if found.contains("SQLCRON_OUTCOME=ok") && found.contains("hello-journal") {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(found.contains("SQLCRON_OUTCOME=ok"), "{found}");
        assert!(node.stop().success());
        return;
    }
    std::fs::create_dir_all("/run/systemd/journal")
        .expect("create /run/systemd/journal (root needed)");
    let socket = UnixDatagram::bind(SOCKET).unwrap();
    struct Remove;
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(SOCKET);
        }
    }
    let _remove = Remove;
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "j", &node_config(&db.url, "j", job));
    let mut entries: Vec<Vec<(String, String)>> = vec![];
    let start = Instant::now();
    let mut buf = vec![0u8; 65536];
    let get = |e: &[(String, String)], key: &str| {
        e.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    let done = |entries: &[Vec<(String, String)>]| {
        entries
            .iter()
            .any(|e| get(e, "SQLCRON_OUTCOME").as_deref() == Some("ok"))
            && entries
                .iter()
                .any(|e| get(e, "MESSAGE").as_deref() == Some("hello-journal"))
    };
    while start.elapsed() < Duration::from_secs(15) && !done(&entries) {
        if let Ok(n) = socket.recv(&mut buf) {
            entries.push(parse_journal_entry(&buf[..n]));
        }
    }
    let log_text = node.log_text();
    assert!(node.stop().success(), "{log_text}");
    let finished = entries
        .iter()
        .find(|e| get(e, "SQLCRON_OUTCOME").as_deref() == Some("ok"))
        .unwrap_or_else(|| panic!("no finished event among {} entries", entries.len()));
    assert_eq!(get(finished, "SQLCRON_JOB").as_deref(), Some("journaled"));
    assert_eq!(get(finished, "SQLCRON_NODE").as_deref(), Some("j"));
    assert_eq!(
        get(finished, "PRIORITY").as_deref(),
        Some("5"),
        "info maps to notice"
    );
    assert_eq!(
        get(finished, "SYSLOG_IDENTIFIER").as_deref(),
        Some("sqlcron")
    );
    assert!(get(finished, "SQLCRON_SLOT").is_some_and(|s| s.ends_with('Z')));
    // Issue 26 (9): `exit=0`, not `exit_code=Some(0) signal=None`.
    assert_eq!(get(finished, "SQLCRON_EXIT").as_deref(), Some("0"));
    assert_eq!(get(finished, "SQLCRON_SIGNAL"), None);
    assert_eq!(get(finished, "SQLCRON_EXIT_CODE"), None);
    let output = entries
        .iter()
        .find(|e| get(e, "MESSAGE").as_deref() == Some("hello-journal"))
        .unwrap();
    assert_eq!(
        get(output, "SQLCRON_JOB").as_deref(),
        Some("journaled"),
        "job output is attributed"
    );
    assert_eq!(get(output, "SQLCRON_STREAM").as_deref(), Some("stdout"));
}

/// Parses one datagram of journald's native protocol: `KEY=value\n`, or `KEY\n` followed by a
/// little-endian u64 length, the value and `\n`.
fn parse_journal_entry(mut data: &[u8]) -> Vec<(String, String)> {
    let mut fields = vec![];
    while !data.is_empty() {
        let Some(nl) = data.iter().position(|&b| b == b'\n') else {
            break;
        };
        let line = &data[..nl];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            fields.push((
                String::from_utf8_lossy(&line[..eq]).into_owned(),
                String::from_utf8_lossy(&line[eq + 1..]).into_owned(),
            ));
            data = &data[nl + 1..];
        } else {
            let key = String::from_utf8_lossy(line).into_owned();
            let rest = &data[nl + 1..];
            if rest.len() < 8 {
                break;
            }
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            let value = String::from_utf8_lossy(&rest[8..8 + len]).into_owned();
            fields.push((key, value));
            data = &rest[8 + len + 1..];
        }
    }
    fields
}

/// Issue 26 (7): `systemctl reload` with a broken file fails visibly and keeps the old
/// configuration; with a good file it reloads. The unit's `ExecReload=` lines are run as systemd
/// runs them: in order, stopping at the first that fails, with the unit's environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_broken_file_fails_and_keeps_the_old_configuration() {
    let unit = std::fs::read_to_string("systemd/sqlcron.service").unwrap();
    let reload: Vec<String> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("ExecReload="))
        .map(str::to_string)
        .collect();
    assert!(reload.len() >= 2, "a check before the signal: {reload:?}");
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let good = node_config(&db.url, "n1", "");
    let daemon = DaemonProcess::start(dir.path(), "n1", &good);
    let config = dir.path().join("n1.toml");
    crate::util::eventually(Duration::from_secs(20), "the daemon up", || async {
        let nodes = store
            .scalar_i64("SELECT COUNT(*) FROM cron_nodes WHERE name = 'n1'")
            .await
            .ok()
            .flatten()
            .unwrap_or(0);
        (nodes == 1).then_some(())
    })
    .await;
    let reload_now = || -> Result<(), String> {
        for line in &reload {
            // systemd's quoting of these lines is the shell's; it sets $MAINPID.
            let line = line.replace("/usr/bin/sqlcron", env!("CARGO_BIN_EXE_sqlcron"));
            let out = Command::new("/bin/sh")
                .arg("-c")
                .arg(&line)
                .env("MAINPID", daemon.pid().to_string())
                .env("SQLCRON_CONFIG", &config)
                .output()
                .unwrap();
            if !out.status.success() {
                return Err(format!(
                    "{line}: {:?}: {}",
                    out.status.code(),
                    crate::util::stderr(&out)
                ));
            }
        }
        Ok(())
    };
    let job = "[[job]]\nname = \"added\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";
    std::fs::write(&config, format!("{good}{job}schedule = \"also\"\n")).unwrap();
    let refused = reload_now().expect_err("a broken file was reloaded");
    assert!(
        refused.contains("check: Some(2)") && refused.contains("duplicate key"),
        "{refused}"
    );
    std::fs::write(&config, format!("{good}{job}")).unwrap();
    reload_now().unwrap();
    crate::util::eventually(
        Duration::from_secs(20),
        "the job added by the good reload ran",
        || async {
            let runs = store.history(Some("added"), 10).await.unwrap();
            (!runs.is_empty()).then_some(())
        },
    )
    .await;
    assert!(
        daemon.log_text().matches("reload").count() >= 1,
        "{}",
        daemon.log_text()
    );
    store.close().await;
}
