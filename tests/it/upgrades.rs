//! Issue 52 (5, 8): a cluster is upgraded one node at a time, so for a while nodes of two
//! releases share one schema. Every migration only adds (no column dropped, renamed, retyped or
//! made NOT NULL; a new column on an old table is nullable or has a default), a schema newer than
//! a node is used as it is while its `oldest_reader` allows, and refused cleanly (exit status 3,
//! the reason, no restart loop) when it does not. docs/upgrades.md.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(
    every_migration_keeps_what_the_one_before_wrote,
    a_newer_schema_is_used_until_it_needs_a_newer_node
);

// MySQL/MariaDB's own migration of data (`mysql/0031`).
mod mysql_placement_bytes {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn placement_values_differing_in_case_are_told_apart_after_the_upgrade() {
        super::placement_values_differing_in_case_are_told_apart_after_the_upgrade().await
    }
}

/// Before `mysql/0031` the placement columns compared blind to case: the jobs placed on the
/// tags `GPU` and `gpu` shared the value written first, and `placement IN (...)` matched both.
/// The migration makes them compare bytes and puts back the value it had dropped.
async fn placement_values_differing_in_case_are_told_apart_after_the_upgrade() {
    let db = TestDb::new(Dialect::Mysql).await;
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let migrator = sqlx::migrate::Migrator::new(folder(Dialect::Mysql))
        .await
        .unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
            n
        }
    };
    let matching = "SELECT COUNT(*) FROM cron_table WHERE placement IN ('{\"tags\":[\"gpu\"]}')";
    let values = "SELECT COUNT(*) FROM cron_placements";
    migrator.run_to(30, &pool).await.unwrap();
    sqlx::query(
        r#"INSERT INTO cron_table (name, schedule, command, placement) VALUES
           ('upper', '* * * * *', 'true', '{"tags":["GPU"]}'),
           ('lower', '* * * * *', 'true', '{"tags":["gpu"]}')"#,
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(
        (count(values).await, count(matching).await),
        (1, 2),
        "before"
    );
    migrator.run_to(31, &pool).await.unwrap();
    assert_eq!(
        (count(values).await, count(matching).await),
        (2, 1),
        "after"
    );
    pool.close().await;
}

fn folder(dialect: Dialect) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(match dialect {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        })
}

/// One column as the database describes it: its type, whether it takes NULL, its default.
#[derive(Debug, Clone, PartialEq)]
struct Column {
    kind: String,
    nullable: bool,
    default: Option<String>,
}

