//! `[[calendar]]` tables: named calendars written to `cron_calendars` at start and reload, so
//! that every node reads the same ones. Entries are given inline (`entries`, one per string) or
//! read from an iCalendar file (`ics_file`), whose timed events are read in `timezone`.

use std::path::Path;

use serde::Deserialize;

use super::validate::Collector;
use super::{Config, ConfigError, Problem};
use crate::schedule::calendar::Calendar;
use crate::schedule::parse_zone;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCalendar {
    pub name: Option<String>,
    #[serde(default)]
    pub entries: Vec<String>,
    pub ics_file: Option<String>,
    /// The zone an iCalendar file's timed events are read in (default UTC).
    pub timezone: Option<String>,
}

/// A validated `[[calendar]]`: its entries as the lines stored in `cron_calendars.entries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarDef {
    pub name: String,
    /// One entry per line (the iCalendar file's events appended by [`read_files`]).
    pub entries: String,
    pub ics_file: Option<String>,
    pub timezone: String,
}

impl CalendarDef {
    /// The calendar these lines make.
    ///
    /// # Errors
    /// The first line that is not an entry.
    pub fn parse(&self) -> Result<Calendar, String> {
        Calendar::parse(&self.name, &self.entries)
    }
}

/// Checks the `[[calendar]]` tables (names, zones, inline entries); the files are read later.
pub(super) fn validate(raw: &[RawCalendar], c: &mut Collector) -> Vec<CalendarDef> {
    let mut out: Vec<CalendarDef> = vec![];
    for (i, cal) in raw.iter().enumerate() {
        let label = match &cal.name {
            Some(n) => format!("calendar \"{n}\""),
            None => format!("calendar #{}", i + 1),
        };
        let Some(name) = cal.name.clone() else {
            c.push(format!("{label} name"), "is required");
            continue;
        };
        if let Err(m) = crate::model::names::check_name(&name, 200) {
            c.push(format!("{label} name"), m);
            continue;
        }
        if out.iter().any(|d| d.name == name) {
            c.push(format!("{label} name"), "is defined twice");
            continue;
        }
        let timezone = cal.timezone.clone().unwrap_or_else(|| "UTC".into());
        if let Err(e) = parse_zone(&timezone) {
            c.push(format!("{label} timezone"), e.to_string());
        }
        if cal.entries.is_empty() && cal.ics_file.is_none() {
            c.push(
                format!("{label} entries"),
                "give entries (such as [\"2026-12-25 Christmas Day\"]) or an ics_file",
            );
        }
        if let Some(bad) = cal.entries.iter().find(|e| e.contains('\n')) {
            c.push(
                format!("{label} entries"),
                format!("\"{bad}\" holds a line break: give one entry per string"),
            );
        }
        let def = CalendarDef {
            name,
            entries: cal.entries.join("\n"),
            ics_file: cal.ics_file.clone(),
            timezone,
        };
        if let Err(m) = def.parse() {
            c.push(format!("{label} entries"), m);
        }
        out.push(def);
    }
    out
}

/// Reads each calendar's `ics_file` and appends its events as entries.
pub(super) fn read_files(config: &mut Config, path: &Path) -> Result<(), ConfigError> {
    let mut problems = vec![];
    for def in &mut config.calendars {
        let Some(file) = def.ics_file.clone() else {
            continue;
        };
        let location = format!("calendar \"{}\" ics_file", def.name);
        let zone = parse_zone(&def.timezone).unwrap_or(chrono_tz::UTC);
        let read = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {file}: {e}"))
            .and_then(|text| {
                crate::schedule::ics::entries(&text, zone).map_err(|e| format!("{file}: {e}"))
            });
        match read {
            Ok(lines) => {
                let mut all: Vec<String> = def.entries.lines().map(str::to_string).collect();
                all.push(format!("# from {file}"));
                all.extend(lines);
                def.entries = all.join("\n");
                if let Err(message) = def.parse() {
                    problems.push(Problem { location, message });
                }
            }
            Err(message) => problems.push(Problem { location, message }),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError {
            path: path.to_path_buf(),
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Environment, parse};
    use std::path::Path;

    fn env() -> Environment {
        Environment {
            hostname: Some("host-a".into()),
            ..Environment::default()
        }
    }

    #[test]
    fn calendars_and_the_jobs_naming_them_are_checked() {
        let ok = parse(
            r#"
            [defaults]
            skip_on = ["holidays"]
            [[calendar]]
            name = "holidays"
            entries = ["2026-12-25 Christmas Day", "yearly 01-01 New Year"]
            [[calendar]]
            name = "window"
            entries = ["weekly Sat 02:00-04:00"]
            [[job]]
            name = "a"
            schedule = "@hourly"
            command = "true"
            only_in = ["window"]
            defer = true
            "#,
            Path::new("t.toml"),
            &env(),
        )
        .unwrap();
        assert_eq!(ok.calendars.len(), 2);
        assert_eq!(ok.defaults.calendars.skip_on, vec!["holidays".to_string()]);
        let bad = parse(
            r#"
            [[calendar]]
            name = "h"
            entries = ["2026-13-01 Nope"]
            [[calendar]]
            name = "h2"
            [[job]]
            name = "a"
            schedule = "@hourly"
            command = "true"
            skip_on = ["missing"]
            "#,
            Path::new("t.toml"),
            &env(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.contains("calendar \"h\" entries: calendar \"h\", line 1"),
            "{bad}"
        );
        assert!(
            bad.contains("calendar \"h2\" entries: give entries"),
            "{bad}"
        );
        assert!(
            bad.contains("job \"a\" skip_on: calendar \"missing\" is not defined"),
            "{bad}"
        );
    }
}
