//! `sqlcron at TIME [--name N] -- CMD...`: a one-off job (`@at`), run once with the same
//! guarantees as any slot, then removed by retention (see `docs/schedule.md`).

use chrono::{DateTime, SecondsFormat, Utc};

use crate::schedule::Schedule;
use crate::store::Store;
use crate::store::one_off::OneOff;

use super::Failure;

/// The instant TIME names: `now`, `+DURATION` / `now+DURATION` (from the database clock), an
/// RFC 3339 instant, or a local date and time in `zone`.
pub fn resolve_time(text: &str, db_now: i64, zone: &str) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    let relative = t
        .strip_prefix("now")
        .map(str::trim)
        .and_then(|r| {
            if r.is_empty() {
                Some("0s")
            } else {
                r.strip_prefix('+')
            }
        })
        .or_else(|| t.strip_prefix('+'));
    if let Some(d) = relative {
        let d = humantime::parse_duration(d.trim())
            .map_err(|e| format!("\"{text}\": \"{d}\" is not a duration such as 10m ({e})"))?;
        let ms = db_now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        // Slots are whole seconds: round up so that the run is never earlier than asked.
        let secs = ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0);
        return DateTime::from_timestamp(secs, 0)
            .ok_or_else(|| format!("\"{text}\" is out of range"));
    }
    let schedule = Schedule::parse(&format!("@at {t}"), zone).map_err(|e| e.to_string())?;
    match schedule.kind() {
        crate::schedule::Kind::At(secs) => {
            DateTime::from_timestamp(*secs, 0).ok_or_else(|| format!("\"{text}\" is out of range"))
        }
        _ => Err(format!("\"{text}\" is not a time")),
    }
}

pub struct Request<'a> {
    pub time: &'a str,
    pub name: Option<&'a str>,
    pub user: Option<&'a str>,
    pub command: &'a [String],
    pub zone: &'a str,
    /// This node's `[daemon] allowed_users`: `--user` is refused here when the daemons would
    /// refuse it (they check again before every run).
    pub allowed: &'a crate::model::run_as::Allowed,
    /// `--key`: sign the job (`[security] sql_jobs = "signed"`).
    pub key: Option<&'a crate::model::signing::SecretKey>,
}

pub async fn run(store: &Store, req: Request<'_>) -> Result<u8, Failure> {
    if let Some(user) = req.user {
        req.allowed
            .check_names(user, None)
            .map_err(|m| Failure::usage(format!("--{m}")))?;
    }
    let db_now = store.now().await.map_err(Failure::runtime)?;
    let when = resolve_time(req.time, db_now, req.zone).map_err(Failure::usage)?;
    let stamp = when.to_rfc3339_opts(SecondsFormat::Secs, true);
    let name = match req.name {
        Some(n) => {
            crate::model::names::check_name(n, 200)
                .map_err(|m| Failure::usage(format!("--name {m}")))?;
            n.to_string()
        }
        None => format!(
            "at-{}-{:04x}",
            when.format("%Y%m%dT%H%M%SZ"),
            rand::random::<u16>()
        ),
    };
    let (command, argv) = match req.command {
        [] => return Err(Failure::usage("give the command after --")),
        [one] => (Some(one.clone()), None),
        many => (
            None,
            Some(serde_json::to_string(many).map_err(Failure::runtime)?),
        ),
    };
    let mut job = OneOff {
        name: name.clone(),
        schedule: format!("@at {stamp}"),
        command,
        argv,
        run_user: req.user.map(str::to_string),
        workdir: std::env::current_dir()
            .ok()
            .map(|d| d.to_string_lossy().into_owned()),
        signature: None,
    };
    // A new job: its first generation is the database's clock (later signatures go higher).
    job.signature = req
        .key
        .map(|k| k.sign(&job.name, db_now.max(1) as u64, &job.definition()));
    let created = store
        .add_one_off(&job, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?;
    if !created {
        return Err(Failure::usage(format!(
            "a job named \"{name}\" exists already"
        )));
    }
    let late = if when.timestamp_millis() < db_now {
        " (already past: runs as soon as a node is free, by its misfire policy)"
    } else {
        ""
    };
    println!("{name}: runs once at {stamp}{late}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::resolve_time;

    #[test]
    fn times_relative_absolute_and_local() {
        let now = 1_767_225_600_250; // 2026-01-01T00:00:00.250Z
        let t = |s: &str| resolve_time(s, now, "Europe/Berlin").map(|d| d.to_rfc3339());
        assert_eq!(t("now").unwrap(), "2026-01-01T00:00:01+00:00");
        assert_eq!(t("+10m").unwrap(), "2026-01-01T00:10:01+00:00");
        assert_eq!(t("now + 1h").unwrap(), "2026-01-01T01:00:01+00:00");
        assert_eq!(
            t("2026-12-24T18:00:00+01:00").unwrap(),
            "2026-12-24T17:00:00+00:00"
        );
        assert_eq!(t("2026-12-24 18:00").unwrap(), "2026-12-24T17:00:00+00:00");
        assert!(t("tomorrow").unwrap_err().contains("is not an instant"));
        assert!(t("+soon").unwrap_err().contains("not a duration"));
    }
}
