//! `sqlcron explain JOB`: one line per slot of the job in a range (see [`crate::model::explain`]).

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone};
use serde::Serialize;

use crate::config::Config;
use crate::daemon;
use crate::model::explain::{Range, RowState, SlotExplained, explain};
use crate::model::placement::{NodeOffer, unplaceable};
use crate::schedule::Schedule;
use crate::store::Store;

use super::Failure;

/// Past slots shown at most; the rest are counted.
const LIMIT: usize = 2_000;
/// Future fire times shown.
const FUTURE: usize = 3;
const DAY_MS: i64 = 86_400_000;

#[derive(Serialize)]
struct Explanation<'a> {
    job: &'a str,
    schedule: &'a str,
    timezone: String,
    from: i64,
    to: i64,
    now: i64,
    slots: Vec<SlotExplained>,
    left_out: usize,
    /// "no live node matches (...)" when no live, undrained node may run the job.
    placement: Option<String>,
}

pub async fn run(
    store: &Store,
    config: &Config,
    job: &str,
    from: Option<&str>,
    to: Option<&str>,
    json: bool,
) -> Result<u8, Failure> {
    let Some(row) = store.job(job).await.map_err(Failure::runtime)? else {
        return Err(Failure::runtime(format!("no job named \"{job}\"")));
    };
    let (schedule, _) = daemon::resolve(&row, &config.defaults)
        .map_err(|e| Failure::runtime(format!("{job}: cannot be explained: {e}")))?;
    let now = store.now().await.map_err(Failure::runtime)?;
    // By default the last day, or since the job was created when that is later: a job made an
    // hour ago has no slots to explain before that.
    let from = match from {
        Some(t) => parse_time(t, &schedule)?,
        None => {
            let created = store.created_at(job).await.map_err(Failure::runtime)?;
            created.map_or(now - DAY_MS, |c| c.max(now - DAY_MS))
        }
    };
    let to = match to {
        Some(t) => parse_time(t, &schedule)?,
        None => now,
    };
    if to < from {
        return Err(Failure::usage("--to is before --from"));
    }
    let runs = store
        .runs_between(job, from, to)
        .await
        .map_err(Failure::runtime)?;
    let state = RowState {
        enabled: row.enabled,
        slot: row.slot,
        next_exec: row.next_exec,
        exec_by: row.exec_by.clone(),
        error: row.error.clone().or(row.decode_error.clone()),
    };
    let range = Range {
        from,
        to,
        future: FUTURE,
        limit: LIMIT,
    };
    let (slots, left_out) = explain(&schedule, &state, &runs, now, range);
    let nodes = store.nodes().await.map_err(Failure::runtime)?;
    let offers: Vec<NodeOffer> = nodes
        .iter()
        .map(|n| NodeOffer::new(&n.name, n.tags.as_deref(), n.alive(now) && !n.drain))
        .collect();
    let placement = unplaceable(row.placement.as_deref(), &offers);
    if json {
        let out = Explanation {
            job,
            schedule: &row.schedule,
            timezone: schedule.tz().to_string(),
            from,
            to,
            now,
            slots,
            left_out,
            placement,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    println!(
        "{job}: \"{}\" in {}, from {} to {}",
        row.schedule,
        schedule.tz(),
        crate::model::explain::local(&schedule, from),
        crate::model::explain::local(&schedule, to)
    );
    if let Some(why) = &placement {
        println!("{job}: will not run until a node matches: {why}");
    }
    if left_out > 0 {
        println!("... {left_out} earlier slots left out (narrow the range with --from and --to)");
    }
    for s in &slots {
        println!("{}  {:<9}  {}", s.local, s.state, s.text);
        if let Some(note) = &s.note {
            println!("{:25}  {:<9}  note: {note}", "", "");
        }
    }
    Ok(0)
}

/// RFC 3339 (`2026-11-22T02:00:00Z`), or a local date or date and time in the job's zone
/// (`2026-11-22`, `2026-11-22T02:00`, `2026-11-22 02:00:00`).
pub(super) fn parse_time(text: &str, schedule: &Schedule) -> Result<i64, Failure> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_millis());
    }
    let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
        .ok_or_else(|| {
            Failure::usage(format!(
                "\"{text}\" is not a time: use 2026-11-22, 2026-11-22T02:00 (the job's zone) or RFC 3339"
            ))
        })?;
    schedule
        .tz()
        .from_local_datetime(&naive)
        .earliest()
        .or_else(|| {
            // A local time in a DST gap: the instant the clock jumps to.
            schedule
                .tz()
                .from_local_datetime(&(naive + chrono::Duration::hours(1)))
                .earliest()
        })
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| Failure::usage(format!("\"{text}\" does not exist in {}", schedule.tz())))
}
