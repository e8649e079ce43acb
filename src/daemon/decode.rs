//! A claimed row, decoded into what it means: its schedule and policy (or why it cannot run),
//! and the command line, environment and limits of a run. Pure: no database, no process.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::exec::account::Account;
use crate::exec::runner::{Program, RunSpec};
use crate::model::job::{Limits, Policy};
use crate::model::row_decode::{inherit_list, row_http, row_limits};
pub use crate::model::row_decode::{resolve, row_alerts};
use crate::schedule::Schedule;
use crate::store::JobRow;

/// [`resolve`], whether this node trusts the row ([`trusted`]) and whether it lets the row run
/// as the account it names ([`account_allowed`]): what the claim path and the preparation of new
/// rows check before a row may be scheduled or run. An `Err` parks the row with the reason.
/// `template` is the template row of an every_node copy (read only in signed mode).
pub fn resolve_here(
    row: &JobRow,
    config: &Config,
    daemon: &Account,
    template: Option<&JobRow>,
) -> Result<(Schedule, Policy), String> {
    let resolved = resolve(row, &config.defaults)?;
    trusted(row, config, template)?;
    account_allowed(row, config, daemon)?;
    Ok(resolved)
}

/// Whether this node runs what the row defines: always with `[security] sql_jobs = "open"`;
/// with `"signed"`, a row of this node's own TOML that runs exactly what the file says, an
/// every_node copy of a trusted template, or a row whose signature by a trusted key matches its
/// definition (see [`crate::model::signing`]).
pub fn trusted(row: &JobRow, config: &Config, template: Option<&JobRow>) -> Result<(), String> {
    use crate::config::security::SqlJobs;
    if config.security.sql_jobs == SqlJobs::Open {
        return Ok(());
    }
    if let Some(name) = &row.template {
        let Some(t) = template.filter(|t| {
            &t.name == name && t.template.is_none() && t.run_on.as_deref() == Some("every_node")
        }) else {
            return Err(format!(
                "every_node copy: its template \"{name}\" is not an every_node job; a copy runs only what a trusted template defines"
            ));
        };
        // A copy is `T@NODE`, pinned to NODE by its placement and nothing else, and NODE is
        // one the template's placement admits (judged on NODE, the only node the pin lets
        // claim it): a row carrying the template's signed columns with a placement or a name
        // of its own would otherwise run the template where its signed placement excludes.
        let pinned_to = row
            .name
            .strip_prefix(name.as_str())
            .and_then(|rest| rest.strip_prefix('@'))
            .filter(|node| !node.is_empty());
        let Some(node) = pinned_to else {
            return Err(format!(
                "every_node copy: its name is not \"{name}@NODE\"; a copy runs only under the name its node gives it"
            ));
        };
        let pin = crate::model::placement::Placement {
            tags: vec![],
            nodes: vec![node.to_string()],
        };
        let own = row
            .placement
            .as_deref()
            .map(crate::model::placement::Placement::from_json);
        if !matches!(own, Some(Ok(p)) if p == pin) {
            return Err(format!(
                "every_node copy: its placement is not the pin to its node \"{node}\"; a copy runs only on the node it is named for"
            ));
        }
        if node == config.node_name
            && let Some(placement) = t
                .placement
                .as_deref()
                .map(crate::model::placement::Placement::from_json)
            && !placement.is_ok_and(|p| p.matches(node, &config.node_tags))
        {
            return Err(format!(
                "every_node copy: the template \"{name}\"'s placement excludes this node"
            ));
        }
        // The copy's own placement pins it to its node; the rest is the template's.
        let mut as_template = row.clone();
        as_template.placement = t.placement.clone();
        as_template.run_on = t.run_on.clone();
        if !as_template.definition().same_as(&t.definition()) {
            return Err(format!(
                "every_node copy: runs something else than its template \"{name}\"; the template's next sync restores it"
            ));
        }
        return trusted(t, config, None).map_err(|e| format!("template \"{name}\": {e}"));
    }
    // A TOML job's row, or a row it makes of itself (a backfill's `JOB#backfill-SLOT`, a
    // chain's `JOB#after-RUN`, which copy its definition): trusted when it runs exactly what
    // this node's file says. (Chained rows were judged by a signature no TOML job has, and
    // parked: a chain did not go on in signed mode.)
    let derived = crate::model::signing::signed_name(&row.name);
    let toml_name = match row.source.as_str() {
        "toml" => Some(row.name.as_str()),
        _ => Some(derived).filter(|job| *job != row.name),
    };
    if let Some(spec) = toml_name.and_then(|n| config.jobs.iter().find(|j| j.name == n)) {
        if crate::store::apply::definition_of(spec).same_as(&row.definition()) {
            return Ok(());
        }
        if row.source == "toml" {
            return Err(format!(
                "differs from the job \"{}\" in this node's TOML file (changed with SQL?): `sqlcron apply` restores it",
                row.name
            ));
        }
    }
    // Signed for this name (a backfill's or a chain's row: for its job's), and not older than
    // a version this node has already run (a replay).
    let generation = crate::model::signing::verify_row(
        &row.name,
        &row.definition(),
        row.signature.as_deref(),
        &config.security.trusted_keys,
    )
    .map_err(|r| r.message().to_string())?;
    super::generations::admit(derived, generation)
}

