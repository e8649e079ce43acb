//! The raw file to a validated [`Config`]: every default applied, every problem reported at
//! once. Jobs are checked in `jobs.rs`, the database URLs in `database.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::database::{self, Database};
use super::jobs::{check_inherit_name, job_spec};
use super::raw::*;
use super::*;
use crate::model::duration::parse_duration;
use crate::model::job::PolicyOverrides;

pub(super) struct Collector {
    pub(super) problems: Vec<Problem>,
}

impl Collector {
    pub(super) fn push(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }

    pub(super) fn duration(
        &mut self,
        location: &str,
        value: &Option<String>,
        default: Duration,
    ) -> Duration {
        match value {
            None => default,
            Some(text) => parse_duration(text).unwrap_or_else(|m| {
                self.push(location, m);
                default
            }),
        }
    }
}

/// Turns the raw file into a validated [`Config`], reporting every problem.
pub fn validate(raw: RawConfig, path: &Path, env: &Environment) -> Result<Config, ConfigError> {
    let mut c = Collector { problems: vec![] };

    let Database {
        url: database_url,
        secrets: database_secrets,
        read_url: database_read_url,
        direct_url: database_direct_url,
    } = database::validate(&raw.database, env, path, &mut c);

    let node_name = raw
        .node
        .name
        .clone()
        .or(env.hostname.clone())
        .unwrap_or_else(|| "localhost".into());
    let name_max = name_max_chars(database_url.dialect());
    if let Err(m) = crate::model::names::check_name(&node_name, name_max) {
        c.push("[node] name", format!("{m}{}", name_limit_reason(name_max)));
    }

    let mut node_tags = raw.node.tags.clone();
    node_tags.sort();
    node_tags.dedup();
    if let Some(t) = node_tags
        .iter()
        .find(|t| t.trim().is_empty() || t.contains(char::is_whitespace))
    {
        c.push("[node] tags", format!("\"{t}\" must be a non-empty word"));
    }

    let d = &raw.daemon;
    let lease = c.duration("[daemon] lease", &d.lease, LEASE_DEFAULT);
    let daemon = DaemonConfig {
        poll_interval: c.duration(
            "[daemon] poll_interval",
            &d.poll_interval,
            POLL_INTERVAL_DEFAULT,
        ),
        lease: lease.min(super::LEASE_MAX),
        lease_asked: Some(lease).filter(|l| *l > super::LEASE_MAX),
        max_parallel: match d.max_parallel {
            None => MAX_PARALLEL_DEFAULT,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(n) => {
                c.push("[daemon] max_parallel", format!("{n} must be 1-10000"));
                MAX_PARALLEL_DEFAULT
            }
        },
        shutdown_grace: c.duration(
            "[daemon] shutdown_grace",
            &d.shutdown_grace,
            SHUTDOWN_GRACE_DEFAULT,
        ),
        live_output: match c.duration("[daemon] live_output", &d.live_output, LIVE_OUTPUT_DEFAULT) {
            d if d.is_zero() || d >= Duration::from_secs(1) => d,
            d => {
                c.push(
                    "[daemon] live_output",
                    format!("{d:?} must be 0s (off) or at least 1s"),
                );
                LIVE_OUTPUT_DEFAULT
            }
        },
        output_tail: match d.output_tail {
            None => OUTPUT_TAIL_DEFAULT,
            Some(n) if (0..=16 * 1024 * 1024).contains(&n) => n as usize,
            Some(n) => {
                c.push(
                    "[daemon] output_tail",
                    format!("{n} must be 0-16777216 bytes"),
                );
                OUTPUT_TAIL_DEFAULT
            }
        },
        output_log_lines: match d.output_log_lines {
            None => OUTPUT_LOG_LINES_DEFAULT,
            Some(n) if (0..=10_000_000).contains(&n) => n as usize,
            Some(n) => {
                c.push(
                    "[daemon] output_log_lines",
                    format!("{n} must be 0-10000000 lines"),
                );
                OUTPUT_LOG_LINES_DEFAULT
            }
        },
        output_log_bytes: match d.output_log_bytes {
            None => OUTPUT_LOG_BYTES_DEFAULT,
            Some(n) if (0..=1024 * 1024 * 1024).contains(&n) => n as usize,
            Some(n) => {
                c.push(
                    "[daemon] output_log_bytes",
                    format!("{n} must be 0-1073741824 bytes"),
                );
                OUTPUT_LOG_BYTES_DEFAULT
            }
        },
        default_user: d.default_user.clone(),
        // Set once the jobs are read (their users are the default list).
        allowed: crate::model::run_as::Allowed::default(),
        inherit_env: d.inherit_env.clone().unwrap_or_default(),
        wakeups: d.wakeups.unwrap_or(true),
    };

    let database_pool_size = match raw.database.pool_size {
        Some(n) if !(1..=200).contains(&n) => {
            c.push("[database] pool_size", format!("{n} must be 1-200"));
            1
        }
        Some(n) => n,
        None => default_pool_size(daemon.max_parallel),
    };
    for name in &daemon.inherit_env {
        if let Err(m) = check_inherit_name(name) {
            c.push("[daemon] inherit_env", m);
        }
    }
    if daemon.poll_interval < Duration::from_millis(10) {
        c.push("[daemon] poll_interval", "must be at least 10ms");
    }
    if daemon.lease < Duration::from_secs(1) {
        c.push("[daemon] lease", "must be at least 1s");
    } else if daemon.lease <= daemon.poll_interval {
        c.push(
            "[daemon] lease",
            format!(
                "{} must be longer than poll_interval ({})",
                humantime::format_duration(daemon.lease),
                humantime::format_duration(daemon.poll_interval)
            ),
        );
    }

    let defaults = match PolicyOverrides::from_raw(&raw.defaults) {
        Ok(o) => o.apply_to(&Policy::default()),
        Err((key, message)) => {
            c.push(format!("[defaults] {key}"), message);
            Policy::default()
        }
    };

    let mut pools = BTreeMap::new();
    for (name, size) in &raw.pools {
        if (1..=100_000).contains(size) {
            pools.insert(name.clone(), *size as u32);
        } else {
            c.push(
                format!("[pools] {name}"),
                format!("{size} must be 1-100000"),
            );
        }
    }

    let level = raw.log.level.clone().unwrap_or_else(|| "info".into());
    if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
        c.push(
            "[log] level",
            format!("\"{level}\" is not a level or filter (e.g. \"info\", \"sqlcron=debug\")"),
        );
    }
    let target = raw.log.target.clone().unwrap_or_else(|| "auto".into());
    if !["auto", "journald", "stderr"].contains(&target.as_str()) {
        c.push(
            "[log] target",
            format!("\"{target}\" must be auto, journald or stderr"),
        );
    }

    let metrics_listen = raw.metrics.listen.as_deref().and_then(|l| match l.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            c.push(
                "[metrics] listen",
                format!("\"{l}\" is not an address and port (e.g. \"127.0.0.1:9464\")"),
            );
            None
        }
    });

    let history = history_config(&raw.history, &mut c);
    let alert_defaults = raw
        .defaults
        .alert_settings()
        .unwrap_or_else(|(key, message)| {
            c.push(format!("[defaults] {key}"), message);
            AlertSettings::default()
        });
    let delivery_default = crate::model::hooks::DeliveryConfig::default();
    let delivery = crate::model::hooks::DeliveryConfig {
        timeout: c.duration(
            "[alerts] timeout",
            &raw.alerts.timeout,
            delivery_default.timeout,
        ),
        give_up_after: c.duration(
            "[alerts] give_up_after",
            &raw.alerts.give_up_after,
            delivery_default.give_up_after,
        ),
    };

    let mut jobs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, job) in raw.jobs.iter().enumerate() {
        let label = match &job.name {
            Some(n) => format!("job \"{n}\""),
            None => format!("job #{}", i + 1),
        };
        match job_spec(job, &pools) {
            Ok(spec) => {
                if !seen.insert(spec.name.clone()) {
                    c.push(format!("{label} name"), "is defined twice");
                }
                if let Err(m) = crate::model::names::check_name(&spec.name, name_max) {
                    c.push(
                        format!("{label} name"),
                        format!("{m}{}", name_limit_reason(name_max)),
                    );
                }
                jobs.push(spec);
            }
            Err(problems) => {
                for (key, message) in problems {
                    c.push(format!("{label} {key}"), message);
                }
            }
        }
    }

    let calendars = super::calendars::validate(&raw.calendars, &mut c);
    let defined = |n: &String| calendars.iter().any(|d| &d.name == n);
    let undefined = |n: &String| {
        format!("calendar \"{n}\" is not defined: add a [[calendar]] table with that name")
    };
    for n in defaults.calendars.names().iter().filter(|n| !defined(n)) {
        c.push("[defaults] skip_on/only_in", undefined(n));
    }
    for job in &jobs {
        for (key, names) in [
            ("skip_on", &job.overrides.calendars.skip_on),
            ("only_in", &job.overrides.calendars.only_in),
        ] {
            for n in names.iter().flatten().filter(|n| !defined(n)) {
                c.push(format!("job \"{}\" {key}", job.name), undefined(n));
            }
        }
    }

    if raw.defaults.requires.is_some() {
        c.push(
            "[defaults] requires",
            "names a job's own upstreams: set it on the job ([[job]] requires)",
        );
    }
    // Upstreams (`requires` and `after`) are jobs of this file, without a cycle.
    let edges: BTreeMap<String, Vec<String>> = jobs
        .iter()
        .map(|j| {
            let ups = j.overrides.requires.iter().flatten().map(|r| &r.job);
            let ups = ups.chain(j.after.iter().map(|a| &a.job));
            (j.name.clone(), ups.cloned().collect())
        })
        .collect();
    for job in &jobs {
        let named = job
            .overrides
            .requires
            .iter()
            .flatten()
            .map(|r| ("requires", &r.job));
        for (key, up) in named.chain(job.after.iter().map(|a| ("after", &a.job))) {
            if !edges.contains_key(up) {
                c.push(
                    format!("job \"{}\" {key}", job.name),
                    format!("\"{up}\" is not a job of this file"),
                );
            }
        }
        if !job.after.is_empty() {
            let label = format!("job \"{}\" after", job.name);
            if job.every_node {
                c.push(
                    &label,
                    "a job with run_on = \"every_node\" cannot follow others",
                );
            }
            if job.name.chars().count() > crate::model::chains::MAX_CHAINED_NAME {
                c.push(
                    &label,
                    format!(
                        "the name of a job with after has at most {} characters (its chained \
                         runs add #after-<run id>)",
                        crate::model::chains::MAX_CHAINED_NAME
                    ),
                );
            }
            for up in &job.after {
                if jobs.iter().any(|j| j.name == up.job && j.every_node) {
                    c.push(
                        &label,
                        format!(
                            "\"{}\" runs on every node (its runs are its copies'): it cannot \
                             be followed",
                            up.job
                        ),
                    );
                }
            }
        }
        if let Some(cycle) = crate::model::requires::cycle_through(&edges, &job.name) {
            c.push(
                format!("job \"{}\" requires/after", job.name),
                format!("a cycle: {}", cycle.join(" → ")),
            );
        }
    }

    let mut daemon = daemon;
    for (key, list) in [
        ("allowed_users", &raw.daemon.allowed_users),
        ("allowed_groups", &raw.daemon.allowed_groups),
    ] {
        if let Some(bad) = list
            .iter()
            .flatten()
            .find(|n| n.is_empty() || n.contains(char::is_whitespace))
        {
            c.push(
                format!("[daemon] {key}"),
                format!("\"{bad}\" is not an account name"),
            );
        }
    }
    daemon.allowed = crate::model::run_as::Allowed::new(
        raw.daemon.allowed_users.as_deref(),
        raw.daemon.allowed_groups.as_deref().unwrap_or_default(),
        daemon.default_user.as_deref(),
        jobs.iter().filter_map(|j| j.user.as_deref()),
    );

    let security = super::security::validate(&raw.security, &mut c);
    let web = super::web::validate(&raw.web, &mut c);
    let cluster = super::cluster::validate(&raw.cluster, &mut c);

    if !c.problems.is_empty() {
        return Err(ConfigError {
            path: path.to_path_buf(),
            problems: c.problems,
        });
    }
    Ok(Config {
        path: path.to_path_buf(),
        database_url,
        database_secrets,
        database_read_url,
        database_pool_size,
        database_direct_url,
        node_name,
        node_tags,
        daemon,
        defaults,
        pools,
        log: LogConfig { level, target },
        metrics_listen,
        metrics_token_file: raw.metrics.token_file.clone(),
        metrics_token: None,
        web,
        history,
        alert_defaults,
        delivery,
        jobs,
        security,
        calendars,
        cluster,
    })
}

