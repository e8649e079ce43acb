//! `sqlcron backfill JOB --from T --to T [--max N] [--dry-run]`: run every slot of a job in a
//! range that has no successful run yet, oldest first, each once (see `store/backfill.rs`).

use crate::config::Config;
use crate::store::Store;
use crate::store::backfill::backfill_name;
use crate::store::backfill_plan::{self as backfill, rfc3339};

use super::Failure;
use super::explain::parse_time;

pub struct Request<'a> {
    pub job: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub max: Option<usize>,
    pub dry_run: bool,
}

pub async fn run(store: &Store, config: &Config, req: Request<'_>) -> Result<u8, Failure> {
    let Some(row) = store.job(req.job).await.map_err(Failure::runtime)? else {
        return Err(super::no_such_job(store, req.job).await);
    };
    let (schedule, _) = crate::model::row_decode::resolve(&row, &config.defaults)
        .map_err(|e| Failure::runtime(format!("{}: cannot be backfilled: {e}", req.job)))?;
    let from = parse_time(req.from, &schedule)?;
    let to = parse_time(req.to, &schedule)?;
    let now = store.now().await.map_err(Failure::runtime)?;
    let plan = backfill::plan(store, &row, &schedule, (from, to), now, req.max)
        .await
        .map_err(Failure::usage)?;
    let mut queued = 0;
    let mut already = 0;
    if req.dry_run {
        for &slot in &plan.todo {
            println!(
                "{}  would run as {}",
                rfc3339(slot),
                backfill_name(req.job, slot)
            );
        }
    } else {
        let actor = crate::exec::account::this_process(None);
        let queueing = backfill::queue(store, &row, &plan.todo, &actor)
            .await
            .map_err(Failure::runtime)?;
        for q in &queueing.queued {
            if q.created {
                queued += 1;
                println!("{}  queued as {}", rfc3339(q.slot), q.name);
            } else {
                already += 1;
                println!("{}  already queued ({})", rfc3339(q.slot), q.name);
            }
        }
        if queueing.changed {
            return Err(Failure::runtime(format!(
                "{}: its row changed while the backfill was queued: {queued} slot(s) queued of \
                 the definition planned, the rest not; run the backfill again to plan with the \
                 new one",
                req.job
            )));
        }
    }
    let verb = if req.dry_run { "would run" } else { "queued" };
    let count = if req.dry_run { plan.todo.len() } else { queued };
    println!(
        "{}: {} slot(s) in the range, {} already ran successfully, {count} {verb}{}",
        req.job,
        plan.slots,
        plan.done,
        if already > 0 {
            format!(", {already} already queued")
        } else {
            String::new()
        }
    );
    Ok(0)
}