/// What a run's process is made of besides its row: the daemon's own account and environment,
/// read once at start.
#[derive(Debug, Clone)]
pub struct Host {
    pub account: Account,
    pub env: BTreeMap<String, String>,
}

impl Host {
    pub fn from_process() -> Host {
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Host {
            account: crate::exec::account::current().unwrap_or_else(|_| Account {
                name: uid.to_string(),
                uid,
                gid,
                groups: vec![gid],
                home: "/".into(),
                shell: "/bin/sh".into(),
            }),
            env: std::env::vars().collect(),
        }
    }
}

/// `PATH` of a job unless its `env` or `inherit_env` says otherwise.
pub const JOB_PATH_DEFAULT: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which account a row's run switches to (see [`crate::model::run_as::run_as`]).
pub fn run_as(
    row: &JobRow,
    config: &Config,
    daemon: &Account,
) -> Result<Option<(String, Option<String>)>, String> {
    crate::model::run_as::run_as(
        row.run_user.as_deref(),
        row.run_group.as_deref(),
        config.daemon.default_user.as_deref(),
        &daemon.as_daemon(),
    )
}

/// Whether this node lets the row run as the account it names: a row refused here is parked
/// with the reason. Judged by the names as written, and for a row naming a group by the
/// accounts looked up (is it one of the user's groups); the look-up and every check come again
/// before each run, where an account missing on this node fails the run, naming the node (it
/// may exist on the others: one node's accounts are not the cluster's).
pub fn account_allowed(row: &JobRow, config: &Config, daemon: &Account) -> Result<(), String> {
    if row.http.is_some() {
        return Ok(());
    }
    let allowed = &config.daemon.allowed;
    // A row that names no account under a root daemon fails each run with the reason, as
    // before; only the allow-list parks.
    let Ok(who) = run_as(row, config, daemon) else {
        return Ok(());
    };
    match who {
        Some((user, None)) => allowed.check_names(&user, None),
        Some((user, Some(group))) => {
            match crate::exec::account::checked(&user, Some(&group), allowed) {
                Err(crate::exec::account::Refused::NotAllowed(m)) => Err(m),
                Ok(_)
                | Err(
                    crate::exec::account::Refused::Lookup(_)
                    | crate::exec::account::Refused::Missing(_),
                ) => Ok(()),
            }
        }
        None => Ok(()),
    }
}

