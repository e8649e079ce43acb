//! `sqlcron lock`, `sqlcron sem`, `sqlcron locks` and `sqlcron unlock`: a command under a
//! cluster-wide lease (`daemon/guard.rs`) and the operator's view of those leases.

use super::*;

pub(super) async fn guarded(
    config: &Config,
    name: String,
    size: u32,
    lease: &str,
    wait: Option<&str>,
    command: &[String],
) -> Result<u8, Failure> {
    let lease = crate::model::duration::parse_duration(lease)
        .map_err(|m| Failure::usage(format!("--lease: {m}")))?;
    if lease < Duration::from_secs(1) {
        return Err(Failure::usage("--lease: must be at least 1s"));
    }
    // Any node takes a lease ending further off than the longest as set by no holder (a
    // writer's): the hold would be lost to the next request.
    let max = crate::model::lease::LEASE_MAX;
    let lease = if lease > max {
        eprintln!(
            "warning: --lease {} is longer than the longest lease, {}: {} is used",
            humantime::format_duration(lease),
            humantime::format_duration(max),
            humantime::format_duration(max)
        );
        max
    } else {
        lease
    };
    let wait = wait
        .map(crate::model::duration::parse_duration)
        .transpose()
        .map_err(|m| Failure::usage(format!("--wait: {m}")))?;
    if size == 0 {
        return Err(Failure::usage("--size: must be at least 1"));
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let store = connect(config).await?;
    store.migrate().await.map_err(Failure::runtime)?;
    // The command runs in its own process group under the reaper, as a job does: a SIGKILL or a
    // freeze of this holder must not leave its pipeline running once the lock could pass on.
    if let Err(e) = crate::exec::reaper::start() {
        tracing::warn!(error = %e, "could not start the reaper: the command will not be stopped if this process is killed");
    }
    let host = crate::exec::account::hostname().unwrap_or_default();
    let params = crate::daemon::guard::GuardParams {
        name,
        size,
        lease,
        wait,
        owner: config.node_name.clone(),
        host,
        pid: std::process::id(),
    };
    let code = crate::daemon::guard::run_guarded(&store, &params, command)
        .await
        .map_err(Failure::runtime)?;
    store.close().await;
    Ok(code.clamp(0, 255) as u8)
}

pub(super) async fn locks(store: &Store, json: bool) -> Result<u8, Failure> {
    let rows = store.locks().await.map_err(Failure::runtime)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    println!(
        "{:<20} {:<28} {:<16} {:<16} {:>8} {:<21} UNTIL",
        "LOCK", "STATE", "NODE", "HOST", "PID", "SINCE"
    );
    for r in rows {
        println!(
            "{:<20} {:<28} {:<16} {:<16} {:>8} {:<21} {}",
            r.name,
            r.state,
            r.owner.unwrap_or_default(),
            r.host.unwrap_or_default(),
            r.pid.map(|p| p.to_string()).unwrap_or_default(),
            fmt_ms(r.since),
            fmt_ms(r.until)
        );
    }
    Ok(0)
}

pub(super) async fn unlock(store: &Store, name: &str, token: Option<i64>) -> Result<u8, Failure> {
    let broken = store
        .lock_break(name, token, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?;
    if broken.is_empty() {
        let which = token
            .map(|t| format!(" with token {t}"))
            .unwrap_or_default();
        return Err(Failure::runtime(format!(
            "lock \"{name}\" has no live hold{which}"
        )));
    }
    for b in broken {
        println!(
            "{name}: broke token {} held by {} on {} (pid {}); its holder stops its command at its next extension, and the place is free by {}",
            b.token.unwrap_or_default(),
            b.owner.unwrap_or_default(),
            b.host.unwrap_or_default(),
            b.pid.map(|p| p.to_string()).unwrap_or_default(),
            fmt_ms(b.until)
        );
    }
    Ok(0)
}
