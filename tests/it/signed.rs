//! Signed jobs (`[security] sql_jobs = "signed"`): a database writer without the signing key
//! cannot make any node run a command. Rows written with SQL run only with a valid signature;
//! TOML rows only as the file says; every_node copies only as their trusted template; event
//! hooks only as the trusted job names them.

use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::*;

async fn parked(store: &Store, job: &str) -> String {
    eventually(
        Duration::from_secs(15),
        &format!("{job} parked"),
        || async { store.job(job).await.unwrap().and_then(|j| j.error) },
    )
    .await
}

/// A signing key made in `dir`, and the configuration of a node `n` that trusts it alone.
fn signed_node(db: &TestDb, dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let (key, public) = keygen(dir);
    let security = format!("[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n");
    (key, node_config(&db.url, "n", &security))
}

/// A signing key made by `sqlcron keygen` in `dir`, and its public half.
fn keygen(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let key = dir.join("signing.key");
    let out = sqlcron(&["keygen", "--out", key.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    (key, stdout(&out).trim().to_string())
}

fn cli(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    sqlcron(&all)
}

async fn only_signed_rows_run(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("signing.key");
    let out = sqlcron(&["keygen", "--out", key.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let public = stdout(&out).trim().to_string();
    let mut mode = std::fs::metadata(&key).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    // An existing key is never overwritten.
    let again = sqlcron(&["keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    mode = std::fs::metadata(&key).unwrap();
    assert!(mode.len() > 0);

    let marker = dir.path().join("forged-hook-ran");
    let config = node_config(
        &db.url,
        "n",
        &format!(
            "[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n\
             [[job]]\nname = \"from-toml\"\nschedule = \"* * * * * *\"\ncommand = \"false\"\n\
             on_failure = \"true\"\n\
             [[job]]\nname = \"after-toml\"\nafter = [{{ job = \"from-toml\", on = \"done\" }}]\n\
             command = \"echo chained\"\n"
        ),
    );
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, &config).unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &config);
    // The daemon has applied its file (which removes TOML rows it does not hold).
    eventually(Duration::from_secs(15), "the TOML job applied", || async {
        store.job("from-toml").await.unwrap().map(|_| ())
    })
    .await;

    let insert = |name: &str, extra_cols: &str, extra_vals: &str| {
        format!(
            "INSERT INTO cron_table (name, schedule, command{extra_cols}) \
             VALUES ('{name}', '* * * * * *', 'echo {name}'{extra_vals})"
        )
    };
    for sql in [
        insert(
            "unsigned",
            ", alerts",
            &format!(", '{{\"on_failure\": \"touch {}\"}}'", marker.display()),
        ),
        // run_on 'any', a column the rows a job makes of itself do not copy.
        insert("to-sign", ", run_on", ", 'any'"),
        insert("forged-toml", ", source", ", 'toml'"),
        insert("tmpl", ", run_on", ", 'every_node'"),
        // A copy nobody made, claiming the template's trust for another command.
        insert("fake@n", ", template, source", ", 'tmpl', 'copy'"),
        insert("bad-signature", ", signature", ", 'ed25519:AAAA'"),
    ] {
        store.execute_raw(&sql).await.unwrap();
    }
    let e = parked(&store, "unsigned").await;
    assert!(
        e.starts_with("unsigned:") && e.contains("sqlcron sign"),
        "{e}"
    );
    let e = parked(&store, "forged-toml").await;
    assert!(e.starts_with("unsigned:"), "{e}");
    let e = parked(&store, "fake@n").await;
    assert!(e.starts_with("every_node copy: "), "{e}");
    // The node's own copy of an unsigned template is refused with the template's reason...
    let e = parked(&store, "tmpl@n").await;
    assert!(e.starts_with("template \"tmpl\": unsigned"), "{e}");
    // ... and runs once the template is signed.
    let out = cli(&cfg, &["sign", "--key", key.to_str().unwrap(), "tmpl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = ran_ok(&store, "tmpl@n").await;
    assert_eq!(run.output.as_deref().map(str::trim), Some("tmpl"));
    let e = parked(&store, "bad-signature").await;
    assert!(e.starts_with("signature:"), "{e}");
    parked(&store, "to-sign").await;

    // Reviewed first (`--dry-run` prints the definition and its digest, and signs nothing);
    // signed only as reviewed: a digest that is not the stored definition's signs nothing.
    let review = cli(&cfg, &["sign", "--dry-run", "to-sign"]);
    assert!(review.status.success(), "{}", stderr(&review));
    let text = stdout(&review);
    assert!(text.contains("echo to-sign"), "{text}");
    let digest = text
        .split("digest ")
        .nth(1)
        .and_then(|t| t.split(':').next())
        .unwrap()
        .to_string();
    assert_eq!(digest.len(), 64, "{text}");
    let key_arg = key.to_str().unwrap();
    let stale = "0".repeat(64);
    let out = cli(
        &cfg,
        &["sign", "--key", key_arg, "--expect", &stale, "to-sign"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not the one reviewed"),
        "{}",
        stderr(&out)
    );
    let row = store.job("to-sign").await.unwrap().unwrap();
    assert_eq!(row.signature, None);
    // Signing unparks the row, and it runs.
    let out = cli(
        &cfg,
        &["sign", "--key", key_arg, "--expect", &digest, "to-sign"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("echo to-sign"), "{}", stdout(&out));
    let run = ran_ok(&store, "to-sign").await;
    assert_eq!(run.output.as_deref().map(str::trim), Some("to-sign"));
    let audit = store.audit_log(Some("to-sign"), 10).await.unwrap();
    assert!(audit.iter().any(|a| a.action == "sign"), "{audit:?}");
    // Its backfill row runs under the job's signature (its run_on NULL, the job's 'any').
    let from = (chrono::Utc::now() - chrono::Duration::seconds(6)).to_rfc3339();
    let to = (chrono::Utc::now() - chrono::Duration::seconds(3)).to_rfc3339();
    let out = cli(
        &cfg,
        &[
            "backfill", "to-sign", "--from", &from, "--to", &to, "--max", "1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let (filled, refused) = eventually(Duration::from_secs(30), "the backfill", || async {
        let rows = store.jobs().await.unwrap();
        let refused = rows
            .iter()
            .find(|j| j.name.starts_with("to-sign#backfill-") && j.error.is_some())
            .cloned();
        let history = store.history(None, 200).await.unwrap();
        let ran = history
            .into_iter()
            .find(|r| r.job.starts_with("to-sign#backfill-") && r.outcome != "running");
        (ran.is_some() || refused.is_some()).then_some((ran, refused))
    })
    .await;
    assert_eq!(refused.map(|j| j.error), None);
    assert_eq!(filled.map(|r| r.outcome), Some("ok".to_string()));
    // A TOML job's chained rows run as the file says (they were judged by a signature no
    // TOML job has, and parked: the chain never went on in signed mode).
    let chained = eventually(Duration::from_secs(30), "a chained run", || async {
        let history = store.history(None, 200).await.unwrap();
        history
            .into_iter()
            .find(|r| r.job.starts_with("after-toml#after-") && r.outcome != "running")
    })
    .await;
    assert_eq!(chained.outcome, "ok", "{chained:?}");
    let parked_chains: Vec<_> = store
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.name.starts_with("after-toml#after-") && j.error.is_some())
        .collect();
    assert!(parked_chains.is_empty(), "{parked_chains:?}");

    // Changed after signing: refused at its next claim.
    store
        .execute_raw("UPDATE cron_table SET command = 'echo tampered' WHERE name = 'to-sign'")
        .await
        .unwrap();
    let e = parked(&store, "to-sign").await;
    assert!(e.contains("does not match the job's definition"), "{e}");

    // The TOML job runs; an event row naming another command is not delivered; nor is one
    // carrying the hook an untrusted row names.
    let now = store.now().await.unwrap();
    for (dedupe, job, hook) in [
        (
            "forged-1",
            "from-toml",
            format!("{{\"command\":\"touch {}\"}}", marker.display()),
        ),
        (
            "forged-2",
            "unsigned",
            format!("{{\"command\":\"touch {}\"}}", marker.display()),
        ),
    ] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_events (dedupe, job_name, kind, created, hook, payload, state, \
                 next_try) VALUES ('{dedupe}', '{job}', 'failure', {now}, '{hook}', '{{}}', \
                 'pending', {now})"
            ))
            .await
            .unwrap();
    }
    eventually(
        Duration::from_secs(20),
        "the forged events refused",
        || async {
            let events = store.events(None, 100).await.unwrap();
            let refused = events
                .iter()
                .filter(|e| {
                    e.error
                        .as_deref()
                        .is_some_and(|m| m.starts_with("hook: refused"))
                })
                .count();
            (refused == 2).then_some(())
        },
    )
    .await;
    assert!(!marker.exists(), "a forged hook ran");
    // The TOML job's own hook is delivered (the job fails each second).
    eventually(
        Duration::from_secs(20),
        "the TOML hook delivered",
        || async {
            let events = store.events(Some("from-toml"), 100).await.unwrap();
            events.iter().find(|e| e.state == "sent").map(|_| ())
        },
    )
    .await;

    // A TOML row changed with SQL is refused until the file is applied again.
    store
        .execute_raw("UPDATE cron_table SET command = 'echo sql' WHERE name = 'from-toml'")
        .await
        .unwrap();
    let e = parked(&store, "from-toml").await;
    assert!(e.contains("differs from the job \"from-toml\""), "{e}");

    // `sqlcron at --key` makes a runnable one-off; without the key it is refused.
    let out = cli(
        &cfg,
        &[
            "at",
            "now",
            "--name",
            "once-signed",
            "--key",
            key.to_str().unwrap(),
            "--",
            "echo once",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(
        &cfg,
        &["at", "now", "--name", "once-unsigned", "--", "echo once"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    ran_ok(&store, "once-signed").await;
    let e = parked(&store, "once-unsigned").await;
    assert!(e.starts_with("unsigned:"), "{e}");

    // No refused row ever ran.
    for job in [
        "unsigned",
        "forged-toml",
        "fake@n",
        "bad-signature",
        "once-unsigned",
    ] {
        let runs = store.history(Some(job), 10).await.unwrap();
        assert!(runs.is_empty(), "{job} ran: {runs:?}");
    }
    let tampered = store.history(Some("to-sign"), 100).await.unwrap();
    assert!(
        tampered
            .iter()
            .all(|r| r.output.as_deref().is_none_or(|o| !o.contains("tampered"))),
        "{tampered:?}"
    );
    drop(node);
}

for_each_dialect!(
    only_signed_rows_run,
    a_nodes_hook_runs_in_the_nodes_context,
    a_forged_copy_runs_nowhere_its_template_excludes,
    an_old_signed_version_written_back_is_refused,
    a_node_that_never_ran_a_job_refuses_its_old_version
);

/// `sql_jobs = "signed"` without a key, or a key that is not one, is refused by `check`.
#[test]
fn signed_mode_needs_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    for (text, expect) in [
        (
            "[security]\nsql_jobs = \"signed\"\n",
            "needs the keys that sign jobs",
        ),
        (
            "[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"nope\"]\n",
            "is not a public key",
        ),
        (
            "[security]\nsql_jobs = \"closed\"\n",
            "must be \"open\" or \"signed\"",
        ),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let out = cli(&cfg, &["check"]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(stderr(&out).contains(expect), "{}", stderr(&out));
    }
}

/// Issue 49, finding 1: in signed mode an editor inserted an unsigned row with
/// `alert_after` and `env = {"BASH_ENV": "$(...)"}`; the row was parked, but the dead-man's
/// switch delivered the node's own `[defaults] on_missed` hook, a bash script, as the row's
/// user with the row's environment, and bash ran the editor's code. A hook the node's TOML
/// names runs in the node's own context: none of the row's environment, working directory or
/// limits; the row's facts only as `SQLCRON_*` values.
async fn a_nodes_hook_runs_in_the_nodes_context(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = keygen(dir.path());
    let pwned = dir.path().join("pwned");
    let seen = dir.path().join("seen");
    let hook = dir.path().join("notify.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/bash\necho \"job=$SQLCRON_JOB event=$SQLCRON_EVENT pwd=$PWD env=${{BASH_ENV:-none}} evil=${{EVIL:-none}}\" >> {}\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &hook,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    let config = node_config(
        &db.url,
        "n",
        &format!(
            "[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n\
             [defaults]\non_missed = \"{}\"\n",
            hook.display()
        ),
    );
    let _node = DaemonProcess::start(dir.path(), "n", &config);
    let workdir = tempfile::tempdir().unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, env, workdir, alerts) VALUES \
             ('forged', '0 0 1 1 *', 'true', \
             '{{\"BASH_ENV\":\"$(touch {})\",\"EVIL\":\"yes\"}}', '{}', '{{\"alert_after\":\"2s\"}}')",
            pwned.display(),
            workdir.path().display()
        ))
        .await
        .unwrap();
    let e = parked(&store, "forged").await;
    assert!(e.starts_with("unsigned"), "{e}");
    let line = eventually(
        Duration::from_secs(60),
        "the node's on_missed hook to run for the forged row",
        || async {
            std::fs::read_to_string(&seen)
                .ok()
                .filter(|s| !s.is_empty())
        },
    )
    .await;
    assert!(line.contains("job=forged event=missed"), "{line}");
    assert!(line.contains("env=none evil=none"), "{line}");
    assert!(
        !line.contains(&workdir.path().display().to_string()),
        "{line}"
    );
    assert!(!pwned.exists(), "the row's BASH_ENV ran in the node's hook");
    store.close().await;
}

/// Issue 49, finding 3: a row with `template = 'dbmaint'`, a placement of its own, the
/// template's signed columns and its signature ran on a node the template's signed placement
/// excludes (the check swapped in the template's placement before comparing). A copy runs only
/// as `T@NODE`, pinned to NODE, on a NODE the template admits.
async fn a_forged_copy_runs_nowhere_its_template_excludes(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path());
    let marker = dir.path().join("dbmaint-ran");
    let config = node_config(
        &db.url,
        "n",
        &format!("[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n"),
    );
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, &config).unwrap();
    let _node = DaemonProcess::start(dir.path(), "n", &config);
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, run_on, placement) VALUES \
             ('dbmaint', '* * * * * *', 'touch {}', 'every_node', \
             '{{\"tags\":[],\"nodes\":[\"elsewhere\"]}}')",
            marker.display()
        ))
        .await
        .unwrap();
    for job in ["dbmaint", "sentinel"] {
        if job == "sentinel" {
            store
                .execute_raw(
                    "INSERT INTO cron_table (name, schedule, command) VALUES \
                     ('sentinel', '* * * * * *', 'true')",
                )
                .await
                .unwrap();
        }
        let out = cli(&cfg, &["sign", "--key", key.to_str().unwrap(), job]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // Two forgeries: the copy's own name pinned to this node, and another name.
    for (name, pin) in [("dbmaint@n", "n"), ("dbmaint-here", "n")] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command, template, source, placement, \
                 signature) SELECT '{name}', schedule, command, 'dbmaint', 'copy', \
                 '{{\"tags\":[],\"nodes\":[\"{pin}\"]}}', signature FROM cron_table \
                 WHERE name = 'dbmaint'"
            ))
            .await
            .unwrap();
    }
    // Parked (or removed by the node's sync of its copies), and never run.
    let e = parked(&store, "dbmaint-here").await;
    assert!(e.contains("is not \"dbmaint@NODE\""), "{e}");
    eventually(
        Duration::from_secs(15),
        "dbmaint@n parked or removed",
        || async {
            match store.job("dbmaint@n").await.unwrap() {
                None => Some(()),
                Some(j) => j.error.map(|_| ()),
            }
        },
    )
    .await;
    // A signed job claimed after the forgeries ran: the node has looked at them since.
    let inserted = store.now().await.unwrap();
    eventually(Duration::from_secs(20), "the sentinel to run", || async {
        store
            .history(Some("sentinel"), 5)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.outcome == "ok" && r.slot > inserted + 1000)
    })
    .await;
    assert!(!marker.exists(), "a forged copy ran the template");
    for name in ["dbmaint@n", "dbmaint-here"] {
        let runs = store.history(Some(name), 10).await.unwrap();
        assert!(runs.is_empty(), "{name}: {runs:?}");
    }
    store.close().await;
}

