//! `sqlcron doctor`: one line per check of this node and the cluster it joins, each problem with
//! its fix. Exit 0 when every check passes, 1 on a warning, 2 on an error.

use std::os::unix::fs::PermissionsExt;

use serde::Serialize;

use crate::config::Config;
use crate::model::placement::{NodeOffer, unplaceable};
use crate::store::certificate;

use super::doctor_certificate::certificate_finding;
use crate::store::{Dialect, Store};

use super::Failure;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Level {
    Ok,
    Warn,
    Error,
}

/// One line of the report.
#[derive(Debug, Serialize)]
pub(super) struct Finding {
    pub check: &'static str,
    pub level: Level,
    pub message: String,
    /// What to do about it (empty when all is well).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

pub(super) fn ok(check: &'static str, message: impl Into<String>) -> Finding {
    Finding {
        check,
        level: Level::Ok,
        message: message.into(),
        fix: String::new(),
    }
}

pub(super) fn bad(
    check: &'static str,
    level: Level,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        check,
        level,
        message: message.into(),
        fix: fix.into(),
    }
}

/// Clock offsets above this are reported.
const CLOCK_WARN_MS: i64 = 1_000;

/// Runs every check and prints the report; the exit code is the worst level found.
pub(super) async fn run(config: &Config, json: bool) -> Result<u8, Failure> {
    let mut found = Vec::new();
    if config.path.exists() {
        found.push(ok(
            "configuration",
            format!(
                "{}: valid, {} job(s)",
                config.path.display(),
                config.jobs.len()
            ),
        ));
    } else {
        // The defaults alone (SQLite in the state directory, no job): legal, but rarely meant.
        found.push(bad(
            "configuration",
            Level::Warn,
            format!(
                "no configuration file at {}: the defaults are used (database {}, no job)",
                config.path.display(),
                config.database_url
            ),
            "write the file (the package installs one), or pass --config PATH",
        ));
    }
    if let Some(w) = crate::config::readable_secret_warning(config) {
        found.push(bad(
            "configuration",
            Level::Warn,
            w,
            "chmod 0640 the file (owner root, group of the service) or move the password to password_file",
        ));
    }
    match super::check::check_accounts(config) {
        Ok(()) => found.push(ok("accounts", "every job's account exists and is allowed")),
        Err(e) => found.push(bad(
            "accounts",
            Level::Error,
            e.message.trim().to_string(),
            "set the job's user, [daemon] default_user or allowed_users as the message says",
        )),
    }
    found.extend(local_files(config));
    let file = super::database_file::missing(&config.database_url)
        .or_else(|| super::database_file::unopenable(&config.database_url));
    match file {
        Some(p) => found.push(bad("database", Level::Error, p.message, &p.fix)),
        None => found.extend(database_checks(config).await),
    }
    found.push(super::doctor_node::listener(config).await);
    if let Some(warning) = crate::config::long_lease_warning(config) {
        found.push(bad(
            "configuration",
            Level::Warn,
            warning,
            "set [daemon] lease to 1h or less",
        ));
    }
    if let Some(warning) = crate::config::open_metrics_warning(config) {
        found.push(bad(
            "metrics",
            Level::Warn,
            warning,
            "set [metrics] token_file, or listen on 127.0.0.1",
        ));
    }
    found.extend(watchdog(config));
    let worst = found.iter().map(|f| f.level).max().unwrap_or(Level::Ok);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&found).map_err(Failure::runtime)?
        );
    } else {
        for f in &found {
            let level = match f.level {
                Level::Ok => "ok",
                Level::Warn => "WARN",
                Level::Error => "ERROR",
            };
            if f.fix.is_empty() {
                println!("{level:<5} {:<14} {}", f.check, f.message);
            } else {
                println!("{level:<5} {:<14} {} (fix: {})", f.check, f.message, f.fix);
            }
        }
    }
    Ok(match worst {
        Level::Ok => 0,
        Level::Warn => 1,
        Level::Error => 2,
    })
}