/// Whether a job may have the daemon read the file `path` for it as its `key` (`env_file`,
/// `headers_file`, `ca_file`). A row is untrusted input and the daemon reads with its own rights, so a row
/// written with SQL could otherwise copy another job's secrets into its own command or request.
/// Allowed when the file lies in a directory of `[security] file_dirs`, or when this node's own
/// TOML names the same file as that key for the same job (a backfill row, a chained row and a
/// host-local copy count as their job) and the row's whole definition is that job's (a copy's
/// but for where it runs) (`row`; a row that borrows a TOML job's name with
/// another command or user must not read its secrets), or, when the node's own `[defaults]`
/// webhook is delivered (`node_hook`), in `[defaults]`.
pub fn file_allowed(
    job: &str,
    row: Option<&JobRow>,
    key: &str,
    path: &str,
    config: &Config,
    node_hook: bool,
) -> Result<(), String> {
    let p = std::path::Path::new(path);
    // Never one of the node's own files (its configuration, the database's password...),
    // whoever names it and whatever file_dirs holds: a TOML job needs none of them either.
    if crate::config::security::own_file(config, p) {
        return Err(format!(
            "{key} \"{path}\" is one of this node's own files (its configuration or a secret): \
             never read for a job"
        ));
    }
    // The job a backfill row (`JOB#backfill-SLOT`), a chained row (`JOB#after-RUN`) or a
    // host-local copy (`JOB@NODE`, its template named in the row) runs.
    // (A TOML job may itself be named like one of those: its own name counts too.)
    let unfilled = job.rsplit_once("#backfill-").map_or(job, |(j, _)| j);
    let names = [
        job,
        unfilled,
        crate::model::chains::triggered_job(unfilled).unwrap_or(unfilled),
    ];
    let copy_of = row.and_then(|r| r.template.as_deref());
    let in_toml = config.jobs.iter().any(|spec| {
        let own = names.contains(&spec.name.as_str());
        let as_copy = !own && copy_of == Some(spec.name.as_str());
        let copy_here = as_copy && row.is_some_and(|r| this_nodes_copy(r, spec, config));
        if !own && !copy_here {
            return false;
        }
        let definition = crate::store::apply::definition_of(spec);
        row.is_some_and(|r| match as_copy {
            false => definition.same_as(&r.definition()),
            true => definition.same_but_where(&r.definition()),
        }) && serde_json::from_str(&definition.canonical()).is_ok_and(|v| names_file(&v, key, path))
    });
    // `[defaults]` vouches for its files only when its own hook is delivered: a row's HTTP
    // request, env_file or a hook the row names must not borrow them.
    let in_defaults = node_hook
        && config
            .alert_defaults
            .to_json()
            .and_then(|t| serde_json::from_str(&t).ok())
            .is_some_and(|v| names_file(&v, key, path));
    if in_toml || in_defaults {
        return Ok(());
    }
    let plain = p.is_absolute()
        && p.components()
            .all(|c| !matches!(c, std::path::Component::ParentDir));
    if plain && config.security.file_dirs.iter().any(|d| p.starts_with(d)) {
        // A file the TOML names for one of its jobs or for [defaults] (a webhook's token, a
        // job's env_file) is that job's, even in a file_dirs directory: a row may not borrow
        // it. (Looked for only here: a file outside file_dirs is refused anyway.)
        if let Some(owner) = toml_owner_of(config, p) {
            return Err(format!(
                "{key} \"{path}\" is not a file this node reads for this job: this node's TOML \
                 names it for {owner}, and it is read for that alone (even under [security] \
                 file_dirs)"
            ));
        }
        return Ok(());
    }
    Err(format!(
        "{key} \"{path}\" is not a file this node reads for this job: name it in the job in this \
         node's TOML file, or list its directory in [security] file_dirs (a directory for jobs' \
         files alone)"
    ))
}

/// Whether `row` is this node's copy of the TOML every_node job `spec` (as [`trusted`] judges a
/// copy in signed mode): named `JOB@THIS-NODE`, pinned to this node by its placement alone, and
/// the job's own placement admits this node. A row naming the job as its template but placed
/// or named otherwise would read the job's files on a node the job does not run on.
fn this_nodes_copy(row: &JobRow, spec: &crate::model::job::JobSpec, config: &Config) -> bool {
    use crate::model::placement::Placement;
    let pin = Placement {
        tags: vec![],
        nodes: vec![config.node_name.clone()],
    };
    spec.every_node
        && row.name == super::every_node::copy_name(&spec.name, &config.node_name)
        && row
            .placement
            .as_deref()
            .is_some_and(|p| Placement::from_json(p).is_ok_and(|p| p == pin))
        && spec
            .placement
            .as_ref()
            .is_none_or(|p| p.matches(&config.node_name, &config.node_tags))
}

/// What in this node's TOML names `path` as one of its files (an `env_file`, `headers_file` or
/// `ca_file`): `job "NAME"` or `[defaults]`. The same file however it is reached: the paths
/// compared with their directories' links resolved (a link as the file itself is never followed
/// when read), and the files by device and inode (a hard link, a bind mount, a name differing
/// only in case on a file system that ignores it).
fn toml_owner_of(config: &Config, path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let real = |p: &std::path::Path| match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| p.to_path_buf()),
        _ => p.to_path_buf(),
    };
    let inode = |p: &std::path::Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    let (wanted, wanted_inode) = (real(path), inode(path));
    let names = |v: &serde_json::Value| {
        let mut files = Vec::new();
        file_values(v, &mut files);
        files.iter().any(|f| {
            let f = std::path::Path::new(f);
            real(f) == wanted || (wanted_inode.is_some() && inode(f) == wanted_inode)
        })
    };
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).ok();
    let job = config.jobs.iter().find(|spec| {
        json(&crate::store::apply::definition_of(spec).canonical()).is_some_and(|v| names(&v))
    });
    if let Some(spec) = job {
        return Some(format!("job \"{}\"", spec.name));
    }
    let defaults = config.alert_defaults.to_json().and_then(|t| json(&t));
    defaults
        .is_some_and(|v| names(&v))
        .then(|| "[defaults]".to_string())
}

