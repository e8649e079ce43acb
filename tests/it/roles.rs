//! The least-privilege role layouts of docs/roles/postgres.sql and docs/roles/mysql.sql, run as
//! written: the daemon runs jobs with table rights only, an editor writes jobs, a locker takes
//! locks, a reader reads, and none of them can do the others' work.

use sqlcron::store::{Dialect, Store};

use crate::util::*;

/// The statements of a role file, split at `-- after migrate --`, with `sqlcron_` role names
/// given `prefix` instead.
fn statements(file: &str, prefix: &str) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(file).unwrap();
    let text = text.replace("sqlcron_", &format!("{prefix}_"));
    let (before, after) = text
        .split_once("-- after migrate --")
        .expect("the role file has its two parts");
    let split = |part: &str| -> Vec<String> {
        part.lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    (split(before), split(after))
}

/// Drops the test's roles when it ends (after its database, declared before it).
struct Roles {
    names: Vec<String>,
    mysql: bool,
}

impl Drop for Roles {
    fn drop(&mut self) {
        let names = self.names.clone();
        let mysql = self.mysql;
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let (url, drop) = if mysql {
                        (MY_ADMIN, "DROP USER IF EXISTS")
                    } else {
                        (PG_ADMIN, "DROP ROLE IF EXISTS")
                    };
                    let admin = Store::connect(&db_url(url), 1).unwrap();
                    for n in names {
                        let n = if mysql { format!("'{n}'@'%'") } else { n };
                        let _ = admin.execute_raw(&format!("{drop} {n}")).await;
                    }
                })
        })
        .join();
    }
}

#[tokio::test]
async fn postgres_roles_as_documented() {
    roles_as_documented(Dialect::Postgres).await;
}

#[tokio::test]
async fn mysql_roles_as_documented() {
    roles_as_documented(Dialect::Mysql).await;
}

