//! `sqlcron next`: when a schedule fires, in its zone.

use super::*;

pub(super) fn next(
    expr: &str,
    tz: &str,
    after: Option<&str>,
    count: usize,
    job: Option<&str>,
) -> Result<(), Failure> {
    let schedule = Schedule::parse_for(expr, tz, job).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(resolved) = schedule.expr().and_then(|e| e.resolved()) {
        eprintln!("{expr} is {resolved} for {}", job.unwrap_or_default());
    }
    let after = match after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                Failure::usage(format!(
                    "--after: \"{text}\" is not an RFC 3339 timestamp ({e}), e.g. 2026-03-29T01:00:00+01:00"
                ))
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let mut out = String::new();
    for t in schedule.iter_after(after).take(count) {
        out.push_str(
            &t.with_timezone(&schedule.tz())
                .to_rfc3339_opts(SecondsFormat::Secs, false),
        );
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
