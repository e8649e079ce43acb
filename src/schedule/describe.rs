//! A schedule in plain words, for the dashboard: "every 5 minutes", "on weekdays at 02:30".
//! Only the common shapes are put into words; anything else gets `None` and is shown as
//! written (a wrong description would be worse than none).

use super::{Kind, Schedule};

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The schedule in words (its zone not included), or `None` for a shape not covered.
pub fn describe(schedule: &Schedule) -> Option<String> {
    match schedule.kind() {
        Kind::Every(e) => Some(format!(
            "every {}",
            humantime::format_duration(std::time::Duration::from_secs(e.period as u64))
        )),
        Kind::At(at) => chrono::DateTime::from_timestamp(*at, 0)
            .map(|t| format!("once, at {}", t.format("%Y-%m-%d %H:%M:%SZ"))),
        Kind::Cron(expr) => describe_cron(expr.resolved().unwrap_or(expr.source())),
        Kind::Never => Some("only when its upstreams finish".into()),
    }
}

fn describe_cron(text: &str) -> Option<String> {
    let expanded = match text.trim() {
        "@hourly" => "0 * * * *",
        "@daily" | "@midnight" => "0 0 * * *",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        t => t,
    };
    let mut fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() == 6 {
        // Seconds first: only a whole-minute schedule is put into words.
        if fields[0] != "0" {
            return None;
        }
        fields.remove(0);
    }
    let [minute, hour, dom, month, dow] = fields[..] else {
        return None;
    };
    let days = days(dom, month, dow)?;
    let number = |f: &str| f.parse::<u32>().ok();
    let step = |f: &str| f.strip_prefix("*/").and_then(|n| n.parse::<u32>().ok());
    let at = match (minute, hour) {
        ("*", "*") => Time::Often("every minute".into()),
        (m, "*") if step(m).is_some() => Time::Often(format!("every {} minutes", step(m)?)),
        (m, "*") => Time::Often(format!("every hour at minute {}", number(m)?)),
        (m, h) if step(h).is_some() => {
            Time::Often(format!("every {} hours at minute {}", step(h)?, number(m)?))
        }
        (m, h) => {
            let m = number(m)?;
            let hours = h.split(',').map(number).collect::<Option<Vec<u32>>>()?;
            Time::At(
                hours
                    .iter()
                    .map(|h| format!("{h:02}:{m:02}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }
    };
    Some(match (at, days) {
        (Time::Often(o), None) => o,
        (Time::Often(o), Some(d)) => format!("{o}, {d}"),
        (Time::At(t), None) => format!("every day at {t}"),
        (Time::At(t), Some(d)) => format!("{d} at {t}"),
    })
}

enum Time {
    /// Several times an hour or a day: "every 5 minutes".
    Often(String),
    /// Named times of day: "02:30, 14:30".
    At(String),
}

/// The day restriction in words: `Some(None)` for every day, `None` for a shape not covered.
fn days(dom: &str, month: &str, dow: &str) -> Option<Option<String>> {
    let number = |f: &str| f.parse::<usize>().ok();
    match (dom, month, dow) {
        ("*", "*", "*") => Some(None),
        ("*", "*", "1-5") => Some(Some("on weekdays".into())),
        ("*", "*", "0,6" | "6,0" | "6-7" | "6,7") => Some(Some("on weekends".into())),
        ("*", "*", d) => {
            let names = d
                .split(',')
                .map(|x| day_name(x))
                .collect::<Option<Vec<_>>>()?;
            Some(Some(format!("on {}", names.join(", "))))
        }
        (d, "*", "*") => {
            let d = number(d).filter(|d| (1..=31).contains(d))?;
            Some(Some(format!("on day {d} of every month")))
        }
        (d, m, "*") => {
            let d = number(d).filter(|d| (1..=31).contains(d))?;
            let m = number(m).filter(|m| (1..=12).contains(m))?;
            Some(Some(format!("every year on {d} {}", MONTHS[m - 1])))
        }
        _ => None,
    }
}

fn day_name(field: &str) -> Option<&'static str> {
    if let Ok(n) = field.parse::<usize>() {
        return DAYS.get(n % 7).copied().filter(|_| n <= 7);
    }
    let lower = field.to_ascii_lowercase();
    DAYS.iter()
        .find(|d| d[..3].eq_ignore_ascii_case(&lower))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Option<String> {
        describe(&Schedule::parse_for(text, "UTC", Some("job")).unwrap())
    }

    #[test]
    fn common_schedules_read_as_words() {
        assert_eq!(words("* * * * *").as_deref(), Some("every minute"));
        assert_eq!(words("*/5 * * * *").as_deref(), Some("every 5 minutes"));
        assert_eq!(
            words("7 * * * *").as_deref(),
            Some("every hour at minute 7")
        );
        assert_eq!(
            words("15 */6 * * *").as_deref(),
            Some("every 6 hours at minute 15")
        );
        assert_eq!(words("30 2 * * *").as_deref(), Some("every day at 02:30"));
        assert_eq!(words("@daily").as_deref(), Some("every day at 00:00"));
        assert_eq!(
            words("30 2,14 * * 1-5").as_deref(),
            Some("on weekdays at 02:30, 14:30")
        );
        assert_eq!(
            words("0 9 * * MON,fri").as_deref(),
            Some("on Monday, Friday at 09:00")
        );
        assert_eq!(words("0 0 * * 7").as_deref(), Some("on Sunday at 00:00"));
        assert_eq!(
            words("0 3 1 * *").as_deref(),
            Some("on day 1 of every month at 03:00")
        );
        assert_eq!(
            words("0 0 25 12 *").as_deref(),
            Some("every year on 25 December at 00:00")
        );
        assert_eq!(
            words("*/10 * * * 1-5").as_deref(),
            Some("every 10 minutes, on weekdays")
        );
        assert_eq!(words("0 30 2 * * *").as_deref(), Some("every day at 02:30"));
        assert_eq!(words("@every 90s").as_deref(), Some("every 1m 30s"));
        assert_eq!(
            words("@at 2030-01-02T03:04:05Z").as_deref(),
            Some("once, at 2030-01-02 03:04:05Z")
        );
        // H fields are described as they resolved for this job.
        assert!(words("H 3 * * *").unwrap().starts_with("every day at 03:"));
    }

    #[test]
    fn shapes_not_covered_are_not_guessed() {
        assert_eq!(words("0-10 * * * *"), None);
        assert_eq!(words("0 0 1-7 * 1"), None);
        assert_eq!(words("15 30 2 * * *"), None);
        assert_eq!(words("0 0 L * *"), None);
        assert_eq!(words("0 8-18 * * *"), None);
    }
}