fn history_config(raw: &RawHistory, c: &mut Collector) -> crate::model::retention::HistoryConfig {
    use crate::model::retention::{HistoryConfig, parse_keep};
    let defaults = HistoryConfig::default();
    let mut keep = |key: &str, value: &Option<String>, default| match value {
        None => default,
        Some(text) => parse_keep(text).unwrap_or_else(|m| {
            c.push(format!("[history] {key}"), m);
            default
        }),
    };
    let keep_runs_age = keep("keep", &raw.keep, defaults.keep);
    let keep_audit = keep("keep_audit", &raw.keep_audit, defaults.keep_audit);
    let keep_runs = match raw.keep_runs {
        None => defaults.keep_runs,
        Some(0) => None,
        Some(n) if n > 0 => Some(n as u64),
        Some(n) => {
            c.push(
                "[history] keep_runs",
                format!("{n} must be a positive number of runs, or 0 for no limit"),
            );
            defaults.keep_runs
        }
    };
    let prune_interval = c.duration(
        "[history] prune_interval",
        &raw.prune_interval,
        defaults.prune_interval,
    );
    if prune_interval < std::time::Duration::from_secs(1) {
        c.push("[history] prune_interval", "must be at least 1s");
    }
    HistoryConfig {
        keep: keep_runs_age,
        keep_runs,
        keep_audit,
        prune_interval,
    }
}

/// Longest job or node name the database in `url` stores: 191 characters on MySQL/MariaDB
/// (`VARCHAR(191)`, the most a utf8mb4 unique index allows), else 200.
fn name_max_chars(dialect: Dialect) -> usize {
    if dialect == Dialect::Mysql { 191 } else { 200 }
}

fn name_limit_reason(max: usize) -> &'static str {
    if max == 191 { " on MySQL/MariaDB" } else { "" }
}