/// Issue 49, finding 9: `trusted_keys_file` is read only when nobody but root (or the daemon's
/// user) could have written it: a file owned by another user, or a root-owned file in a
/// directory another user can change, is refused by `check` (and the daemon) naming why.
#[test]
fn a_keys_file_only_root_could_have_written() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED a_keys_file_only_root_could_have_written: needs root to chown");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let nobody = 65534;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, public) = keygen(dir.path());
    let user_dir = dir.path().join("users");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(nobody), Some(nobody)).unwrap();
    let cases = [
        (dir.path().join("root.keys"), None, ""),
        (
            dir.path().join("user.keys"),
            Some(nobody),
            "is owned by uid 65534",
        ),
        (
            user_dir.join("root.keys"),
            None,
            "can be changed by another user",
        ),
    ];
    for (file, owner, expect) in &cases {
        std::fs::write(file, &public).unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(file, Some(*uid), Some(*uid)).unwrap();
        }
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                "[database]\nurl = \"sqlite://{}/db\"\n[security]\nsql_jobs = \"signed\"\ntrusted_keys_file = \"{}\"\n",
                dir.path().display(),
                file.display()
            ),
        )
        .unwrap();
        let out = cli(&cfg, &["check"]);
        if expect.is_empty() {
            assert!(out.status.success(), "{}", stderr(&out));
        } else {
            assert_eq!(out.status.code(), Some(2), "{}", file.display());
            let err = stderr(&out);
            assert!(
                err.contains(expect) && err.contains("trusted_keys_file"),
                "{err}"
            );
        }
    }
}

