//! `sqlcron events [JOB]`: alert events and how their delivery went (see `docs/alerts.md`).

use crate::daemon;
use crate::store::Store;

use super::Failure;
use super::terminal::shown;

pub async fn run(store: &Store, job: Option<&str>, limit: i64, json: bool) -> Result<u8, Failure> {
    let rows = store
        .events(job, limit.clamp(1, 100_000))
        .await
        .map_err(Failure::runtime)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    println!(
        "{:>8} {:<21} {:<24} {:<11} {:<9} {:>5} {:<16} DETAIL",
        "ID", "CREATED", "JOB", "EVENT", "STATE", "TRIES", "NODE"
    );
    for r in rows {
        let detail = match (&r.error, r.sent) {
            _ if r.detail.is_some() => r.detail.clone().unwrap_or_default(),
            (Some(e), _) => e.clone(),
            (None, Some(t)) => format!("delivered {}", daemon::fmt_ms(t)),
            (None, None) => String::new(),
        };
        println!(
            "{:>8} {:<21} {:<24} {:<11} {:<9} {:>5} {:<16} {}",
            r.id,
            daemon::fmt_ms(r.created),
            shown(&r.job),
            shown(&r.kind),
            shown(&r.state),
            r.tries,
            shown(&r.node.unwrap_or_default()),
            shown(&detail)
        );
    }
    Ok(0)
}