/// The keys that name a file a job or a hook reads.
const FILE_KEYS: [&str; 3] = ["env_file", "headers_file", "ca_file"];

/// Every string value of a [`FILE_KEYS`] key anywhere in `v` (not inside `env`, whose keys
/// are a job's variables).
fn file_values(v: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| match v.as_str() {
            Some(s) if FILE_KEYS.contains(&k.as_str()) => out.push(s.to_string()),
            _ if k == "env" => {}
            _ => file_values(v, out),
        }),
        Value::Array(a) => a.iter().for_each(|v| file_values(v, out)),
        _ => {}
    }
}

/// Whether `key = path` appears anywhere in `v`.
fn names_file(v: &serde_json::Value, key: &str, path: &str) -> bool {
    use serde_json::Value;
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| (k == key && v.as_str() == Some(path)) || names_file(v, key, path)),
        Value::Array(a) => a.iter().any(|v| names_file(v, key, path)),
        _ => false,
    }
}

/// Everything a run needs that the daemon looked up outside this module: the account the run
/// switches to (`None`: the daemon's own) and the variables of its `env_file`.
pub struct Resolved<'a> {
    pub host: &'a Host,
    pub account: Option<Account>,
    pub file_env: Vec<(String, String)>,
    /// An HTTP job's request, parsed once, and the headers of its `headers_file`.
    pub http: Option<crate::model::http_target::HttpTarget>,
    pub file_headers: Vec<(String, String)>,
    /// An HTTP job's `Idempotency-Key` attempt (see `http_target::RunIdentity`).
    pub key_attempt: u32,
}