/// The newest run of `job` whose output is `text`.
async fn ran_with(store: &Store, job: &str, text: &str) {
    eventually(
        Duration::from_secs(20),
        &format!("{job} to run and print {text}"),
        || async {
            store
                .history(Some(job), 20)
                .await
                .unwrap()
                .into_iter()
                .find(|r| r.outcome == "ok" && r.output.as_deref().map(str::trim) == Some(text))
        },
    )
    .await;
}

/// Issue 49, finding 2: sign `rotate` (v1), change it and sign again (v2); the editor writes
/// v1's command and signature back and asks for a run: v1 ran. A signature now names the job
/// and a generation; a node refuses a generation lower than one it has run for that name, also
/// after a restart; a signature copied onto another name does not verify.
async fn an_old_signed_version_written_back_is_refused(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let (key, config) = signed_node(&db, dir.path());
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, &config).unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &config);
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('rotate', '0 0 1 1 *', 'echo v1')",
        )
        .await
        .unwrap();
    let sign = |job: &str| {
        let out = cli(&cfg, &["sign", "--key", key.to_str().unwrap(), job]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    let run = |job: &str| {
        let out = cli(&cfg, &["run", job]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // A signed row is scheduled (prepared) before its run is asked for.
    let scheduled = || async {
        eventually(Duration::from_secs(15), "rotate scheduled", || async {
            store
                .job("rotate")
                .await
                .unwrap()
                .filter(|j| j.error.is_none() && j.slot.is_some() && j.next_exec.is_some())
                .map(|_| ())
        })
        .await
    };
    // A huge generation written by the editor is not believed by `sign` (review, 2026-11-28).
    store
        .execute_raw(
            "UPDATE cron_table SET signature = 'ed25519v2:18446744073709551614:AAAA' WHERE name = 'rotate'",
        )
        .await
        .unwrap();
    sign("rotate");
    scheduled().await;
    let v1 = store
        .job("rotate")
        .await
        .unwrap()
        .unwrap()
        .signature
        .unwrap();
    assert!(
        sqlcron::model::signing::generation(Some(&v1)).unwrap() < 1 << 53,
        "{v1}"
    );
    assert!(v1.starts_with("ed25519v2:"), "{v1}");
    run("rotate");
    ran_with(&store, "rotate", "v1").await;
    store
        .execute_raw("UPDATE cron_table SET command = 'echo v2' WHERE name = 'rotate'")
        .await
        .unwrap();
    sign("rotate");
    scheduled().await;
    run("rotate");
    ran_with(&store, "rotate", "v2").await;

    // The editor writes v1 back, with its signature, and asks for a run.
    let replay = format!(
        "UPDATE cron_table SET command = 'echo v1', signature = '{v1}' WHERE name = 'rotate'"
    );
    store.execute_raw(&replay).await.unwrap();
    run("rotate");
    let e = parked(&store, "rotate").await;
    assert!(e.contains("older than generation"), "{e}");
    // v2's signature on another name, with v2's command: not signed for that name.
    let v2 = store.job("rotate").await.unwrap().unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, signature) VALUES \
             ('rotate-too', '* * * * * *', 'echo v2', '{}')",
            v2.signature.clone().unwrap()
        ))
        .await
        .unwrap();
    let e = parked(&store, "rotate-too").await;
    assert!(e.contains("does not match"), "{e}");

    // A new daemon on the same state directory remembers: the replay written again (which
    // unparks it) is refused again.
    drop(node);
    store
        .execute_raw("UPDATE cron_table SET command = 'echo other' WHERE name = 'rotate'")
        .await
        .unwrap();
    store.execute_raw(&replay).await.unwrap();
    let _node = DaemonProcess::start(dir.path(), "n-again", &config);
    run("rotate");
    let e = parked(&store, "rotate").await;
    assert!(e.contains("older than generation"), "{e}");
    let v1_runs = store
        .history(Some("rotate"), 20)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.output.as_deref().map(str::trim) == Some("v1"))
        .count();
    assert_eq!(v1_runs, 1, "v1 ran again");
    store.close().await;
}