/// Runs `docs/roles/<dialect>.sql` as written (role names given a unique prefix, the database the
/// test's own), migrates as the owner, and has each role do its work and fail at the others'.
async fn roles_as_documented(dialect: Dialect) {
    let mysql = dialect == Dialect::Mysql;
    let prefix = format!("sqlcr{}", rand::random::<u32>() % 1_000_000);
    let roles = Roles {
        names: ["owner", "daemon", "editor", "locker", "reader"]
            .iter()
            .map(|r| format!("{prefix}_{r}"))
            .collect(),
        mysql,
    };
    let db = TestDb::new(dialect).await;
    let db_name = db.url.rsplit('/').next().unwrap().to_string();
    let file = if mysql {
        "docs/roles/mysql.sql"
    } else {
        "docs/roles/postgres.sql"
    };
    let (create, grant) = statements(file, &prefix);
    // The MySQL file names its database `sqlcron`; the test's has its own name.
    let here = |sql: &String| {
        sql.replace("sqlcron.", &format!("{db_name}."))
            .replace("EXISTS sqlcron", &format!("EXISTS {db_name}"))
    };
    // The test database's own superuser connection (the grants name its tables).
    let admin = Store::connect(&db_url(&db.url), 1).unwrap();
    for sql in create.iter().map(here) {
        admin
            .execute_raw(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    if !mysql {
        admin
            .execute_raw(&format!("ALTER DATABASE {db_name} OWNER TO {prefix}_owner"))
            .await
            .unwrap();
    }
    let url_of = |role: &str| {
        if mysql {
            format!("mysql://{prefix}_{role}:change-me-{role}@127.0.0.1:3306/{db_name}")
        } else {
            format!("postgres://{prefix}_{role}@127.0.0.1:5432/{db_name}")
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let config_for = |role: &str| {
        let path = dir.path().join(format!("{role}.toml"));
        std::fs::write(&path, node_config(&url_of(role), "n", "")).unwrap();
        path
    };
    let run = |role: &str, args: &[&str]| {
        let cfg = config_for(role);
        let mut all = vec!["--config", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        sqlcron(&all)
    };
    let out = run("owner", &["migrate"]);
    assert!(out.status.success(), "migrate as owner: {}", stderr(&out));
    for sql in grant.iter().map(here) {
        admin
            .execute_raw(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    admin.close().await;

    // The daemon, with table rights only, starts (the schema is current: no DDL) and runs a
    // job an editor wrote with SQL.
    let daemon_cfg = std::fs::read_to_string(config_for("daemon")).unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &daemon_cfg);
    let editor = Store::connect(&db_url(&url_of("editor")), 1).unwrap();
    editor
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('hi', '* * * * * *', 'echo hi')",
        )
        .await
        .unwrap();
    // Placed jobs: a new placement value, the same value again (the trigger then finds it in
    // `cron_placements` and locks it while the row is written), a placement changed to it.
    for sql in [
        r#"INSERT INTO cron_table (name, schedule, command, placement) VALUES ('p1', '@yearly', 'true', '{"nodes":["z"]}')"#,
        r#"INSERT INTO cron_table (name, schedule, command, placement) VALUES ('p2', '@yearly', 'true', '{"nodes":["z"]}')"#,
        "INSERT INTO cron_table (name, schedule, command) VALUES ('p3', '@yearly', 'true')",
        r#"UPDATE cron_table SET placement = '{"nodes":["z"]}' WHERE name = 'p3'"#,
    ] {
        editor
            .execute_raw(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let reader = Store::connect(&db_url(&url_of("reader")), 1).unwrap();
    ran_ok(&reader, "hi").await;
    let out = run("editor", &["pause", "hi"]);
    assert!(out.status.success(), "pause as editor: {}", stderr(&out));
    let out = run("reader", &["status"]);
    assert!(out.status.success(), "status as reader: {}", stderr(&out));
    let out = run("locker", &["lock", "nightly", "--", "true"]);
    assert!(out.status.success(), "lock as locker: {}", stderr(&out));
    // doctor tells each role whether it could migrate: the owner can, the daemon's cannot (a
    // warning while the schema is current).
    let doctor_line = |role: &str| {
        let out = run(role, &["doctor"]);
        stdout(&out)
            .lines()
            .find(|l| l.contains("privileges"))
            .unwrap_or_default()
            .to_string()
    };
    let owner = doctor_line("owner");
    assert!(owner.contains("enough to migrate"), "{owner}");
    let daemon_line = doctor_line("daemon");
    assert!(
        daemon_line.contains("cannot create tables") && daemon_line.contains("docs/roles/"),
        "{daemon_line}"
    );

    // What each may not do.
    let refusal = if mysql { "denied" } else { "permission denied" };
    let denied = |e: sqlcron::store::StoreError| e.to_string().contains(refusal);
    let e = reader
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('x', '@hourly', 'id')",
        )
        .await
        .unwrap_err();
    assert!(denied(e));
    let e = editor
        .execute_raw("UPDATE cron_runs SET outcome = 'ok'")
        .await
        .unwrap_err();
    assert!(denied(e));
    if !mysql {
        // The placement list's trigger function runs with its owner's rights: no other role
        // may attach it to a table of its own (a temporary one) to write with them.
        editor
            .execute_raw("CREATE TEMP TABLE seen (placement TEXT)")
            .await
            .unwrap();
        let e = editor
            .execute_raw(
                "CREATE TRIGGER seen AFTER INSERT ON seen FOR EACH ROW \
                 EXECUTE FUNCTION cron_placement_seen()",
            )
            .await
            .unwrap_err();
        assert!(denied(e));
    }
    let locker = Store::connect(&db_url(&url_of("locker")), 1).unwrap();
    let e = locker
        .execute_raw("UPDATE cron_table SET command = 'id'")
        .await
        .unwrap_err();
    assert!(denied(e));
    let daemon = Store::connect(&db_url(&url_of("daemon")), 1).unwrap();
    let (drop_trigger, refused) = if mysql {
        ("DROP TRIGGER cron_table_before_update", "denied")
    } else {
        (
            "DROP TRIGGER cron_audit_change_update ON cron_table",
            "must be owner",
        )
    };
    let e = daemon.execute_raw(drop_trigger).await.unwrap_err();
    assert!(e.to_string().contains(refused), "{e}");
    for s in [editor, reader, locker, daemon] {
        s.close().await;
    }
    drop(node);
    drop(db);
    drop(roles);
}
