//! `sqlcron run JOB` (ask for a run now), `run --wait` (and wait for it, printing its output
//! and exiting with its code, as `systemd-run --wait --pipe` does), and `sqlcron logs JOB
//! [RUN]` (a run's stored output).

use std::io::{IsTerminal, Write};

use super::*;

/// `sqlcron run JOB [--queue] [--wait]`.
pub(super) async fn run_now(
    config: &Config,
    job: &str,
    queue: bool,
    wait: bool,
) -> Result<u8, Failure> {
    let store = connect(config).await?;
    let row = store.job(job).await.map_err(Failure::runtime)?;
    if row
        .as_ref()
        .is_some_and(|r| r.run_on.as_deref() == Some("every_node"))
    {
        return Err(Failure::usage(format!(
            "{job} runs on every node: run one node's copy, sqlcron run {job}@NODE"
        )));
    }
    // A run nothing will start is refused, unless asked to wait for it (--queue).
    if let Some(r) = row.as_ref().filter(|_| !queue) {
        if !r.enabled {
            return Err(Failure::usage(format!(
                "{job} is paused: nothing runs it until `sqlcron resume {job}`; resume it first, or `sqlcron run --queue {job}` to have it run at the resume"
            )));
        }
        let (now, nodes) =
            tokio::try_join!(store.now(), store.nodes()).map_err(Failure::runtime)?;
        if !nodes.iter().any(|n| n.alive(now)) {
            return Err(Failure::runtime(format!(
                "no live node: nothing runs {job} now; start the service (systemctl start sqlcron), or `sqlcron run --queue {job}` to have it run when a node is up"
            )));
        }
    }
    // The database's time at the request: the run asked for is the first attempt of a slot
    // from then on (a manual run's slot is its claim's time). A record made after the request
    // for an older slot (a scheduled run held by the start rate, a lost run's line, its rerun)
    // is not it.
    let asked_at = store.now().await.map_err(Failure::runtime)?;
    if !store
        .request_run(job, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?
    {
        return Err(no_such_job(&store, job).await);
    }
    if !wait {
        println!("{job}: will run as soon as a node is free");
        return Ok(0);
    }
    eprintln!("{job}: asked for a run; waiting for it to end (Ctrl-C stops waiting, not the run)");
    loop {
        // Without their output (a poll reads only what it needs); the one found is read whole.
        let runs = store
            .runs_between(job, asked_at, i64::MAX)
            .await
            .map_err(Failure::runtime)?;
        let first = runs
            .into_iter()
            .filter(|r| r.job == job && r.slot >= asked_at && r.attempt == 1)
            .filter(|r| r.outcome != "skipped")
            .min_by_key(|r| r.id);
        if let Some(first) =
            first.filter(|r| Outcome::parse(&r.outcome).is_ok_and(|o| o != Outcome::Running))
        {
            let done = store
                .run_record(first.id)
                .await
                .map_err(Failure::runtime)?
                .unwrap_or(first);
            print_run(&done);
            return Ok(exit_code(&done));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn newest_record(store: &Store, job: &str) -> Result<i64, Failure> {
    Ok(store
        .history(Some(job), 1)
        .await
        .map_err(Failure::runtime)?
        .first()
        .map_or(0, |r| r.id))
}

/// `sqlcron logs JOB [RUN]`: the stored output of run RUN (an id `history` shows), or of the
/// job's newest run that has ended.
pub(super) async fn logs(store: &Store, job: &str, run: Option<i64>) -> Result<u8, Failure> {
    let found = match run {
        Some(id) => store
            .run_record(id)
            .await
            .map_err(Failure::runtime)?
            .filter(|r| r.job == job),
        None => store
            .history(Some(job), 50)
            .await
            .map_err(Failure::runtime)?
            .into_iter()
            .find(|r| r.job == job && r.outcome != "running" && r.outcome != "skipped"),
    };
    let Some(found) = found else {
        if store.job(job).await.map_err(Failure::runtime)?.is_none()
            && newest_record(store, job).await? == 0
        {
            return Err(no_such_job(store, job).await);
        }
        return Err(Failure::runtime(match run {
            Some(id) => format!("{job} has no run {id} (`sqlcron history {job}` lists its runs)"),
            None => format!("{job} has no run that has ended yet"),
        }));
    };
    print_run(&found);
    Ok(0)
}

/// A line about the run on standard error, then its output on standard output: as stored (the
/// tail the job's `output_tail` keeps) when it goes to a file or a pipe, with control characters
/// other than newline and tab shown as escapes on a terminal.
fn print_run(r: &crate::model::history::HistoryRow) {
    let how = match (r.exit_code, r.signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => String::new(),
    };
    eprintln!(
        "run {} of {}: slot {}, attempt {}, {}{}{}, on {}, ended {}",
        r.id,
        terminal::shown(&r.job),
        daemon::fmt_ms(r.slot),
        r.attempt,
        terminal::shown(&r.outcome),
        if how.is_empty() { "" } else { " " },
        how,
        terminal::shown(r.node.as_deref().unwrap_or("-")),
        r.ended.map_or_else(|| "-".to_string(), daemon::fmt_ms),
    );
    if let Some(m) = r.message.as_deref().filter(|m| !m.is_empty()) {
        eprintln!("message: {}", terminal::shown(m));
    }
    let output = r.output.as_deref().unwrap_or("");
    if output.is_empty() {
        eprintln!("(no output was stored)");
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = if out.is_terminal() {
        out.write_all(terminal::shown_lines(output).as_bytes())
    } else {
        out.write_all(output.as_bytes())
    };
    if !output.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
}

/// The exit code `run --wait` ends with: the run's own; 128 + N for a run ended by signal N
/// (as a shell reports it); 124 for a timeout without either (as `timeout` does); 1 for any
/// other outcome that is not ok (lost, stopped, replaced, abandoned).
fn exit_code(r: &crate::model::history::HistoryRow) -> u8 {
    match (Outcome::parse(&r.outcome), r.exit_code, r.signal) {
        (Ok(Outcome::Ok), _, _) => 0,
        (_, Some(c), _) => u8::try_from(c.clamp(0, 255)).unwrap_or(1).max(1),
        (_, None, Some(s)) => u8::try_from((128 + s).clamp(129, 255)).unwrap_or(255),
        (Ok(Outcome::Timeout), None, None) => 124,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        outcome: &str,
        exit_code: Option<i64>,
        signal: Option<i64>,
    ) -> crate::model::history::HistoryRow {
        crate::model::history::HistoryRow {
            id: 1,
            job: "j".into(),
            slot: 0,
            attempt: 1,
            node: None,
            token: None,
            started: None,
            ended: None,
            outcome: outcome.into(),
            exit_code,
            signal,
            output: None,
            skipped_count: None,
            skipped_last: None,
            message: None,
            held_ms: None,
        }
    }

    #[test]
    fn the_wait_ends_with_the_runs_own_code() {
        assert_eq!(exit_code(&run("ok", Some(0), None)), 0);
        assert_eq!(exit_code(&run("failed", Some(3), None)), 3);
        // A failure is never 0, whatever was recorded.
        assert_eq!(exit_code(&run("failed", Some(0), None)), 1);
        assert_eq!(exit_code(&run("failed", Some(256), None)), 255);
        assert_eq!(exit_code(&run("timeout", None, Some(15))), 143);
        assert_eq!(exit_code(&run("timeout", None, None)), 124);
        assert_eq!(exit_code(&run("lost", None, None)), 1);
        assert_eq!(exit_code(&run("stopped", None, Some(9))), 137);
    }
}
