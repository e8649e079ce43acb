//! The `H` field (as in Jenkins): a value picked from a stable hash of the job's name, so that
//! many jobs written `H H * * *` spread over the day instead of all starting at midnight, and
//! each job keeps its own time on every node and across restarts.
//!
//! Forms, in any field: `H` (a value in the field's range), `H(a-b)` (a value in `a..=b`),
//! `H/n` (every `n`, starting at a hashed offset below `n`) and `H(a-b)/n`. The day-of-month
//! range is 1–28 so that the day exists in every month; day-of-week is 0–6.
//!
//! The hash is FNV-1a (64-bit) of the job name, mixed with the field's position by the
//! SplitMix64 finaliser: fixed here forever, since changing it would move every `H` job.

use super::{Field, ScheduleError};

/// FNV-1a, 64 bits, of a job name.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finaliser: spreads the name hash differently for each field.
fn mix(hash: u64, field: u64) -> u64 {
    let mut z = hash ^ field.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether a comma-separated item is an `H` form (no month or day name starts with H).
fn is_hashed(item: &str) -> bool {
    item.starts_with('H')
}

/// Whether any field of a (non-macro) expression uses `H`.
pub fn uses_hash(expr: &str) -> bool {
    expr.split_whitespace()
        .flat_map(|f| f.split(','))
        .any(is_hashed)
}

/// The range an `H` picks from in each field.
fn hash_bounds(field: Field) -> (u32, u32) {
    match field {
        Field::Second | Field::Minute => (0, 59),
        Field::Hour => (0, 23),
        Field::DayOfMonth => (1, 28),
        Field::Month => (1, 12),
        Field::DayOfWeek => (0, 6),
    }
}

/// Replaces every `H` form by plain cron syntax for the job `job`.
///
/// # Errors
/// A malformed `H` form (a bad range or step), naming it.
pub fn expand(expr: &str, job: &str) -> Result<String, ScheduleError> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let names: &[Field] = match fields.len() {
        6 => &[
            Field::Second,
            Field::Minute,
            Field::Hour,
            Field::DayOfMonth,
            Field::Month,
            Field::DayOfWeek,
        ],
        _ => &[
            Field::Minute,
            Field::Hour,
            Field::DayOfMonth,
            Field::Month,
            Field::DayOfWeek,
        ],
    };
    let hash = name_hash(job);
    let mut out = Vec::with_capacity(fields.len());
    for (i, (text, field)) in fields.iter().zip(names.iter().copied()).enumerate() {
        let value = mix(hash, i as u64);
        let items: Result<Vec<String>, ScheduleError> = text
            .split(',')
            .map(|item| {
                if is_hashed(item) {
                    expand_item(item, field, value).map_err(|message| ScheduleError::Field {
                        field,
                        message,
                        expr: expr.trim().to_string(),
                    })
                } else {
                    Ok(item.to_string())
                }
            })
            .collect();
        out.push(items?.join(","));
    }
    // A wrong field count is reported by the cron parser, on the expanded text.
    out.extend(fields.iter().skip(names.len()).map(|f| f.to_string()));
    Ok(out.join(" "))
}

/// One `H`, `H(a-b)`, `H/n` or `H(a-b)/n` item.
fn expand_item(item: &str, field: Field, value: u64) -> Result<String, String> {
    let (lo_max, hi_max) = hash_bounds(field);
    let rest = &item[1..];
    let (range, step) =
        match rest.split_once('/') {
            Some((r, s)) => (
                r,
                Some(s.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("\"{item}\": the step after / must be a number above 0")
                })?),
            ),
            None => (rest, None),
        };
    let (lo, hi) = if range.is_empty() {
        (lo_max, hi_max)
    } else {
        let inner = range
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| format!("\"{item}\": write H, H(a-b), H/n or H(a-b)/n"))?;
        let (a, b) = inner
            .split_once('-')
            .ok_or_else(|| format!("\"{item}\": the range in H(a-b) needs a dash"))?;
        let parse = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("\"{item}\": \"{t}\" is not a number"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        if a > b || a < lo_max || b > hi_max {
            return Err(format!(
                "\"{item}\": the range must lie in {lo_max}-{hi_max} with its start first"
            ));
        }
        (a, b)
    };
    let span = u64::from(hi - lo + 1);
    Ok(match step {
        None => (u64::from(lo) + value % span).to_string(),
        Some(n) => {
            let start = u64::from(lo) + value % u64::from(n).min(span);
            format!("{start}-{hi}/{n}")
        }
    })
}
