//! `sqlcron history` and `sqlcron audit`: runs and changes, as a table or JSON.

use super::terminal::shown;
use super::*;

pub(super) async fn history(
    store: &Store,
    job: Option<&str>,
    limit: i64,
    json: bool,
) -> Result<u8, Failure> {
    let rows = store
        .history(job, limit.clamp(1, 100_000))
        .await
        .map_err(Failure::runtime)?;
    // A name with no run is a typo unless such a job exists (a job removed keeps its history).
    if let Some(job) = job
        && rows.is_empty()
        && store.job(job).await.map_err(Failure::runtime)?.is_none()
    {
        return Err(super::no_such_job(store, job).await);
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    // RUN is what `sqlcron logs JOB RUN` takes. Columns as wide as their widest value.
    let mut cells = Vec::with_capacity(rows.len());
    for r in rows {
        let detail = match Outcome::parse(&r.outcome) {
            Ok(Outcome::Skipped) => format!(
                "{} slot(s) up to {}",
                r.skipped_count.unwrap_or(0),
                fmt_ms(r.skipped_last)
            ),
            _ => match (r.exit_code, r.signal) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(s)) => match &r.message {
                    Some(m) => format!("signal {s}: {m}"),
                    None => format!("signal {s}"),
                },
                _ => r.message.clone().unwrap_or_default(),
            },
        };
        cells.push(vec![
            r.id.to_string(),
            shown(&r.job).into_owned(),
            daemon::fmt_ms(r.slot),
            r.attempt.to_string(),
            shown(&r.outcome).into_owned(),
            shown(&r.node.unwrap_or_default()).into_owned(),
            fmt_ms(r.ended),
            shown(&detail).into_owned(),
        ]);
    }
    print!(
        "{}",
        super::terminal::table(
            &[
                "RUN", "JOB", "SLOT", "TRY", "OUTCOME", "NODE", "ENDED", "DETAIL"
            ],
            &cells
        )
    );
    Ok(0)
}

pub(super) async fn audit(
    store: &Store,
    job: Option<&str>,
    limit: i64,
    json: bool,
) -> Result<u8, Failure> {
    let rows = store
        .audit_log(job, limit.clamp(1, 100_000))
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
        "{:<21} {:<13} {:<24} {:<32} {:<28} DETAIL",
        "WHEN", "ACTION", "JOB", "WHO", "DATABASE USER"
    );
    for r in rows {
        let who = match (&r.host, r.pid) {
            (Some(h), Some(p)) => format!("{} @{h} pid {p}", r.who),
            (Some(h), None) => format!("{} @{h}", r.who),
            _ => r.who.clone(),
        };
        println!(
            "{:<21} {:<13} {:<24} {:<32} {:<28} {}",
            daemon::fmt_ms(r.at),
            shown(&r.action),
            shown(&r.job.unwrap_or_default()),
            shown(&who),
            shown(r.db_user.as_deref().unwrap_or("-")),
            shown(&r.detail.unwrap_or_default())
        );
    }
    Ok(0)
}
