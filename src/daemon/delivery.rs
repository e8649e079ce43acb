//! Delivering alert events, on every node: claim a due event under a lease (`cron_events`), run
//! its hook (a command run like the job, or a webhook `POST`), and write how it ended under the
//! claim's token. Also the pings of `ping_url` (start, success, failure), sent by the node that
//! runs the job.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::Shared;
use super::decode::{resolve, row_alerts, run_spec};
use crate::exec::http::request_error;
use crate::exec::runner::{self, StopRequest};
use crate::model::alerts;
use crate::model::hooks::{AlertSettings, EventKind, Hook};
use crate::store::{Delivered, EventClaim, JobRow};

/// Deliveries one node runs at once.
const MAX_IN_FLIGHT: usize = 4;
/// Bytes of a webhook's reply kept in an event's error.
const REPLY_BYTES: usize = 200;
/// A ping's time limit and tries.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
const PING_TRIES: u32 = 3;

/// The HTTP client of webhooks and pings: rustls with the system's roots, redirects not
/// followed (a hook's URL is where the event goes, nowhere else).
pub(super) fn http_client() -> reqwest::Client {
    crate::exec::http::client_builder(0)
        .build()
        .unwrap_or_default()
}

/// Delivers the events that are due, on every node. The loop has no idle looks of its own: it
/// looks when woken through `Shared::events` (the peek saw an event due, this node's alert scan
/// recorded one, or the node is stopping), and then once per poll interval while it finds some.
pub(super) async fn delivery_loop(shared: Arc<Shared>) {
    let mut in_flight = JoinSet::new();
    let mut busy = true;
    loop {
        let poll = shared.config().daemon.poll_interval;
        if busy {
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = shared.events.notified() => {}
            }
        } else {
            shared.events.notified().await;
        }
        while in_flight.try_join_next().is_some() {}
        if shared.stopping.load(Ordering::SeqCst) {
            // Deliveries under way end within their timeout; none is started any more.
            while in_flight.join_next().await.is_some() {}
            return;
        }
        let free = MAX_IN_FLIGHT.saturating_sub(in_flight.len());
        busy = !in_flight.is_empty();
        if free == 0 {
            continue;
        }
        let due = match shared.store.events_due(free as i64).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "could not look for alert events to deliver");
                shared.metrics.database_error(e.kind());
                busy = true;
                continue;
            }
        };
        busy |= !due.is_empty();
        let config = shared.config();
        // The claim outlives the delivery's own limit by a lease: a node that dies or stalls
        // while sending leaves the event to another node after that.
        let lease_ms = (config.delivery.timeout + config.daemon.lease).as_millis() as i64;
        for id in due {
            match shared.store.event_claim(id, &shared.node, lease_ms).await {
                Ok(Some(claim)) => {
                    in_flight.spawn(deliver(shared.clone(), claim));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, event = id, "could not claim an alert event");
                    shared.metrics.database_error(e.kind());
                }
            }
        }
    }
}

/// Why a delivery failed, and whether trying again can help.
struct Failure {
    error: String,
    retry: bool,
}

async fn deliver(shared: Arc<Shared>, claim: EventClaim) {
    let config = shared.config();
    let give_up_at = claim.created + config.delivery.give_up_after.as_millis() as i64;
    let result = if claim.now >= give_up_at {
        Err(Failure {
            error: format!(
                "not delivered within [alerts] give_up_after ({})",
                crate::model::duration::format_duration(config.delivery.give_up_after)
            ),
            retry: false,
        })
    } else {
        match hook_trusted(&shared, &claim, &config).await {
            Err(f) => Err(f),
            Ok(checked) => deliver_checked(&shared, &claim, &config, checked).await,
        }
    };
    record_delivery(&shared, &claim, &config, result).await;
}

/// Delivers the hook `hook_trusted` accepted, from the row it read: the row is read once, so
/// what runs is what was checked.
async fn deliver_checked(
    shared: &Shared,
    claim: &EventClaim,
    config: &crate::config::Config,
    checked: Checked,
) -> Result<(), Failure> {
    match Hook::decode(&claim.hook) {
        Err(e) => Err(Failure {
            error: format!("hook: {e}"),
            retry: false,
        }),
        Ok(Hook::Command(command)) => run_hook_command(shared, claim, &command, checked).await,
        Ok(Hook::Webhook {
            url,
            headers,
            headers_file,
        }) => match webhook_file_headers(
            &claim.job,
            checked.row.as_ref(),
            !checked.row_names_it,
            headers_file.as_deref(),
            config,
        ) {
            Ok(file_headers) => {
                let all: Vec<(&str, &str)> = headers
                    .iter()
                    .chain(file_headers.iter().map(|(k, v)| (k, v)))
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                post(&shared.http, claim, &url, &all, config.delivery.timeout).await
            }
            Err(error) => Err(Failure {
                error,
                retry: false,
            }),
        },
    }
}

