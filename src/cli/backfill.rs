//! `sqlcron backfill JOB --from T --to T [--max N] [--dry-run]`: run every slot of a job in a
//! range that has no successful run yet, oldest first, each once (see `store/backfill.rs`).

use chrono::{DateTime, SecondsFormat, Utc};

use crate::config::Config;
use crate::daemon;
use crate::store::Store;
use crate::store::backfill::backfill_name;

use super::Failure;
use super::explain::parse_time;

/// The most slots one backfill considers: a wider range is refused (narrow it).
const MAX_SLOTS: usize = 10_000;

pub struct Request<'a> {
    pub job: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub max: Option<usize>,
    pub dry_run: bool,
}

pub async fn run(store: &Store, config: &Config, req: Request<'_>) -> Result<u8, Failure> {
    let Some(row) = store.job(req.job).await.map_err(Failure::runtime)? else {
        return Err(Failure::usage(format!("no job named \"{}\"", req.job)));
    };
    if row.run_on.as_deref() == Some("every_node") {
        return Err(Failure::usage(format!(
            "{}: runs on every node; backfill one node's copy ({}@NODE)",
            req.job, req.job
        )));
    }
    let (schedule, _) = daemon::resolve(&row, &config.defaults)
        .map_err(|e| Failure::runtime(format!("{}: cannot be backfilled: {e}", req.job)))?;
    let from = parse_time(req.from, &schedule)?;
    let to = parse_time(req.to, &schedule)?;
    let now = store.now().await.map_err(Failure::runtime)?;
    if to < from {
        return Err(Failure::usage("--to is before --from"));
    }
    if to > now {
        return Err(Failure::usage(
            "--to is in the future: backfill runs past slots only",
        ));
    }
    let start = DateTime::<Utc>::from_timestamp_millis(from - 1)
        .ok_or_else(|| Failure::usage("--from is out of range"))?;
    let mut slots = vec![];
    for t in schedule.iter_after(start) {
        let ms = t.timestamp_millis();
        if ms > to {
            break;
        }
        if slots.len() == MAX_SLOTS {
            return Err(Failure::usage(format!(
                "more than {MAX_SLOTS} slots in the range: narrow it with --from and --to"
            )));
        }
        slots.push(ms);
    }
    let done = store
        .successful_slots(req.job, from, to)
        .await
        .map_err(Failure::runtime)?;
    let todo: Vec<i64> = slots
        .iter()
        .copied()
        .filter(|s| !done.contains(s))
        .take(req.max.unwrap_or(usize::MAX))
        .collect();
    let fmt = |ms: i64| {
        DateTime::<Utc>::from_timestamp_millis(ms)
            .unwrap_or_default()
            .to_rfc3339_opts(SecondsFormat::Secs, true)
    };
    let actor = crate::exec::account::this_process(None);
    let mut queued = 0;
    let mut already = 0;
    for &slot in &todo {
        if req.dry_run {
            println!(
                "{}  would run as {}",
                fmt(slot),
                backfill_name(req.job, slot)
            );
            continue;
        }
        let created = store
            .add_backfill(
                req.job,
                slot,
                &format!("@at {}", fmt(slot)),
                row.pool.as_deref(),
                &actor,
            )
            .await
            .map_err(Failure::runtime)?;
        if created {
            queued += 1;
            println!("{}  queued as {}", fmt(slot), backfill_name(req.job, slot));
        } else {
            already += 1;
            println!(
                "{}  already queued ({})",
                fmt(slot),
                backfill_name(req.job, slot)
            );
        }
    }
    let verb = if req.dry_run { "would run" } else { "queued" };
    let count = if req.dry_run { todo.len() } else { queued };
    println!(
        "{}: {} slot(s) in the range, {} already ran successfully, {count} {verb}{}",
        req.job,
        slots.len(),
        slots.iter().filter(|s| done.contains(s)).count(),
        if already > 0 {
            format!(", {already} already queued")
        } else {
            String::new()
        }
    );
    Ok(0)
}
