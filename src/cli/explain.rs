//! `sqlcron explain JOB`: one line per slot of the job in a range (see [`crate::model::explain`]).

use serde::Serialize;

use crate::config::Config;
use crate::model::explain::{Range, SlotExplained, explain};
use crate::model::placement::{NodeOffer, unplaceable};
use crate::schedule::Schedule;
use crate::store::Store;

use super::Failure;

/// Past slots shown at most; the rest are counted.
const LIMIT: usize = 2_000;
/// Future fire times shown.
const FUTURE: usize = 3;
const DAY_MS: i64 = 86_400_000;

/// What `explain` and `status` say when no node is up, undrained: whatever the schedule says,
/// nothing runs.
pub(super) const NO_LIVE_NODE: &str = "no live node: nothing runs (start the service: systemctl start sqlcron; `sqlcron status` lists the nodes)";

/// The same when nodes are up but every one is drained.
pub(super) const ALL_DRAINED: &str =
    "every live node is drained: nothing runs (`sqlcron undrain NODE`)";

/// Why nothing runs at all, whatever the job: no node up (`alive`), or every one drained.
pub(super) fn nothing_runs(alive: bool, offers: &[NodeOffer]) -> Option<&'static str> {
    if !alive {
        Some(NO_LIVE_NODE)
    } else if !offers.iter().any(|o| o.available) {
        Some(ALL_DRAINED)
    } else {
        None
    }
}

#[derive(Serialize)]
struct Explanation<'a> {
    job: &'a str,
    schedule: &'a str,
    timezone: String,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    from: i64,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    to: i64,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    now: i64,
    slots: Vec<SlotExplained>,
    left_out: usize,
    /// "no live node matches (...)" when no live, undrained node may run the job; the text of
    /// [`NO_LIVE_NODE`] when there is none at all.
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
        return Err(super::no_such_job(store, job).await);
    };
    let (schedule, _) = crate::model::row_decode::resolve(&row, &config.defaults)
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
    // A range of more slots than one explanation walks starts later, and says so.
    let asked = from;
    let from = crate::model::explain::narrow_from(
        &schedule,
        from,
        to.min(now),
        crate::model::explain::MAX_SLOTS,
    );
    if from != asked {
        eprintln!(
            "note: the range holds more than {} slots; explained from {}",
            crate::model::explain::MAX_SLOTS,
            crate::model::explain::local(&schedule, from)
        );
    }
    let runs = store
        .runs_between(job, from, to)
        .await
        .map_err(Failure::runtime)?;
    let state = row.explain_state();
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
    let nothing = nothing_runs(nodes.iter().any(|n| n.alive(now)), &offers);
    let placement = match nothing {
        Some(why) => Some(why.to_string()),
        None => unplaceable(row.placement.as_deref(), &offers),
    };
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
    // A row's text (its schedule, a reason, a node's name) is shown with its control
    // characters escaped: it cannot move the cursor or overwrite a line.
    use super::terminal::shown;
    println!(
        "{job}: \"{}\" in {}, from {} to {}",
        shown(&row.schedule),
        schedule.tz(),
        crate::model::explain::local(&schedule, from),
        crate::model::explain::local(&schedule, to)
    );
    match (nothing, &placement) {
        (Some(why), _) => println!("{job}: will not run: {}", shown(why)),
        (None, Some(why)) => println!("{job}: will not run until a node matches: {}", shown(why)),
        (None, None) => {}
    }
    if left_out > 0 {
        println!("... {left_out} earlier slots left out (narrow the range with --from and --to)");
    }
    for s in &slots {
        println!("{}  {:<9}  {}", s.local, s.state, shown(&s.text));
        if let Some(note) = &s.note {
            println!("{:25}  {:<9}  note: {}", "", "", shown(note));
        }
    }
    chained(store, job, &schedule, (from, to)).await
}

/// The runs its upstreams triggered (`after`): "triggered by extract run 1234 (ok): ok on n2
/// (...)".
async fn chained(
    store: &Store,
    job: &str,
    schedule: &Schedule,
    (from, to): (i64, i64),
) -> Result<u8, Failure> {
    let runs = store
        .chained_runs(job, from, to)
        .await
        .map_err(Failure::runtime)?;
    for r in &runs {
        let Some(id) = r
            .job
            .rsplit_once("#after-")
            .and_then(|(_, id)| id.parse::<i64>().ok())
        else {
            continue;
        };
        let upstream = store.run_record(id).await.map_err(Failure::runtime)?;
        let by = upstream.map_or_else(
            || format!("run {id} (no longer in the history)"),
            |u| {
                let name = crate::model::chains::triggered_job(&u.job).unwrap_or(&u.job);
                format!("{name} run {id} ({})", u.outcome)
            },
        );
        // The run records' text is anybody's who can write them: shown with its escapes.
        use super::terminal::shown;
        println!(
            "{}  {:<9}  triggered by {}: {}",
            crate::model::explain::local(schedule, r.slot),
            shown(&r.outcome),
            shown(&by),
            shown(&crate::model::explain::describe_run(r))
        );
    }
    Ok(0)
}

/// RFC 3339 (`2026-11-22T02:00:00Z`), or a local date or date and time in the job's zone
/// (`2026-11-22`, `2026-11-22T02:00`, `2026-11-22 02:00:00`).
pub(super) fn parse_time(text: &str, schedule: &Schedule) -> Result<i64, Failure> {
    crate::schedule::parse_instant(text, schedule.tz()).map_err(Failure::usage)
}