/// The highest generation `node_dir`'s node keeps for `job` in its state directory.
fn floor_in(node_dir: &std::path::Path, job: &str) -> Option<u64> {
    let dir = node_dir.join("signed-generations");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let text = std::fs::read_to_string(e.path()).ok()?;
        let seen: std::collections::BTreeMap<String, u64> = serde_json::from_str(&text).ok()?;
        seen.get(job).copied()
    })
}

/// Issue 49, finding 2, on a node that never ran the job (found by an attack review): v2 is
/// signed while only n1 runs; n2 starts later, n1 stops, and the editor writes v1 back. n2
/// learned v2's generation from the table (at start, and with each heartbeat), so it refuses
/// v1. Before, a node learned a generation only from rows it prepared or claimed, and n2 ran v1.
async fn a_node_that_never_ran_a_job_refuses_its_old_version(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir1 = tempfile::tempdir().unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir1.path());
    let security = format!("[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n");
    let config1 = node_config(&db.url, "n1", &security);
    let cfg = dir1.path().join("node.toml");
    std::fs::write(&cfg, &config1).unwrap();
    let n1 = DaemonProcess::start(dir1.path(), "n1", &config1);
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('rotate', '0 0 1 1 *', 'echo v1')",
        )
        .await
        .unwrap();
    let sign = || {
        let out = cli(&cfg, &["sign", "--key", key.to_str().unwrap(), "rotate"]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    sign();
    let v1 = eventually(Duration::from_secs(15), "v1 signed", || async {
        store.job("rotate").await.unwrap().and_then(|j| j.signature)
    })
    .await;
    store
        .execute_raw("UPDATE cron_table SET command = 'echo v2' WHERE name = 'rotate'")
        .await
        .unwrap();
    sign();
    let v2 = sqlcron::model::signing::generation(
        store
            .job("rotate")
            .await
            .unwrap()
            .unwrap()
            .signature
            .as_deref(),
    )
    .unwrap();
    assert!(v2 > sqlcron::model::signing::generation(Some(&v1)).unwrap());

    // n2 starts with an empty state directory while v2's row does not verify (a column
    // changed with SQL); once the column is back, n2 learns v2's generation from the table.
    // Before, n2 never looked at that signature again. The writer also gives the row a
    // `template` (not signed): a row with one was set aside as a copy, unverified, and its
    // generation never learnt, so the old version written back ran on n2.
    store
        .execute_raw(
            "UPDATE cron_table SET env = '{\"X\":\"1\"}', template = 'rotate' WHERE name = 'rotate'",
        )
        .await
        .unwrap();
    let n2 = DaemonProcess::start(dir2.path(), "n2", &node_config(&db.url, "n2", &security));
    eventually(
        Duration::from_secs(20),
        "n2 to read the row that does not verify",
        || async {
            n2.log_text()
                .lines()
                .any(|l| l.contains("signed generations read") && l.contains("verified=0"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(floor_in(dir2.path(), "rotate"), None);
    store
        .execute_raw("UPDATE cron_table SET env = NULL WHERE name = 'rotate'")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "n2 to learn v2's generation",
        || async { (floor_in(dir2.path(), "rotate") == Some(v2)).then_some(()) },
    )
    .await;
    store
        .execute_raw("UPDATE cron_table SET template = NULL WHERE name = 'rotate'")
        .await
        .unwrap();
    drop(n1);

    // The editor writes v1 back, with its signature, and asks for a run: only n2 is up.
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET command = 'echo v1', signature = '{v1}' WHERE name = 'rotate'"
        ))
        .await
        .unwrap();
    let out = cli(&cfg, &["run", "rotate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let e = parked(&store, "rotate").await;
    assert!(e.contains("older than generation"), "{e}");
    let ran_v1 = store
        .history(Some("rotate"), 20)
        .await
        .unwrap()
        .into_iter()
        .any(|r| r.output.as_deref().map(str::trim) == Some("v1"));
    assert!(!ran_v1, "n2 ran the old version");
    drop(n2);
    store.close().await;
}

/// A signed-mode node whose file of generations is there but cannot be parsed does not start:
/// it would no longer refuse a version older than one it ran. It names the file and the fix.
/// An open-mode node starts (it uses no generation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_read_its_generations_does_not_start() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (_key, public) = keygen(dir.path());
    let url = sqlcron::model::database_url::DatabaseUrl::parse(&db.url).unwrap();
    let file =
        sqlcron::daemon::generations::file_for(dir.path().to_str().unwrap(), &url.to_string(), "n");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{\"rotate\": 7, trunc").unwrap();
    let signed = node_config(
        &db.url,
        "n",
        &format!("[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n"),
    );
    let mut node = DaemonProcess::start(dir.path(), "n", &signed);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node did not exit\n{}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = node.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("cannot parse")
            && log.contains(&file.display().to_string())
            && log.contains("move it aside"),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "{\"rotate\": 7, trunc",
        "the file is left as it was"
    );
    let open = node_config(&db.url, "n", "");
    let node = DaemonProcess::start(dir.path(), "n", &open);
    eventually(
        Duration::from_secs(15),
        "the open-mode node ready",
        || async { node.log_text().contains("ready").then_some(()) },
    )
    .await;
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
}

/// A signed every_node template's copy carries the template's signature, made for the
/// template's name: once read, the signed rows are not read again with each heartbeat (the copy
/// was verified under its own name, never passed, and every node read and verified every
/// signed row every 5 s for good). The node's side alone: one database is enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_copy_is_not_read_again_at_each_heartbeat() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let (key, config) = signed_node(&db, dir.path());
    let cfg = dir.path().join("cli.toml");
    std::fs::write(&cfg, &config).unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, run_on) \
             VALUES ('tmpl', '* * * * * *', 'echo tmpl', 'every_node')",
        )
        .await
        .unwrap();
    let out = cli(&cfg, &["sign", "--key", key.to_str().unwrap(), "tmpl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let node = DaemonProcess::start(dir.path(), "n", &config);
    ran_ok(&store, "tmpl@n").await;
    // Heartbeats, as the node records them.
    let heartbeats = |after: usize| {
        let store = &store;
        async move {
            let seen = std::cell::RefCell::new(std::collections::BTreeSet::new());
            eventually(Duration::from_secs(30), "heartbeats", || async {
                let at = store
                    .scalar_i64("SELECT last_seen FROM cron_nodes WHERE name = 'n'")
                    .await
                    .ok()??;
                seen.borrow_mut().insert(at);
                (seen.borrow().len() > after).then_some(())
            })
            .await
        }
    };
    let reads = || node.log_text().matches("signed generations read").count();
    // Two heartbeats for the copy made and judged, then two with nothing new.
    heartbeats(2).await;
    let settled = reads();
    assert!(settled >= 1, "{}", node.log_text());
    heartbeats(2).await;
    let log = node.log_text();
    assert_eq!(reads(), settled, "{log}");
    assert!(node.stop().success(), "{log}");
}