/// Writes how a delivery ended, under the event's claim.
async fn record_delivery(
    shared: &Shared,
    claim: &EventClaim,
    config: &crate::config::Config,
    result: Result<(), Failure>,
) {
    let give_up_at = claim.created + config.delivery.give_up_after.as_millis() as i64;
    let how = match result {
        Ok(()) => Delivered::Sent,
        Err(f) => {
            let after = alerts::delivery_backoff(claim.tries).as_millis() as i64;
            if f.retry && claim.now + after < give_up_at {
                Delivered::Retry {
                    error: f.error,
                    after_ms: after,
                }
            } else {
                Delivered::GaveUp { error: f.error }
            }
        }
    };
    let (result, level_error) = match &how {
        Delivered::Sent => ("sent", None),
        Delivered::Retry { error, .. } => ("retry", Some(error.clone())),
        Delivered::GaveUp { error } => ("failed", Some(error.clone())),
    };
    shared.metrics.delivery(&claim.kind, result);
    match &level_error {
        None => {
            tracing::info!(job = %claim.job, event = %claim.kind, id = claim.id, tries = claim.tries, "alert delivered")
        }
        Some(e) if result == "retry" => {
            tracing::warn!(job = %claim.job, event = %claim.kind, id = claim.id, tries = claim.tries, error = %e, "alert delivery failed; will retry")
        }
        Some(e) => {
            tracing::error!(job = %claim.job, event = %claim.kind, id = claim.id, tries = claim.tries, error = %e, "alert delivery given up")
        }
    }
    // The end is written under the claim; a database error is retried while the claim's lease
    // lasts (after it, another node has the event and delivers it again).
    let deadline = tokio::time::Instant::now() + config.daemon.lease;
    loop {
        match shared.store.event_finish(claim, &how).await {
            Ok(true) => return,
            Ok(false) => {
                tracing::warn!(job = %claim.job, event = %claim.kind, id = claim.id, "alert claim lost before its delivery was recorded; another node delivers it again");
                return;
            }
            Err(e) => {
                shared.metrics.database_error(e.kind());
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(job = %claim.job, id = claim.id, error = %e, "could not record an alert delivery; another node delivers it again");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// A payload field as text, for a variable.
fn field(payload: &Value, key: &str) -> String {
    match &payload[key] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// An event is delivered only to the hook its job's definition (or the node's `[defaults]`)
/// names for it today: an event row written with SQL is data, and cannot name a command or an
/// address of its own. With `[security] sql_jobs = "signed"`, a hook the job itself names runs
/// only while the job's row is trusted (signed, or this node's TOML job).
/// What `hook_trusted` read and judged: the job's row at delivery, and whether the job itself
/// names the hook (then it runs as the job) or the node's `[defaults]` do.
struct Checked {
    row: Option<JobRow>,
    row_names_it: bool,
}

async fn hook_trusted(
    shared: &Shared,
    claim: &EventClaim,
    config: &crate::config::Config,
) -> Result<Checked, Failure> {
    use crate::config::security::SqlJobs;
    let signed = config.security.sql_jobs == SqlJobs::Signed;
    let refuse = |why: &str| Failure {
        error: format!("hook: refused in signed mode: {why}"),
        retry: false,
    };
    let retry = |e: crate::store::StoreError| Failure {
        error: e.to_string(),
        retry: true,
    };
    let kind = EventKind::parse(&claim.kind).ok_or_else(|| refuse("not an event kind"))?;
    let row = shared.store.job(&claim.job).await.map_err(retry)?;
    let own = match &row {
        Some(r) => row_alerts(r).map_err(|e| refuse(&e))?,
        None => AlertSettings::default(),
    };
    let expected = own.resolve(&config.alert_defaults);
    if expected.hook(kind).map(Hook::encode).as_deref() != Some(claim.hook.as_str()) {
        return Err(Failure {
            error: "hook: refused: not the hook the job's definition or this node's [defaults] name for this event".into(),
            retry: false,
        });
    }
    // A hook the job itself names is as trusted as the job.
    let row_names_it = row.is_some() && own.resolve(&AlertSettings::default()).hook(kind).is_some();
    if let Some(r) = row.as_ref().filter(|_| signed && row_names_it) {
        let template = match &r.template {
            Some(t) => shared.store.job(t).await.map_err(retry)?,
            None => None,
        };
        super::decode::trusted(r, config, template.as_ref()).map_err(|e| refuse(&e))?;
    }
    Ok(Checked { row, row_names_it })
}

/// The row a hook of the node's own `[defaults]` runs as: the command alone, as a job of the
/// node's TOML that names nothing else would run. The job's name is kept only for
/// `SQLCRON_JOB`; nothing is looked up by it (no `env_file`, no account, no limits).
fn node_hook_row(row: &JobRow, command: &str) -> JobRow {
    JobRow {
        command: Some(command.to_string()),
        argv: None,
        http: None,
        env: None,
        env_file: None,
        inherit_env: None,
        workdir: None,
        run_user: None,
        run_group: None,
        limits: None,
        alerts: None,
        placement: None,
        run_on: None,
        template: None,
        signature: None,
        after: None,
        upstream: None,
        policy: Default::default(),
        ..row.clone()
    }
}

/// Runs a command hook, with the event's facts as `SQLCRON_*` variables and the output tail in
/// a file: as the job (its user, environment, working directory and limits) when the job names
/// the hook, in the node's own context when the node's `[defaults]` do.
async fn run_hook_command(
    shared: &Shared,
    claim: &EventClaim,
    command: &str,
    checked: Checked,
) -> Result<(), Failure> {
    let config = shared.config();
    let permanent = |error: String| Failure {
        error,
        retry: false,
    };
    let Some(row) = checked.row else {
        return Err(permanent(
            "the job no longer exists: a command hook runs as the job, with its environment".into(),
        ));
    };
    // Whose hook it is decides whose context it runs in: a hook only the node's own TOML
    // (`[defaults]`) names runs as a job of that TOML would with nothing of its own (the
    // node's `default_user`, its environment, policy and limits), never with the row's user,
    // group, env, env_file, workdir or limits, which an editor of the row could have set to
    // take over the node's script (`BASH_ENV`, a borrowed name's env_file). A hook the row
    // itself names runs as the row `hook_trusted` read and checked (in signed mode).
    let (hook_row, policy) = if checked.row_names_it {
        let policy = resolve(&row, &config.defaults)
            .map(|(_, p)| p)
            .unwrap_or_else(|_| config.defaults.clone());
        let mut hook_row = row.clone();
        hook_row.command = Some(command.to_string());
        hook_row.argv = None;
        hook_row.http = None;
        (hook_row, policy)
    } else {
        (node_hook_row(&row, command), config.defaults.clone())
    };
    let payload: Value = serde_json::from_str(&claim.payload).unwrap_or(Value::Null);
    let mut spec = shared
        .resolve_process_of(&hook_row, &row, &config)
        .and_then(|resolved| run_spec(&hook_row, 0, 0, &shared.node, &policy, &config, resolved))
        .map_err(permanent)?;
    spec.timeout = config.delivery.timeout;
    // The output tail goes in a file of its own, in a directory of its own with a name no
    // other user can guess (or pre-create), readable by the hook's account only.
    let (dir, output) = private_output(
        claim.id,
        field(&payload, "output").as_bytes(),
        spec.account.as_ref(),
    )
    .map_err(|e| Failure {
        error: format!("cannot write the hook's output file: {e}"),
        retry: true,
    })?;
    spec.env.retain(|(k, _)| !k.starts_with("SQLCRON_"));
    for (k, v) in [
        ("SQLCRON_JOB", claim.job.clone()),
        ("SQLCRON_EVENT", claim.kind.clone()),
        ("SQLCRON_EVENT_ID", claim.id.to_string()),
        ("SQLCRON_SLOT", field(&payload, "slot")),
        ("SQLCRON_ATTEMPT", field(&payload, "attempt")),
        ("SQLCRON_NODE", field(&payload, "node")),
        ("SQLCRON_OUTCOME", field(&payload, "outcome")),
        ("SQLCRON_EXIT_CODE", field(&payload, "exit_code")),
        ("SQLCRON_MESSAGE", field(&payload, "message")),
        ("SQLCRON_TEXT", field(&payload, "text")),
        ("SQLCRON_OUTPUT", output.display().to_string()),
        ("SQLCRON_HOOK_NODE", shared.node.clone()),
    ] {
        spec.env.push((k.to_string(), v));
    }
    spec.job = format!("{} ({} hook)", claim.job, claim.kind);
    let (_stop, stop) = watch::channel(StopRequest::None);
    let result = runner::run(&spec, stop).await;
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(out) if out.success() => Ok(()),
        Ok(out) => {
            let how = if out.timed_out {
                format!(
                    "timed out after {}",
                    crate::model::duration::format_duration(spec.timeout)
                )
            } else if let Some(c) = out.exit_code {
                format!("exit {c}")
            } else {
                format!("signal {}", out.signal.unwrap_or(0))
            };
            let tail = out
                .output
                .char_indices()
                .rev()
                .nth(REPLY_BYTES)
                .map_or(out.output.as_str(), |(i, _)| &out.output[i..]);
            Err(Failure {
                error: format!("hook command: {how}: {}", tail.trim()),
                retry: true,
            })
        }
        Err(e) => Err(Failure {
            error: e.to_string(),
            retry: true,
        }),
    }
}

/// Writes `data` to `output` in a new directory of the temporary directory, named with the
/// event's id and 64 random bits, mode 0700 (and 0600 for the file), owned by `account` when the
/// hook switches to it. Returns the directory (removed after the hook) and the file.
fn private_output(
    event: i64,
    data: &[u8],
    account: Option<&crate::exec::account::Account>,
) -> std::io::Result<(std::path::PathBuf, std::path::PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let base = std::env::temp_dir();
    let mut tries = 0;
    let dir = loop {
        let dir = base.join(format!(
            "sqlcron-event-{event}-{:016x}",
            rand::random::<u64>()
        ));
        // `create` fails on a name that exists, whoever made it: never reuse one.
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let output = dir.join("output");
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&output)?;
        f.write_all(data)?;
        if let Some(a) = account {
            std::os::unix::fs::chown(&output, Some(a.uid), Some(a.gid))?;
            std::os::unix::fs::chown(&dir, Some(a.uid), Some(a.gid))?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok((dir, output)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// The headers of a webhook's `headers_file`, if it names one this node reads for the job.
fn webhook_file_headers(
    job: &str,
    row: Option<&JobRow>,
    node_hook: bool,
    file: Option<&str>,
    config: &crate::config::Config,
) -> Result<Vec<(String, String)>, String> {
    let Some(path) = file else {
        return Ok(vec![]);
    };
    super::decode::file_allowed(job, row, "headers_file", path, config, node_hook)
        .and_then(|()| crate::exec::headers_file::read(std::path::Path::new(path)))
        .map_err(|e| format!("webhook: {e}"))
}

/// A webhook: `POST` of the event's JSON body (with its `event_id`), the event's id as the
/// idempotency key. Any 2xx is delivered.
async fn post(
    client: &reqwest::Client,
    claim: &EventClaim,
    url: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<(), Failure> {
    let mut body: Value = serde_json::from_str(&claim.payload).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut body {
        m.insert("event_id".into(), claim.id.into());
    }
    let mut req = client
        .post(url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("Idempotency-Key", format!("sqlcron-event-{}", claim.id))
        .header("X-Sqlcron-Event", claim.kind.clone())
        .header("X-Sqlcron-Node", claim.node.clone());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let failure = |error: String| Failure { error, retry: true };
    let resp = req
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| failure(format!("webhook: {}", request_error(e))))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    // The reply is read up to what the message keeps: a receiver answering with an endless
    // body costs nothing more.
    let mut resp = resp;
    let (reply, _) = crate::exec::http::read_bounded(&mut resp, REPLY_BYTES * 4).await;
    let text: String = String::from_utf8_lossy(&reply)
        .chars()
        .take(REPLY_BYTES)
        .collect();
    Err(failure(format!("webhook: HTTP {status}: {}", text.trim())))
}

/// What a ping reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ping {
    Start,
    Success,
    Failure,
}

impl Shared {
    /// Sends the job's `ping_url` ping in the background (Healthchecks convention: `URL/start`,
    /// `URL`, `URL/fail`), a few tries; never delays or fails the run.
    pub(super) fn ping(&self, row: &JobRow, what: Ping) {
        // On every run start and end: only the ping URL is looked up, nothing is cloned
        // unless there is one.
        let Ok(settings) = row_alerts(row) else {
            return;
        };
        let Some(base) = settings
            .ping_url
            .or_else(|| self.config().alert_defaults.ping_url.clone())
        else {
            return;
        };
        let url = match what {
            Ping::Start => format!("{base}/start"),
            Ping::Success => base,
            Ping::Failure => format!("{base}/fail"),
        };
        let client = self.http.clone();
        let job = row.name.clone();
        tokio::spawn(async move {
            for attempt in 1..=PING_TRIES {
                match client.get(&url).timeout(PING_TIMEOUT).send().await {
                    Ok(r) if r.status().is_success() => return,
                    Ok(r) => {
                        tracing::warn!(job = %job, status = %r.status(), attempt, "ping refused")
                    }
                    Err(e) => {
                        tracing::warn!(job = %job, error = %request_error(e), attempt, "ping failed")
                    }
                }
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
            }
        });
    }
}