/// The process of one run. Its environment is built like cron's: `PATH`, `HOME`, `SHELL`,
/// `LOGNAME` and `USER` of the account it runs as, `LANG` if the daemon has one; then the
/// variables named in `inherit_env` (the daemon's and the job's lists); then the `env_file`;
/// then the job's `env`; then the `SQLCRON_*` variables, which nothing overrides. Nothing else
/// of the daemon's environment: never the database URL, never systemd's handles.
pub(super) fn run_spec(
    row: &JobRow,
    slot: i64,
    attempt: u32,
    node: &str,
    policy: &Policy,
    config: &Config,
    resolved: Resolved<'_>,
) -> Result<RunSpec, String> {
    if let Some(target) = resolved.http {
        let call = crate::model::http_target::HttpCall {
            target,
            file_headers: resolved.file_headers,
            id: crate::model::http_target::RunIdentity {
                job: row.name.clone(),
                slot: crate::model::http_target::slot_text(slot),
                attempt,
                key_attempt: resolved.key_attempt,
                node: node.to_string(),
                token: row.token,
            },
        };
        return Ok(RunSpec {
            job: row.name.clone(),
            program: Program::Http(Box::new(call)),
            env: Vec::new(),
            workdir: None,
            timeout: policy.timeout,
            kill_grace: policy.kill_grace,
            output_tail: config.daemon.output_tail,
            log_lines: config.daemon.output_log_lines,
            log_bytes: config.daemon.output_log_bytes,
            reaper_deadline: None,
            pgid: Default::default(),
            inherit_io: false,
            clear_env: true,
            account: None,
            limits: Limits::default(),
            live: None,
        });
    }
    let program = match (&row.argv, &row.command) {
        (Some(argv), _) => {
            Program::Argv(serde_json::from_str(argv).map_err(|e| format!("argv: {e}"))?)
        }
        (None, Some(c)) => Program::Shell(c.clone()),
        (None, None) => return Err("command: is empty".into()),
    };
    let host = resolved.host;
    let who = resolved.account.as_ref().unwrap_or(&host.account);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("PATH".into(), JOB_PATH_DEFAULT.into());
    env.insert("HOME".into(), who.home.clone());
    env.insert("SHELL".into(), who.shell.clone());
    env.insert("LOGNAME".into(), who.name.clone());
    env.insert("USER".into(), who.name.clone());
    if let Some(lang) = host.env.get("LANG") {
        env.insert("LANG".into(), lang.clone());
    }
    for name in config.daemon.inherit_env.iter().chain(&inherit_list(row)?) {
        if crate::model::job::never_inherited(name) {
            continue;
        }
        if let Some(v) = host.env.get(name) {
            env.insert(name.clone(), v.clone());
        }
    }
    env.extend(resolved.file_env);
    if let Some(e) = &row.env {
        env.extend(
            serde_json::from_str::<BTreeMap<String, String>>(e).map_err(|e| format!("env: {e}"))?,
        );
    }
    let mut env: Vec<(String, String)> = env.into_iter().collect();
    env.push(("SQLCRON_JOB".into(), row.name.clone()));
    env.push(("SQLCRON_SLOT".into(), super::fmt_ms(slot)));
    env.push(("SQLCRON_ATTEMPT".into(), attempt.to_string()));
    env.push(("SQLCRON_NODE".into(), node.to_string()));
    env.push(("SQLCRON_FENCING_TOKEN".into(), row.token.to_string()));
    if let Some(up) = row
        .upstream
        .as_deref()
        .and_then(crate::model::chains::Upstream::from_json)
    {
        env.extend(up.env());
    }
    Ok(RunSpec {
        job: row.name.clone(),
        program,
        env,
        workdir: row.workdir.clone().map(Into::into),
        timeout: policy.timeout,
        kill_grace: policy.kill_grace,
        output_tail: config.daemon.output_tail,
        log_lines: config.daemon.output_log_lines,
        log_bytes: config.daemon.output_log_bytes,
        reaper_deadline: None,
        pgid: Default::default(),
        inherit_io: false,
        clear_env: true,
        account: resolved.account,
        limits: row_limits(row)?,
        live: None,
    })
}
impl super::Shared {
    /// The account a run switches to and its `env_file`, looked up now (users and files change
    /// between runs).
    pub(super) fn resolve_process<'a>(
        &'a self,
        row: &JobRow,
        config: &Config,
    ) -> Result<Resolved<'a>, String> {
        self.resolve_process_of(row, row, config)
    }

    /// [`Self::resolve_process`] for `row`, its files judged as `job`'s: a command hook the job
    /// names runs as the job, with its `env_file`, though its command is the hook's (judged as
    /// the hook's own row, no TOML job's definition matched it, and the hook never ran).
    pub(super) fn resolve_process_of<'a>(
        &'a self,
        row: &JobRow,
        job: &JobRow,
        config: &Config,
    ) -> Result<Resolved<'a>, String> {
        if let Some(target) = row_http(row)? {
            // A row's CA file is read with the daemon's rights, as its headers file is.
            if let Some(path) = &target.ca_file {
                file_allowed(&job.name, Some(job), "ca_file", path, config, false)?;
            }
            // No process: no account to switch to, no environment; the headers of its file.
            let file_headers = match &target.headers_file {
                Some(path) => {
                    file_allowed(&job.name, Some(job), "headers_file", path, config, false)?;
                    crate::exec::headers_file::read(std::path::Path::new(path))?
                }
                None => vec![],
            };
            return Ok(Resolved {
                host: &self.host,
                account: None,
                file_env: vec![],
                http: Some(target),
                file_headers,
                key_attempt: 1,
            });
        }
        let account = match run_as(row, config, &self.host.account)? {
            Some((user, group)) => Some(
                crate::exec::account::checked(&user, group.as_deref(), &config.daemon.allowed)
                    .map_err(|r| match r {
                        crate::exec::account::Refused::Missing(m) => {
                            format!("{m} on node {}", self.node)
                        }
                        r => r.message(),
                    })?,
            ),
            None => None,
        }
        // A job running as the daemon's own identity (root's jobs under a root daemon) switches
        // nothing: no `pre_exec` hook, so it is started with posix_spawn, not a fork.
        .filter(|a| !a.same_identity(&self.host.account));
        let file_env = match &row.env_file {
            Some(path) => {
                file_allowed(&job.name, Some(job), "env_file", path, config, false)?;
                crate::exec::envfile::read(std::path::Path::new(path))?
            }
            None => vec![],
        };
        Ok(Resolved {
            host: &self.host,
            account,
            file_env,
            http: None,
            file_headers: vec![],
            key_attempt: 1,
        })
    }
}
