//! Issue 51, point 3: the commands that only read never create a database. Before, `sqlcron
//! status` with the defaults created the SQLite file (owned by whoever ran it, 0600), then
//! failed with `no such table: cron_table`, and the service could not open the file after that.

use std::os::unix::fs::MetadataExt as _;

use crate::util::{sqlcron, stderr, stdout};

fn config_for(dir: &std::path::Path, db: &std::path::Path) -> std::path::PathBuf {
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\nurl = \"sqlite://{}\"\n[node]\nname = \"n\"\n[daemon]\n{}\n",
            db.display(),
            crate::util::default_user()
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn read_commands_create_no_database_and_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sqlcron.db");
    let cfg = config_for(dir.path(), &db);
    let c = cfg.to_str().unwrap();
    for args in [
        vec!["status"],
        vec!["history"],
        vec!["explain", "x"],
        vec!["audit"],
        vec!["events"],
        vec!["locks"],
    ] {
        let mut all = vec!["--config", c];
        all.extend(&args);
        let out = sqlcron(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(
            e.contains(&format!("no database yet at {}", db.display()))
                && e.contains("run `sqlcron migrate` or start the service"),
            "{args:?}: {e}"
        );
        assert!(!db.exists(), "{args:?} created {}", db.display());
    }
    let out = sqlcron(&["--config", c, "doctor"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}{}", stderr(&out));
    assert!(
        text.lines()
            .any(|l| l.starts_with("ERROR") && l.contains("no database yet at")),
        "{text}"
    );
    assert!(!db.exists(), "doctor created {}", db.display());

    // `migrate` says what it applied, then that there was nothing to apply.
    let out = sqlcron(&["--config", c, "migrate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = stdout(&out);
    assert!(
        first.starts_with("applied ") && first.contains("migrations (sqlite"),
        "{first}"
    );
    let out = sqlcron(&["--config", c, "migrate"]);
    assert!(
        stdout(&out).starts_with("schema up to date (sqlite, "),
        "{}",
        stdout(&out)
    );
    let out = sqlcron(&["--config", c, "status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // No daemon runs: status says so above its tables.
    assert!(
        stdout(&out).starts_with("WARNING: no live node: nothing runs"),
        "{}",
        stdout(&out)
    );
}

/// A database file the command's user cannot open is named with its owner, in the read
/// commands and in doctor (before: "unable to open database file" and "check [database] url,
/// the server and the network"). Needs root, to hand the file to another user.
#[test]
fn a_database_file_owned_by_another_user_is_named() {
    if !sqlcron::exec::account::is_root() {
        eprintln!("skipped: needs root to run a command as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let db = dir.path().join("sqlcron.db");
    let cfg = config_for(dir.path(), &db);
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = sqlcron(&["--config", cfg.to_str().unwrap(), "migrate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::metadata(&db).unwrap().uid(), 0);
    // The test's binary must be reachable by nobody: copy it where it is.
    let bin = dir.path().join("sqlcron");
    std::fs::copy(crate::util::sqlcron_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let as_nobody = |args: &[&str]| {
        std::process::Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(&bin)
            .args(["--config", cfg.to_str().unwrap()])
            .args(args)
            .env_remove("SQLCRON_CONFIG")
            .output()
            .unwrap()
    };
    let out = as_nobody(&["status"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("is owned by root (mode 0")
            && e.contains("this process runs as nobody")
            && e.contains("chown sqlcron:"),
        "{e}"
    );
    let out = as_nobody(&["doctor"]);
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ERROR") && l.contains("is owned by root")),
        "{text}{}",
        stderr(&out)
    );
}

/// An operator who cannot read the configuration is told how to (issue 51, point 6): the file's
/// owner, group and mode, and joining its group where the group reads it (the package's file is
/// root:sqlcron 0640); never the advice to join root's group. Before: `cannot read: Permission
/// denied` alone.
#[test]
fn an_unreadable_configuration_names_the_way_to_read_it() {
    if !sqlcron::exec::account::is_root() {
        eprintln!("skipped: needs root to run a command as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = config_for(dir.path(), &dir.path().join("sqlcron.db"));
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o640)).unwrap();
    let bin = dir.path().join("sqlcron");
    std::fs::copy(crate::util::sqlcron_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = || {
        std::process::Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(&bin)
            .args(["--config", cfg.to_str().unwrap(), "status"])
            .env_remove("SQLCRON_CONFIG")
            .output()
            .unwrap()
    };
    // A group that may read it: join it.
    std::os::unix::fs::chown(&cfg, Some(0), Some(1)).unwrap();
    let out = as_nobody();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let group = sqlcron::exec::account::group_name_of(1);
    let e = stderr(&out);
    assert!(
        e.contains(&format!("is root:{group} mode 0640"))
            && e.contains(&format!("sudo adduser nobody {group}"))
            && e.contains("runs as nobody"),
        "{e}"
    );
    // Root's group: never the advice to join it.
    std::os::unix::fs::chown(&cfg, Some(0), Some(0)).unwrap();
    let e = stderr(&as_nobody());
    assert!(
        e.contains("is root:root mode 0640") && !e.contains("adduser") && e.contains("sudo"),
        "{e}"
    );
}
