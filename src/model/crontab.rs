//! `sqlcron import crontab`: a user crontab, `/etc/crontab` or an `/etc/cron.d` file turned into
//! `[[job]]` TOML. Pure: text in, TOML text and line-numbered notes out.
//!
//! - Job lines: five fields or a macro (`@daily`, ...), then (system files) the user, then the
//!   command. `\%` becomes `%`; an unescaped `%` (cron's stdin and newline syntax) cannot be
//!   expressed and the line is reported.
//! - `CRON_TZ=` and `TZ=` lines set the `timezone` of the jobs after them; other `NAME=value` lines
//!   become the `env` of the jobs after them (`SHELL` too: jobs still run with `/bin/sh`, and
//!   the line is reported); `MAILTO=` becomes a comment pointing at `on_failure`.
//! - `@reboot`, bad schedules and lines that are not understood are reported with their line
//!   numbers and left out.
//! - Names come from the command's program (`/usr/local/bin/backup.sh --full` → `backup`; the
//!   directory after `run-parts`), made unique in file order with `-2`, `-3`, ...: the same files
//!   always give the same names.

use std::collections::{BTreeMap, HashSet};

use crate::schedule::CronExpr;

/// One crontab file to import.
pub struct Source<'a> {
    /// Where it came from, for notes.
    pub path: &'a str,
    pub text: &'a str,
    /// System format (`/etc/crontab`, `/etc/cron.d/*`): a user column before the command.
    pub system: bool,
    /// The account of a user crontab's jobs (`--user`).
    pub user: Option<&'a str>,
}

/// A job read from a crontab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub name: String,
    pub schedule: String,
    pub timezone: Option<String>,
    pub user: Option<String>,
    pub command: String,
    pub env: BTreeMap<String, String>,
    /// `path:line` it came from.
    pub origin: String,
}

/// What an import made: jobs, comments for the TOML's head, and notes for stderr.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Import {
    pub jobs: Vec<Imported>,
    pub comments: Vec<String>,
    pub notes: Vec<String>,
}

/// Programs that only wrap the command that names a job.
const WRAPPERS: [&str; 9] = [
    "sudo", "nice", "ionice", "nohup", "exec", "env", "chronic", "setsid", "time",
];

/// Imports `sources` in order; names are unique across all of them.
pub fn import(sources: &[Source<'_>]) -> Import {
    let mut out = Import::default();
    let mut taken = HashSet::new();
    for src in sources {
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        let mut timezone: Option<String> = None;
        for (i, raw) in src.text.lines().enumerate() {
            let n = i + 1;
            let at = format!("{}:{n}", src.path);
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((name, value)) = variable(line) {
                match name.as_str() {
                    "CRON_TZ" | "TZ" => timezone = Some(value),
                    "MAILTO" => out.comments.push(format!(
                        "{at}: MAILTO={value}: sqlcron mails nothing; set on_failure, e.g. \
                         on_failure = \"mail -s \\\"$SQLCRON_TEXT\\\" {value} < $SQLCRON_OUTPUT\""
                    )),
                    _ => {
                        if name == "SHELL" && value != "/bin/sh" {
                            out.notes.push(format!(
                                "{at}: SHELL={value}: jobs run with /bin/sh; it is passed as a variable only"
                            ));
                        }
                        env.insert(name, value);
                    }
                }
                continue;
            }
            match job_line(line, src.system) {
                Ok((schedule, user, command)) => {
                    if let Err(e) = CronExpr::parse(&schedule) {
                        out.notes.push(format!("{at}: left out: {e}"));
                        continue;
                    }
                    let command = match unescape_percent(&command) {
                        Ok(c) => c,
                        Err(()) => {
                            out.notes.push(format!(
                                "{at}: left out: an unescaped % (cron's standard input) has no \
                                 equivalent; write the input into the command"
                            ));
                            continue;
                        }
                    };
                    let name = unique(&job_name(&command), &mut taken);
                    out.jobs.push(Imported {
                        name,
                        schedule,
                        timezone: timezone.clone(),
                        user: user.or(src.user.map(str::to_string)),
                        command,
                        env: env.clone(),
                        origin: at,
                    });
                }
                Err(why) => out.notes.push(format!("{at}: left out: {why}")),
            }
        }
    }
    out
}

/// `NAME=value` or `NAME = "value"`.
fn variable(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return None;
    }
    let value = value.trim();
    let value = ['"', '\'']
        .iter()
        .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
        .unwrap_or(value);
    Some((name.to_string(), value.to_string()))
}

