//! A TOML file that parses but does not fit the configuration (an unknown key, a value of the
//! wrong type), said where it is: the line of the key, the table (`job "backup"`, `[daemon]`),
//! the key, and a fix (the closest valid key; quotes and a unit for a duration).
//!
//! serde's error names neither the key nor the job, and its position is the table's header
//! (a `[[job]]` gathers its policy keys from a flattened table). So on an error the file is read
//! again as plain TOML, and each table, then each key of the table that fails, is tried alone:
//! the first key that fails alone is the one named. Only on an error: a good file costs
//! nothing more.

use toml::{Table, Value};

use super::raw::RawConfig;

/// Where the first key that does not fit is, and what to do; `None` when no single key fails
/// alone (the caller then reports serde's own message).
pub(super) fn locate(text: &str) -> Option<(String, String)> {
    let root: Table = text.parse().ok()?;
    for (section, value) in &root {
        let alone = |v: Value| {
            let mut t = Table::new();
            t.insert(section.clone(), v);
            fits(t)
        };
        if alone(value.clone()).is_ok() {
            continue;
        }
        match value {
            Value::Array(items) if items.iter().all(Value::is_table) => {
                for (i, item) in items.iter().enumerate() {
                    let Some(table) = item.as_table() else {
                        continue;
                    };
                    if alone(Value::Array(vec![item.clone()])).is_ok() {
                        continue;
                    }
                    let name = table.get("name").and_then(Value::as_str);
                    let label = match name {
                        Some(n) => format!("{section} \"{n}\""),
                        None => format!("{section} number {}", i + 1),
                    };
                    for (key, v) in table {
                        let mut one = Table::new();
                        one.insert(key.clone(), v.clone());
                        if let Err(message) = alone(Value::Array(vec![Value::Table(one)])) {
                            let line = line_of(text, section, Some(i), key);
                            return Some(said(line, &label, section, key, &message));
                        }
                    }
                }
            }
            Value::Table(table) => {
                for (key, v) in table {
                    let mut one = Table::new();
                    one.insert(key.clone(), v.clone());
                    if let Err(message) = alone(Value::Table(one)) {
                        let line = line_of(text, section, None, key);
                        return Some(said(line, &format!("[{section}]"), section, key, &message));
                    }
                }
            }
            _ => {
                let message = alone(value.clone()).err()?;
                let line = line_of(text, "", None, section);
                return Some(said(line, "top level", "", section, &message));
            }
        }
    }
    None
}

fn fits(table: Table) -> Result<(), String> {
    Value::Table(table)
        .try_into::<RawConfig>()
        .map(|_| ())
        .map_err(|e| e.message().to_string())
}

/// The location and the message, with a fix where one is known.
fn said(line: usize, label: &str, section: &str, key: &str, message: &str) -> (String, String) {
    let location = format!("line {line}: {label}");
    // The unknown key may sit one table down (`on = { tagz = [...] }`): serde names it.
    let inner = message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next())
        .filter(|k| *k != key);
    let text = if let Some(inner) = inner {
        let mut m = format!("`{key}`: unknown key `{inner}`");
        if let Some(k) = closest(inner, &listed(message)) {
            m.push_str(&format!("; did you mean `{k}`?"));
        }
        m
    } else if message.starts_with("unknown field") {
        let mut m = format!("unknown key `{key}`");
        let known = known_keys(section, message);
        match closest(key, &known) {
            Some(k) => m.push_str(&format!("; did you mean `{k}`?")),
            None if !known.is_empty() => {
                m.push_str(&format!("; the keys here are: {}", known.join(", ")))
            }
            None => {}
        }
        m
    } else if message.contains("expected a string") && !message.contains("string \"") {
        format!(
            "`{key}`: {message}; write it in quotes{}",
            if DURATION_KEYS.iter().any(|d| key.ends_with(d)) {
                format!(", with a unit: {key} = \"30s\" (ms, s, m, h, d)")
            } else {
                String::new()
            }
        )
    } else {
        format!("`{key}`: {message}")
    };
    (location, text)
}

/// Keys whose value is a duration written as a string (`"30s"`).
const DURATION_KEYS: &[&str] = &[
    "timeout",
    "grace",
    "deadline",
    "backoff",
    "backoff_max",
    "jitter",
    "lease",
    "alert_after",
    "interval",
    "give_up_after",
    "within",
];

