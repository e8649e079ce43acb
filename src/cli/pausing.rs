//! `sqlcron pause JOB [--reason TEXT]`, `sqlcron stop JOB` and `sqlcron resume JOB
//! [--skip-missed]`: resume says first what the job's misfire policy will do with the slots that
//! passed while it was paused (as the dashboard's resume page does); `--skip-missed` skips them
//! all instead, recorded as one `skipped` line.

use crate::model::resume::{describe, preview, skip_to};
use crate::store::Store;
use crate::store::resume::{Skip, SkipDone};

use super::Failure;
use crate::config::Config;

pub async fn resume(
    store: &Store,
    job: &str,
    skip_missed: bool,
    defaults: &crate::model::job::Policy,
    node: &str,
) -> Result<u8, Failure> {
    let actor = crate::exec::account::this_process(None);
    let (now, row) = tokio::try_join!(store.now(), store.job(job)).map_err(Failure::runtime)?;
    let Some(row) = row else {
        return Err(super::no_such_job(store, job).await);
    };
    if row.enabled {
        println!("{job}: not paused");
        return Ok(0);
    }
    let resolved = crate::model::row_decode::resolve(&row, defaults);
    let attempts = u32::try_from(row.attempt).unwrap_or(0);
    if !skip_missed {
        if let Ok((schedule, policy)) = &resolved {
            let p = preview(row.slot, attempts, row.run_now, now, policy, schedule);
            println!(
                "{job}: {}",
                describe(&p, policy.misfire.as_str(), policy.max_catch_up)
            );
        }
        if !store
            .set_enabled(job, true, &actor)
            .await
            .map_err(Failure::runtime)?
        {
            return Err(super::no_such_job(store, job).await);
        }
        println!("{job}: resumed");
        return Ok(0);
    }
    let (schedule, policy) = resolved.map_err(|e| {
        Failure::usage(format!(
            "{job}: its definition cannot be read ({e}): resume it without --skip-missed"
        ))
    })?;
    if row.run_on.as_deref() == Some("every_node") {
        return Err(Failure::usage(format!(
            "{job}: an every_node template: its copies run, not it; resume it without --skip-missed"
        )));
    }
    let Some((slot, skipped, capped)) = skip_to(row.slot, attempts, now, &schedule) else {
        return Err(Failure::usage(format!(
            "{job}: no slot after now (a one-off, or its schedule ended): skipping would end it without a run; resume it without --skip-missed"
        )));
    };
    let skip = Skip {
        seen_token: row.token,
        seen_slot: row.slot,
        slot,
        next_exec: slot.saturating_add(crate::model::policy::jitter_ms(job, slot, policy.jitter)),
        skipped,
        capped,
    };
    match store
        .resume_skipping(job, &skip, node, &actor)
        .await
        .map_err(Failure::runtime)?
    {
        SkipDone::Resumed => {
            let n = skipped.map_or(0, |s| s.0);
            let at_least = if capped { "at least " } else { "" };
            println!("{job}: resumed; {at_least}{n} missed slot(s) skipped");
            Ok(0)
        }
        SkipDone::Changed => Err(Failure::runtime(format!(
            "{job}: changed while it was being resumed (resumed, run or edited elsewhere): nothing was done; try again"
        ))),
        SkipDone::NoSuchJob => Err(super::no_such_job(store, job).await),
    }
}

/// `sqlcron pause JOB [--reason TEXT]`.
pub async fn pause(config: &Config, job: &str, reason: Option<&str>) -> Result<u8, Failure> {
    let enabled = false;
    if reason.is_some_and(|r| !crate::service::web::reason_allowed(r)) {
        return Err(Failure::usage(
            "--reason: at most 500 characters on one line, no control or direction marks"
                .to_string(),
        ));
    }
    let store = super::connect(config).await?;
    let changed = store
        .set_enabled_because(
            job,
            enabled,
            &crate::exec::account::this_process(None),
            reason,
        )
        .await
        .map_err(Failure::runtime)?;
    if !changed {
        return Err(super::no_such_job(&store, job).await);
    }
    println!("{job}: {}", if enabled { "resumed" } else { "paused" });
    Ok(0)
}

/// `sqlcron stop JOB`.
pub async fn stop(config: &Config, job: &str) -> Result<u8, Failure> {
    let store = super::connect(config).await?;
    let asked = store
        .request_stop(job, None, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?;
    if !asked {
        return Err(Failure::usage(format!(
            "{job}: no run in progress (or no job by that name)"
        )));
    }
    println!("{job}: stop requested; its node stops the run at its next lease extension");
    Ok(0)
}