/// The SQLite file and its directory: private to the service.
fn local_files(config: &Config) -> Vec<Finding> {
    let Some(path) = config.database_url.sqlite_path() else {
        return vec![];
    };
    let mut found = vec![];
    for (what, p, most) in [
        (
            "state directory",
            path.parent().map(|p| p.to_path_buf()),
            0o750,
        ),
        ("database file", Some(path.to_path_buf()), 0o640),
    ] {
        let Some(p) = p else { continue };
        match std::fs::metadata(&p) {
            Ok(m) => {
                let mode = m.permissions().mode() & 0o777;
                if mode & !most != 0 {
                    found.push(bad(
                        "files",
                        Level::Warn,
                        format!(
                            "{what} {} is mode {mode:04o}: others can read it",
                            p.display()
                        ),
                        format!("chmod {most:04o} {}", p.display()),
                    ));
                } else {
                    found.push(ok(
                        "files",
                        format!("{what} {} mode {mode:04o}", p.display()),
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => found.push(ok(
                "files",
                format!("{what} {} not created yet", p.display()),
            )),
            Err(e) => found.push(bad(
                "files",
                Level::Error,
                format!("{what} {}: {e}", p.display()),
                "run doctor as the service's user, or fix the path",
            )),
        }
    }
    found
}

async fn database(store: &Store, config: &Config) -> Vec<Finding> {
    let mut found = vec![];
    let url = &config.database_url;
    let db_now = match store.now().await {
        Ok(t) => t,
        Err(e) => {
            found.push(bad(
                "database",
                Level::Error,
                format!("{} does not answer: {e}", url.redacted()),
                "check [database] url, the server and the network",
            ));
            return found;
        }
    };
    let tls = match url.dialect() {
        Dialect::Sqlite => String::new(),
        _ => {
            let text = url.redacted().to_lowercase();
            if text.contains("sslmode=verify") || text.contains("ssl-mode=verify") {
                ", TLS verified".into()
            } else if text.contains("sslmode=require") || text.contains("ssl-mode=required") {
                ", TLS without verifying the server".into()
            } else {
                ", no TLS required".into()
            }
        }
    };
    found.push(ok("database", format!("{} answers{tls}", url.redacted())));
    for (host, port) in url.servers() {
        let (dialect, h) = (url.dialect(), host.clone());
        let probe = tokio::task::spawn_blocking(move || {
            certificate::server_certificate(dialect, &h, port, std::time::Duration::from_secs(5))
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        found.push(certificate_finding(
            &host,
            port,
            probe,
            chrono::DateTime::from_timestamp_millis(db_now).unwrap_or_default(),
        ));
    }
    match store.schema_version().await {
        Ok((Some(applied), latest)) if applied == latest => {
            found.push(ok("schema", format!("current (migration {latest})")))
        }
        Ok((Some(applied), latest)) if applied > latest => {
            found.push(match store.oldest_reader().await {
                Err(e) => bad(
                    "schema",
                    Level::Error,
                    format!(
                        "migration {applied} applied, newer than this sqlcron knows ({latest}), and which sqlcron may use it cannot be read: {e}"
                    ),
                    "grant SELECT on cron_schema to this role (docs/roles/), or upgrade sqlcron on this node",
                ),
                Ok(needs) if needs > latest => bad(
                    "schema",
                    Level::Error,
                    crate::store::StoreError::SchemaTooNew {
                        applied,
                        needs,
                        knows: latest,
                    }
                    .to_string(),
                    "install the sqlcron release the other nodes run on this node",
                ),
                Ok(_) => bad(
                    "schema",
                    Level::Warn,
                    format!(
                        "migration {applied} applied, newer than this sqlcron knows ({latest}); usable as it is (its newer migrations only add)"
                    ),
                    "finish the upgrade on this node",
                ),
            })
        }
        Ok((applied, latest)) => found.push(bad(
            "schema",
            Level::Warn,
            format!(
                "migration {} applied, {latest} is current",
                applied.map_or_else(|| "none".to_string(), |a| a.to_string())
            ),
            "run sqlcron migrate (a daemon also migrates at start)",
        )),
        Err(e) => found.push(bad(
            "schema",
            Level::Error,
            e.to_string(),
            "check the database user's privileges",
        )),
    }
    let current = matches!(store.schema_version().await, Ok((Some(a), l)) if a >= l);
    match store.can_migrate().await {
        Ok(true) => found.push(ok("privileges", "enough to migrate the schema".to_string())),
        Ok(false) => found.push(bad(
            "privileges",
            if current { Level::Warn } else { Level::Error },
            format!(
                "the database user cannot create tables: {}",
                if current {
                    "fine for running (the schema is current), but the next upgrade's migration needs a user that can"
                } else {
                    "the schema cannot be brought up to date"
                }
            ),
            "run sqlcron migrate once as the owner role (docs/roles/), or grant CREATE on the schema",
        )),
        Err(e) => found.push(bad(
            "privileges",
            Level::Warn,
            e.to_string(),
            "check the database user's privileges",
        )),
    }
    let local_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let offset = local_now - db_now;
    if offset.abs() > CLOCK_WARN_MS {
        found.push(bad(
            "clock",
            Level::Warn,
            format!(
                "this host's clock is {:.1} s {} the database's",
                offset.abs() as f64 / 1000.0,
                if offset > 0 { "ahead of" } else { "behind" }
            ),
            "run NTP (systemd-timesyncd, chrony) on this host and the database server; sqlcron decides by the database's clock, but logs and hooks read this one",
        ));
    } else {
        found.push(ok("clock", format!("within {offset} ms of the database")));
    }
    let nodes = match store.nodes().await {
        Ok(n) => n,
        Err(e) => {
            found.push(bad(
                "nodes",
                Level::Error,
                e.to_string(),
                "check the schema",
            ));
            return found;
        }
    };
    let host = crate::exec::account::hostname().unwrap_or_default();
    let alive: Vec<_> = nodes.iter().filter(|n| n.alive(db_now)).collect();
    match alive
        .iter()
        .find(|n| n.name == config.node_name && n.host.as_deref().is_some_and(|h| h != host))
    {
        Some(other) => found.push(bad(
            "node name",
            Level::Error,
            format!(
                "\"{}\" is the name of a live node on host {}: two nodes with one name take each other's runs for their own",
                config.node_name,
                other.host.as_deref().unwrap_or("?")
            ),
            "give this node its own [node] name",
        )),
        None => found.push(ok(
            "node name",
            format!("\"{}\" is this host's only", config.node_name),
        )),
    }
    found.push(super::doctor_node::this_node(
        &nodes,
        &config.node_name,
        db_now,
    ));
    let versions: std::collections::BTreeSet<&str> =
        alive.iter().filter_map(|n| n.version.as_deref()).collect();
    if alive.is_empty() {
        // Every other check can pass on a cluster where nothing runs: this one says so first.
        found.push(bad(
            "live nodes",
            Level::Error,
            "no live node: nothing runs",
            "start the service on at least one node (systemctl start sqlcron), then run doctor again",
        ));
    } else if versions.len() > 1 {
        use super::upgrade_window::{UPGRADE_WINDOW_MS, mixed_since};
        let each: Vec<String> = alive
            .iter()
            .map(|n| format!("{} {}", n.name, n.version.as_deref().unwrap_or("?")))
            .collect();
        let since = mixed_since(
            alive
                .iter()
                .map(|n| (n.version.as_deref().unwrap_or("?"), n.started)),
        )
        .unwrap_or(db_now);
        let lasted = crate::model::duration::format_duration(std::time::Duration::from_secs(
            ((db_now - since).max(0) / 1000) as u64,
        ));
        found.push(if db_now - since > UPGRADE_WINDOW_MS {
            bad(
                "versions",
                Level::Warn,
                format!(
                    "live nodes have run different versions for {lasted}: {}",
                    each.join(", ")
                ),
                "finish the rolling upgrade (sqlcron drain --wait, install, restart, sqlcron undrain on each remaining node)",
            )
        } else {
            ok(
                "versions",
                format!(
                    "a rolling upgrade for {lasted} (doctor warns after an hour): {}",
                    each.join(", ")
                ),
            )
        });
    } else {
        found.push(ok(
            "versions",
            format!("{} live node(s), one version", alive.len()),
        ));
    }
    let drift = crate::store::drift(&nodes, db_now);
    if drift.is_empty() {
        found.push(ok("drift", "live nodes' TOML files agree"));
    } else {
        let jobs: Vec<&str> = drift.iter().map(|d| d.job.as_str()).collect();
        found.push(bad(
            "drift",
            Level::Warn,
            format!(
                "live nodes' TOML files disagree on {} (sqlcron status shows which node has what)",
                jobs.join(", ")
            ),
            "deploy the same file to every node, then systemctl reload sqlcron",
        ));
    }
    let rows = match store.jobs().await {
        Ok(r) => r,
        Err(e) => {
            found.push(bad("jobs", Level::Error, e.to_string(), "check the schema"));
            return found;
        }
    };
    let parked: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.error
                .as_ref()
                .or(r.decode_error.as_ref())
                .map(|e| format!("{}: {e}", r.name))
        })
        .collect();
    if parked.is_empty() {
        found.push(ok("parked jobs", "none"));
    } else {
        found.push(bad(
            "parked jobs",
            Level::Warn,
            format!("{} parked: {}", parked.len(), parked.join("; ")),
            "fix the row (any change to its definition puts it back in the schedule)",
        ));
    }
    let offers: Vec<NodeOffer> = nodes
        .iter()
        .map(|n| NodeOffer::new(&n.name, n.tags.as_deref(), n.alive(db_now) && !n.drain))
        .collect();
    let orphans: Vec<String> = rows
        .iter()
        .filter(|r| r.enabled)
        .filter_map(|r| {
            unplaceable(r.placement.as_deref(), &offers).map(|why| format!("{}: {why}", r.name))
        })
        .collect();
    if alive.is_empty() {
        // Reported above ("live nodes"): no job has a node to run it.
    } else if orphans.is_empty() {
        found.push(ok(
            "placement",
            "every enabled job has a live node to run it",
        ));
    } else {
        found.push(bad(
            "placement",
            Level::Warn,
            format!("no live node can run {}", orphans.join("; ")),
            "give a node the tags the job asks for ([node] tags), or change its `on`",
        ));
    }
    found
}

/// Under systemd: the unit's watchdog leaves the poll loop and the database retry room.
fn watchdog(config: &Config) -> Option<Finding> {
    std::env::var_os("INVOCATION_ID")?;
    let out = std::process::Command::new("systemctl")
        .args(["show", "sqlcron", "--property=WatchdogUSec", "--value"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let watchdog = humantime::parse_duration(&text.replace(' ', "")).ok()?;
    let needed = config.daemon.poll_interval + std::time::Duration::from_secs(10);
    Some(if watchdog.is_zero() || watchdog > needed {
        ok("watchdog", format!("WatchdogSec {text}"))
    } else {
        bad(
            "watchdog",
            Level::Error,
            format!("WatchdogSec {text} is not above poll_interval plus the 10 s database retry"),
            format!(
                "systemctl edit sqlcron: WatchdogSec={}s",
                needed.as_secs() * 2
            ),
        )
    })
}

/// The checks that need the database, once its file (SQLite) is there and can be opened.
async fn database_checks(config: &Config) -> Vec<Finding> {
    let mut found = vec![];
    match super::connect(config).await {
        Ok(store) => {
            found.extend(database(&store, config).await);
            match store.binlog_format().await {
                Ok(Some(format)) if format.eq_ignore_ascii_case("STATEMENT") => found.push(bad(
                    "binary log",
                    Level::Warn,
                    "the server logs writes as statements (binlog_format = STATEMENT): its replicas stop at sqlcron's first insert of a job, audit row or lock request, and sqlcron's sessions keep the server's isolation level",
                    "SET GLOBAL binlog_format = 'MIXED' (or ROW), and in the server's configuration (docs/src/how-to/production-databases.md)",
                )),
                Ok(Some(format)) => found.push(ok("binary log", format!("binlog_format = {format}"))),
                Ok(None) => {}
                Err(e) => found.push(bad(
                    "binary log",
                    Level::Warn,
                    format!("the server's binlog_format could not be read: {e}"),
                    "look at it with SELECT @@log_bin, @@binlog_format (STATEMENT stops replicas)",
                )),
            }
            store.close().await;
        }
        Err(e) => found.push(bad(
            "database",
            Level::Error,
            format!("cannot connect: {}", e.message),
            "check [database] url, the server and the network",
        )),
    }
    found
}