/// A `[[job]]`'s own keys; the policy keys it shares with `[defaults]` are asked of serde.
const JOB_KEYS: &[&str] = &[
    "name",
    "schedule",
    "command",
    "argv",
    "http",
    "env",
    "workdir",
    "enabled",
    "pool",
    "user",
    "group",
    "env_file",
    "inherit_env",
    "limits",
    "on",
    "run_on",
    "after",
];

/// The valid keys of `section`: from serde's message ("expected one of `a`, `b`"), or for a
/// job (whose message has no list, as its policy keys are a flattened table) its own keys and
/// those of `[defaults]`.
fn known_keys(section: &str, message: &str) -> Vec<String> {
    let mut keys = listed(message);
    if keys.is_empty() && section == "job" {
        let mut probe = Table::new();
        let mut one = Table::new();
        one.insert("\u{1}".into(), Value::Integer(0));
        probe.insert("defaults".into(), Value::Table(one));
        if let Err(m) = fits(probe) {
            keys = listed(&m);
        }
        keys.extend(JOB_KEYS.iter().map(|k| k.to_string()));
        keys.sort();
    }
    keys
}

/// The names in backquotes after "expected one of" (or "expected"), as serde lists them.
fn listed(message: &str) -> Vec<String> {
    let Some((_, tail)) = message.split_once("expected") else {
        return vec![];
    };
    tail.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The known key nearest to `key`, when it is near enough to be a typo.
fn closest(key: &str, known: &[String]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// The line of `key` in the `index`th `[[section]]` (or in `[section]`; top level for ""),
/// or of the table's header when the key is not found on a line of its own.
fn line_of(text: &str, section: &str, index: Option<usize>, key: &str) -> usize {
    let mut seen = 0usize;
    let mut inside = section.is_empty();
    let mut header = 1;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            let name = line.trim_start_matches('[');
            let name = name.split(']').next().unwrap_or("").trim();
            inside = false;
            if name == section {
                if line.starts_with("[[") {
                    seen += 1;
                    inside = index.is_none_or(|i| seen == i + 1);
                } else {
                    inside = index.is_none();
                }
                if inside {
                    header = n + 1;
                }
            }
            continue;
        }
        if inside {
            let rest = line
                .strip_prefix(key)
                .or_else(|| line.strip_prefix(&format!("\"{key}\"")));
            if rest.is_some_and(|r| r.trim_start().starts_with('=')) {
                return n + 1;
            }
        }
    }
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "[database]\nurl = \"sqlite:///x.db\"\n\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n\n[[job]]\nname = \"c\"\nschedule = \"@daily\"\ncommand = \"true\"\n\nretires = 2\n";

    #[test]
    fn an_unknown_key_is_named_with_its_job_line_and_the_closest_key() {
        let (location, message) = locate(FILE).unwrap();
        assert_eq!(location, "line 14: job \"c\"");
        assert_eq!(message, "unknown key `retires`; did you mean `retries`?");
    }

    #[test]
    fn a_duration_written_as_a_number_says_how_to_write_it() {
        let text = FILE.replace("retires = 2", "timeout = 30");
        let (location, message) = locate(&text).unwrap();
        assert_eq!(location, "line 14: job \"c\"");
        assert!(message.starts_with("`timeout`: invalid type: integer `30`, expected a string; write it in quotes, with a unit: timeout = \"30s\""), "{message}");
    }

    #[test]
    fn a_sections_key_is_named_with_the_section() {
        let text = "[daemon]\nlease = \"30s\"\npoll_intervall = \"1s\"\n";
        let (location, message) = locate(text).unwrap();
        assert_eq!(location, "line 3: [daemon]");
        assert_eq!(
            message,
            "unknown key `poll_intervall`; did you mean `poll_interval`?"
        );
        assert!(locate("[daemon]\nlease = \"30s\"\n").is_none());
    }

    #[test]
    fn a_key_one_table_down_is_named_inside_its_key() {
        let text = FILE.replace("retires = 2", "on = { tagz = [\"gpu\"] }");
        let (location, message) = locate(&text).unwrap();
        assert_eq!(location, "line 14: job \"c\"");
        assert!(message.starts_with("`on`: unknown key `tagz`"), "{message}");
    }
}