/// Splits a job line into (schedule, user, command).
fn job_line(line: &str, system: bool) -> Result<(String, Option<String>, String), String> {
    let (schedule, rest) = if line.starts_with('@') {
        let (m, rest) = split_word(line);
        if m.eq_ignore_ascii_case("@reboot") {
            return Err("@reboot: a cluster has no single boot to run it at".into());
        }
        (m.to_string(), rest)
    } else {
        let mut rest = line;
        let mut fields = Vec::new();
        for _ in 0..5 {
            let (f, r) = split_word(rest);
            if f.is_empty() {
                return Err(
                    "not a job line (five time fields and a command) nor a variable".into(),
                );
            }
            fields.push(f);
            rest = r;
        }
        (fields.join(" "), rest)
    };
    let (user, command) = if system {
        let (u, r) = split_word(rest);
        if u.is_empty() {
            return Err("no user column (system crontab format)".into());
        }
        (Some(u.to_string()), r)
    } else {
        (None, rest)
    };
    if command.trim().is_empty() {
        return Err("no command".into());
    }
    Ok((schedule, user, command.trim().to_string()))
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

/// `\%` → `%`; `Err` for an unescaped `%`.
fn unescape_percent(command: &str) -> Result<String, ()> {
    let mut out = String::with_capacity(command.len());
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                out.push('%');
                chars.next();
            }
            '%' => return Err(()),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A name from the command's program: the first word that is not a variable assignment, a
/// wrapper (`nice`, `sudo`, ...) or a guard (`test -x P &&`, `[ -x P ] &&`, `cd DIR &&`).
pub fn job_name(command: &str) -> String {
    // In `guard && command` or `guard || command`, the first part that is not a guard.
    let part = command
        .split("&&")
        .flat_map(|p| p.split("||"))
        .find(|p| {
            let first = p.split_whitespace().next().unwrap_or("");
            !matches!(first, "test" | "[" | "cd" | "[[")
        })
        .unwrap_or(command);
    let mut words = part.split_whitespace().peekable();
    let mut program = "";
    while let Some(w) = words.next() {
        if variable(w).is_some()
            || WRAPPERS.contains(&w)
            || w.starts_with('-')
            || w.chars().all(|c| c.is_ascii_digit())
        {
            continue;
        }
        if matches!(w, "flock" | "timeout") {
            // Their first argument is a file or a duration, not the program.
            words.next();
            continue;
        }
        if w == "run-parts" {
            if let Some(dir) = words.find(|a| !a.starts_with('-')) {
                program = dir;
            }
            break;
        }
        program = w;
        break;
    }
    let base = program.rsplit('/').find(|s| !s.is_empty()).unwrap_or("");
    let base = [".sh", ".py", ".pl", ".rb", ".php", ".bash"]
        .iter()
        .find_map(|ext| base.strip_suffix(ext))
        .unwrap_or(base);
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_matches('-').to_string();
    if name.is_empty() { "job".into() } else { name }
}

fn unique(base: &str, taken: &mut HashSet<String>) -> String {
    let mut name = base.to_string();
    let mut n = 1;
    while !taken.insert(name.clone()) {
        n += 1;
        name = format!("{base}-{n}");
    }
    name
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The TOML of an import: its comments, then one `[[job]]` table per job.
pub fn to_toml(import: &Import) -> String {
    let mut out = String::new();
    for c in &import.comments {
        out.push_str(&format!("# {c}\n"));
    }
    for j in &import.jobs {
        out.push_str(&format!("\n# from {}\n[[job]]\n", j.origin));
        out.push_str(&format!("name = {}\n", quoted(&j.name)));
        out.push_str(&format!("schedule = {}\n", quoted(&j.schedule)));
        if let Some(tz) = &j.timezone {
            out.push_str(&format!("timezone = {}\n", quoted(tz)));
        }
        if let Some(u) = &j.user {
            out.push_str(&format!("user = {}\n", quoted(u)));
        }
        out.push_str(&format!("command = {}\n", quoted(&j.command)));
        if !j.env.is_empty() {
            let pairs: Vec<String> = j
                .env
                .iter()
                .map(|(k, v)| format!("{} = {}", quoted(k), quoted(v)))
                .collect();
            out.push_str(&format!("env = {{ {} }}\n", pairs.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Import {
        import(&[Source {
            path: "crontab",
            text,
            system: false,
            user: Some("alice"),
        }])
    }

    #[test]
    fn names_come_from_the_program() {
        for (command, name) in [
            ("/usr/local/bin/backup.sh --full", "backup"),
            ("cd /srv/app && ./manage.py clearsessions", "manage"),
            (
                "test -x /usr/sbin/anacron || run-parts --report /etc/cron.daily",
                "cron-daily",
            ),
            ("nice -n 19 flock /tmp/x.lock /opt/sync", "sync"),
            ("FOO=1 python3 /opt/report.py", "python3"),
            (
                "[ -x /usr/lib/php/sessionclean ] && /usr/lib/php/sessionclean",
                "sessionclean",
            ),
        ] {
            assert_eq!(job_name(command), name, "{command}");
        }
    }

    #[test]
    fn variables_zones_and_mailto() {
        let i = user(
            "# comment\nMAILTO=ops@example.com\nPATH=/usr/bin:/bin\nCRON_TZ=Europe/Berlin\n\
             30 2 * * * /usr/bin/backup\nTZ = \"UTC\"\n@hourly /usr/bin/backup --quick\n",
        );
        assert_eq!(i.jobs.len(), 2);
        assert_eq!(i.jobs[0].timezone.as_deref(), Some("Europe/Berlin"));
        assert_eq!(i.jobs[0].env["PATH"], "/usr/bin:/bin");
        assert_eq!(i.jobs[0].user.as_deref(), Some("alice"));
        assert_eq!(i.jobs[1].timezone.as_deref(), Some("UTC"));
        assert_eq!(i.jobs[1].schedule, "@hourly");
        assert_eq!(i.jobs[1].name, "backup-2", "names unique in file order");
        assert!(i.comments[0].starts_with("crontab:2: MAILTO=ops@example.com"));
    }

    #[test]
    fn unsupported_lines_are_reported_with_their_numbers() {
        let i = user(
            "@reboot /usr/bin/start\n61 * * * * /bin/true\necho hi\n\
             0 * * * * echo a%b\n0 * * * * date +\\%F\n",
        );
        assert_eq!(i.jobs.len(), 1);
        assert_eq!(i.jobs[0].command, "date +%F");
        let lines: Vec<&str> = i
            .notes
            .iter()
            .map(|n| n.split(": ").next().unwrap())
            .collect();
        assert_eq!(lines, ["crontab:1", "crontab:2", "crontab:3", "crontab:4"]);
        assert!(i.notes[0].contains("@reboot"));
    }

    #[test]
    fn system_files_have_a_user_column() {
        let i = import(&[Source {
            path: "/etc/crontab",
            text: "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n* * * * * www\n",
            system: true,
            user: None,
        }]);
        assert_eq!(i.jobs.len(), 1);
        assert_eq!(i.jobs[0].user.as_deref(), Some("root"));
        assert_eq!(i.jobs[0].name, "cron-hourly");
        assert!(i.notes[0].contains("/etc/crontab:2"), "{:?}", i.notes);
        let toml = to_toml(&i);
        assert!(
            toml.contains("command = \"cd / && run-parts --report /etc/cron.hourly\""),
            "{toml}"
        );
    }
}