/// Every column of the schema's tables (`table.column`), from the database's own catalogue.
async fn columns(pool: &sqlx::AnyPool, dialect: Dialect) -> BTreeMap<String, Column> {
    let sql = match dialect {
        Dialect::Postgres => {
            "SELECT table_name || '.' || column_name, \
                    data_type || COALESCE('(' || character_maximum_length || ')', ''), \
                    is_nullable, column_default \
             FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name NOT LIKE '\\_sqlx%'"
        }
        Dialect::Mysql => {
            "SELECT CAST(CONCAT(table_name, '.', column_name) AS CHAR), CAST(column_type AS CHAR), \
                    CAST(is_nullable AS CHAR), CAST(column_default AS CHAR) \
             FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name NOT LIKE '\\_sqlx%'"
        }
        Dialect::Sqlite => {
            "SELECT m.name || '.' || p.name, p.type, \
                    CASE WHEN p.\"notnull\" = 1 THEN 'NO' ELSE 'YES' END, p.dflt_value \
             FROM sqlite_master m JOIN pragma_table_info(m.name) p \
             WHERE m.type = 'table' AND m.name NOT LIKE '\\_sqlx%' ESCAPE '\\' \
               AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        }
    };
    let rows: Vec<(String, String, String, Option<String>)> =
        sqlx::query_as(sql).fetch_all(pool).await.unwrap();
    rows.into_iter()
        .map(|(name, kind, nullable, default)| {
            (
                name,
                Column {
                    kind: kind.to_ascii_lowercase(),
                    nullable: nullable == "YES",
                    default,
                },
            )
        })
        .collect()
}

/// Point 8: migrations are applied one at a time, and after each the schema still has every
/// column the one before had, of the same type, taking NULL if it did; a column added to a table
/// that existed takes NULL or has a default, so an older node's inserts still work. A migration
/// that drops, renames or retypes a column fails here, naming it.
async fn every_migration_keeps_what_the_one_before_wrote(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    // Installs sqlx's drivers (Store::connect does) before a pool of this test's own.
    let store = db.store().await;
    let url = match dialect {
        Dialect::Sqlite => format!("{}?mode=rwc", db.url),
        _ => db.url.clone(),
    };
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let migrator = sqlx::migrate::Migrator::new(folder(dialect)).await.unwrap();
    let versions: Vec<i64> = migrator.iter().map(|m| m.version).collect();
    assert!(versions.len() > 20, "{versions:?}");
    let mut before: BTreeMap<String, Column> = BTreeMap::new();
    let mut problems = Vec::new();
    for version in versions {
        migrator.run_to(version, &pool).await.unwrap();
        let after = columns(&pool, dialect).await;
        for (name, was) in &before {
            match after.get(name) {
                None => problems.push(format!("migration {version} removes {name}")),
                Some(now) if now.kind != was.kind => problems.push(format!(
                    "migration {version} changes the type of {name}: {} -> {}",
                    was.kind, now.kind
                )),
                Some(now) if was.nullable && !now.nullable => {
                    problems.push(format!("migration {version} makes {name} NOT NULL"))
                }
                Some(_) => {}
            }
        }
        let old_tables: std::collections::BTreeSet<&str> = before
            .keys()
            .filter_map(|k| k.split_once('.').map(|(t, _)| t))
            .collect();
        for (name, now) in &after {
            let table = name.split_once('.').map_or("", |(t, _)| t);
            if !before.contains_key(name)
                && old_tables.contains(table)
                && !now.nullable
                && now.default.is_none()
            {
                problems.push(format!(
                    "migration {version} adds {name} NOT NULL without a default: an older node's inserts fail"
                ));
            }
        }
        before = after;
    }
    assert!(
        problems.is_empty(),
        "migrations that an older node cannot use (docs/upgrades.md):\n{}",
        problems.join("\n")
    );
    // The schema says who may use it: the newest migration but one (this release only adds).
    let newest = migrator.iter().map(|m| m.version).max().unwrap();
    let oldest_reader = store.oldest_reader().await.unwrap();
    assert!(
        (1..=newest).contains(&oldest_reader),
        "oldest_reader {oldest_reader}, newest migration {newest}"
    );
    pool.close().await;
    store.close().await;
}

/// Point 5 and 8: the next release's schema (here: one more migration that adds a column and a
/// table, recorded as sqlx records it) is used by this release's daemon and CLI as it is; once
/// the schema says it needs a newer node (`oldest_reader` past this build's newest migration),
/// `migrate` and a starting daemon refuse with exit status 3 and say what to do, and `doctor`
/// names it.
async fn a_newer_schema_is_used_until_it_needs_a_newer_node(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";
    let config = dir.path().join("cli.toml");
    std::fs::write(&config, node_config(&db.url, "cli", jobs)).unwrap();
    let cli = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = sqlcron(&all);
        (out.status.code(), stdout(&out), stderr(&out))
    };
    let (code, text, err) = cli(&["migrate"]);
    assert_eq!(code, Some(0), "{text}{err}");
    let (_, knows) = store.schema_version().await.unwrap();

    // The next release: one migration more, which only adds.
    let next = knows + 1;
    let checksum = match dialect {
        Dialect::Postgres => "decode('00', 'hex')",
        _ => "X'00'",
    };
    for sql in [
        "ALTER TABLE cron_table ADD COLUMN next_release_note VARCHAR(100) NULL".to_string(),
        "CREATE TABLE cron_next_release (id INTEGER PRIMARY KEY)".to_string(),
        format!(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ({next}, 'next release', TRUE, {checksum}, 1)"
        ),
    ] {
        store.execute_raw(&sql).await.unwrap();
    }
    let (code, text, err) = cli(&["migrate"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains(&format!("migration {next}")) && text.contains("used as it is"),
        "{text}"
    );
    let n1 = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", jobs));
    eventually(
        Duration::from_secs(30),
        "a run on the newer schema",
        || async {
            let ran: Option<i64> = store
                .scalar_i64(
                    "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'tick' AND outcome = 'ok'",
                )
                .await
                .unwrap();
            ran.filter(|n| *n >= 2).map(|_| ())
        },
    )
    .await;
    let (code, text, err) = cli(&["status"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.contains("tick"), "{text}");

    // A release later, a migration removes something this release reads, and says so.
    store
        .execute_raw(&format!(
            "UPDATE cron_schema SET value = {next} WHERE name = 'oldest_reader'"
        ))
        .await
        .unwrap();
    let (code, text, err) = cli(&["migrate"]);
    assert_eq!(code, Some(3), "{text}{err}");
    assert!(
        err.contains(&format!(
            "needs a sqlcron that knows migration {next} or later; this sqlcron knows up to {knows}: upgrade sqlcron on this node"
        )),
        "{err}"
    );
    let mut n2 = DaemonProcess::start(dir.path(), "n2", &node_config(&db.url, "n2", jobs));
    let status = crate::util::wait_exit(
        &mut n2.child,
        Duration::from_secs(30),
        "a daemon refusing a schema it cannot use",
    )
    .await;
    assert_eq!(status.code(), Some(3), "{}", n2.log_text());
    assert!(
        n2.log_text().contains("upgrade sqlcron on this node"),
        "{}",
        n2.log_text()
    );
    let (code, text, err) = cli(&["doctor"]);
    assert_eq!(code, Some(2), "{text}{err}");
    assert!(
        text.lines().any(|l| l.starts_with("ERROR")
            && l.contains("schema")
            && l.contains(&format!("needs a sqlcron that knows migration {next}"))),
        "{text}"
    );
    n1.stop();
    store.close().await;
}
