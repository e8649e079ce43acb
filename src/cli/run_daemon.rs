//! `sqlcron daemon`: logging (journald or stderr), the daemon itself, and signals turned into
//! control messages.

use super::*;

/// Logs natively to journald under systemd (`$JOURNAL_STREAM`) or with `[log] target =
/// "journald"`, with fields `SQLCRON_JOB=`, `SQLCRON_SLOT=`, `SQLCRON_NODE=`, `SQLCRON_OUTCOME=`
/// and the priority mapped from the level; otherwise human-readable lines on stderr.
pub(super) fn init_logging(config: &Config) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let journald = match config.log.target.as_str() {
        "journald" => true,
        "stderr" => false,
        _ => std::env::var_os("JOURNAL_STREAM").is_some(),
    };
    if journald {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer
                    .with_field_prefix(Some("SQLCRON".into()))
                    .with_syslog_identifier("sqlcron".into())
                    .with_custom_fields([("SQLCRON_NODE", config.node_name.as_bytes())]);
                let _ = tracing_subscriber::registry()
                    .with(filter)
                    .with(layer)
                    .try_init();
                return;
            }
            Err(e) => eprintln!("sqlcron: journald is not reachable ({e}); logging to stderr"),
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

pub(super) async fn run_daemon(
    config: Config,
    path: PathBuf,
    explicit: bool,
    env: Environment,
) -> Result<u8, Failure> {
    init_logging(&config);
    // Under systemd too: the unit's control group ends a dead daemon's jobs, but only the reaper
    // ends those of a daemon that is stopped (SIGSTOP, a stalled thread) once their lease
    // could have passed to another node.
    match crate::exec::reaper::start() {
        Ok(pid) => tracing::debug!(pid, "job reaper started"),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the job reaper: jobs will not be stopped if this daemon is killed or frozen")
        }
    }
    // Processes a run leaves behind (`setsid`, a double fork) are handed to the daemon and ended
    // with their run (exec/orphans.rs).
    match crate::exec::orphans::become_subreaper() {
        Ok(()) => {
            tokio::spawn(async {
                let mut every = tokio::time::interval(Duration::from_secs(1));
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let _ = tokio::task::spawn_blocking(crate::exec::orphans::sweep).await;
                }
            });
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot become the subreaper of the jobs: processes that leave a run's process group outlive it")
        }
    }
    let store = connect_with(
        &config,
        config.database_pool_size,
        Some(crate::model::lease::statement_timeout(config.daemon.lease)),
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    tracing::info!(node = %config.node_name, database = %config.database_url, jobs = config.jobs.len(), "starting");
    if let Some(warning) = crate::config::long_lease_warning(&config) {
        tracing::warn!("{warning}");
    }
    // The generations of signatures this node has run, kept across restarts (signed mode).
    // A signed-mode node that cannot read them does not start: it would run an old version
    // written back while it was down.
    if let Err(m) = crate::daemon::generations::load(crate::daemon::generations::file_for(
        env.state_directory
            .as_deref()
            .unwrap_or(crate::config::STATE_DIR_DEFAULT),
        &config.database_url.to_string(),
        &config.node_name,
    )) {
        if config.security.sql_jobs == crate::config::security::SqlJobs::Signed {
            return Err(Failure::usage(m));
        }
        tracing::warn!("{m} (open mode: not used)");
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    spawn_signal_thread(tx.clone(), path, explicit, env).map_err(Failure::runtime)?;

    // Migrate and apply, retrying while the database is unreachable: a node must be able to start
    // before its database does.
    let mut delay = Duration::from_millis(500);
    let metrics_listen = config.metrics_listen;
    let metrics_token = config.metrics_token.clone();
    // The dashboard and /metrics run on threads of their own, never on the run path's
    // (service/runtime.rs): no page or scrape can delay a claim, a start or a release.
    let listeners = crate::service::runtime::ServiceRuntime::start()
        .map_err(|e| Failure::runtime(format!("cannot start the dashboard's threads: {e}")))?;
    if config.web.listen.is_some() {
        let web_config = config.clone();
        listeners.spawn(async move {
            if let Some(server) = crate::service::web::start(&web_config).await {
                let _ = server.await;
            }
        });
    }
    let url = config.database_url.clone();
    let (node, host) = (
        config.node_name.clone(),
        crate::exec::account::hostname().unwrap_or_default(),
    );
    let daemon = Daemon::new(store.clone(), config)
        .with_service_manager(std::sync::Arc::new(crate::service::systemd::Systemd));
    loop {
        let attempt = async {
            store.migrate().await?;
            // One daemon per node name: a live holder of this name is another node.
            if let Some(holder) =
                crate::daemon::node_name::held_elsewhere(&store, &node, &host).await?
            {
                return Ok(Some(holder));
            }
            daemon.apply_config().await.map(|()| None)
        };
        // A stop signal ends the wait: a node that never got its database still obeys SIGTERM.
        let outcome = tokio::select! {
            r = attempt => Some(r),
            msg = rx.recv() => match msg {
                Some(Control::Stop | Control::StopNow) | None => None,
                Some(Control::Reload(_)) => {
                    tracing::warn!("reload ignored: the database is not ready yet");
                    continue;
                }
                Some(Control::Drain(_)) => {
                    tracing::warn!("drain signal ignored: the database is not ready yet; use sqlcron drain");
                    continue;
                }
            },
        };
        match outcome {
            Some(Ok(None)) => break,
            Some(Ok(Some(holder))) => {
                tracing::error!(node = %node, holder = %holder, "node name in use: not started");
                crate::exec::reaper::stop();
                return Err(Failure::runtime(format!(
                    "node name \"{node}\" is held by a live daemon on {holder}: two daemons with one \
                     name would claim as one node; stop that one, or give this one another [node] name"
                )));
            }
            Some(Err(e @ crate::store::StoreError::SchemaTooNew { .. })) => {
                // Waiting would not help: only a newer sqlcron can use this schema. Exit status 3
                // is in the unit's RestartPreventExitStatus: no restart every few seconds.
                tracing::error!(error = %e, "schema newer than this sqlcron can use: not started");
                crate::exec::reaper::stop();
                return Err(Failure {
                    code: SCHEMA_TOO_NEW,
                    message: e.to_string(),
                });
            }
            Some(Err(e)) => {
                match super::database_file::unopenable(&url) {
                    // The cause SQLite's own message leaves out: who owns what it cannot open.
                    Some(p) => tracing::error!(
                        error = %e,
                        kind = e.kind(),
                        cause = %p.message,
                        fix = %p.fix,
                        "database not ready; retrying: {}",
                        p.message
                    ),
                    None => {
                        // The pool says only that it timed out: ask the server why.
                        let cause = match e.is_pool_timeout() {
                            true => store.connect_error().await,
                            false => None,
                        };
                        match cause {
                            Some(cause) => tracing::error!(
                                error = %e,
                                kind = e.kind(),
                                cause = %cause,
                                "database not ready; retrying: {cause}"
                            ),
                            None => tracing::error!(
                                error = %e,
                                kind = e.kind(),
                                "database not ready; retrying"
                            ),
                        }
                    }
                }
                let stop = tokio::select! {
                    _ = tokio::time::sleep(delay) => false,
                    msg = rx.recv() => matches!(msg, Some(Control::Stop | Control::StopNow) | None),
                };
                if stop {
                    tracing::info!("stopped before the database was ready");
                    crate::exec::reaper::stop();
                    return Ok(0);
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
            None => {
                tracing::info!("stopped before the database was ready");
                crate::exec::reaper::stop();
                return Ok(0);
            }
        }
    }
    if let Some(addr) = metrics_listen {
        let metrics = daemon.metrics();
        listeners.spawn(async move {
            if let Some(server) = crate::service::metrics::start(addr, metrics, metrics_token).await
            {
                let _ = server.await;
            }
        });
    }
    crate::service::systemd::ready();
    tracing::info!("ready");
    daemon.run(rx).await;
    crate::exec::reaper::stop();
    listeners.shutdown();
    close_pool(&store).await;
    Ok(0)
}

/// How long an exiting daemon waits for its database connections to close.
const POOL_CLOSE: Duration = Duration::from_secs(5);

/// Closes the daemon's pool, for at most [`POOL_CLOSE`]: every run is released by then, and a
/// stop must end. The pool's close waits until every connection it lent out is back; once, after
/// a chaos soak's database restart, stalls and resets, one never came back (every connection idle
/// on the server, none in a transaction) and a stopped daemon hung for good after logging
/// "stopped" (docs/daemon.md, "Shutdown").
async fn close_pool(store: &crate::store::Store) {
    if tokio::time::timeout(POOL_CLOSE, store.close())
        .await
        .is_err()
    {
        tracing::warn!(
            "the database connections did not close within {}s; exiting without waiting for them",
            POOL_CLOSE.as_secs()
        );
    }
}

/// signal-hook delivers signals on a plain thread; they become [`Control`] messages.
pub(super) fn spawn_signal_thread(
    tx: mpsc::UnboundedSender<Control>,
    path: PathBuf,
    explicit: bool,
    env: Environment,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut stops = 0;
            for signal in signals.forever() {
                match signal {
                    SIGHUP => match config::load(&path, explicit, &env) {
                        Ok(config) => {
                            tracing::info!(path = %path.display(), "SIGHUP: reloading configuration");
                            let _ = tx.send(Control::Reload(Box::new(config)));
                        }
                        Err(e) => {
                            tracing::error!("SIGHUP: configuration not reloaded, keeping the running one: {e}");
                        }
                    },
                    SIGUSR2 | SIGUSR1 => {
                        if tx.send(Control::Drain(signal == SIGUSR2)).is_err() {
                            break;
                        }
                    }
                    _ => {
                        stops += 1;
                        crate::service::systemd::stopping();
                        let msg = if stops == 1 { Control::Stop } else { Control::StopNow };
                        if tx.send(msg).is_err() {
                            break;
                        }
                    }
                }
            }
        })?;
    Ok(())
}

/// Keeps the daemon's secrets from jobs that run as the daemon's own user (a daemon not running
/// as root runs every job as itself): the process is made non-dumpable, so that such a job can
/// neither read `/proc/<daemon>/environ` or `/proc/<daemon>/mem` nor attach a debugger, and the
/// database URL leaves the environment once read (`Environment` holds it for reloads). Called
/// before any thread starts. What a same-user job can still reach is in docs/security.md.
pub(super) fn harden_process() {
    // SAFETY: prctl with PR_SET_DUMPABLE takes plain integers and has no other effect.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        eprintln!(
            "sqlcron: warning: cannot make the daemon non-dumpable: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: no other thread runs yet: the runtime and the signal thread start after this.
    unsafe {
        std::env::remove_var("SQLCRON_DATABASE_URL");
    }
    crate::daemon::heap::limit_arenas();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection lent out and never given back (as happened once in a soak) does not hold a
    /// stopping daemon: its pool's close gives up after [`POOL_CLOSE`].
    #[tokio::test]
    async fn an_exit_does_not_wait_for_a_connection_that_never_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let url =
            crate::store::DatabaseUrl::parse(&format!("sqlite://{}/exit.db", dir.path().display()))
                .unwrap();
        let store = crate::store::Store::connect(&url, 2).unwrap();
        store.migrate().await.unwrap();
        let kept = store.lend_connection().await;
        tokio::time::timeout(POOL_CLOSE * 3, close_pool(&store))
            .await
            .expect("the exit waited for a connection that never came back");
        drop(kept);
    }
}
