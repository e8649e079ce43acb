//! What the dashboard's job editor may change in a row of `cron_table`, how a form becomes a
//! row, and what differs from the row as it was. The row it makes is checked by the same
//! decoding a node applies before running it (`row_decode::resolve`).

use std::collections::BTreeMap;

use super::job_row::JobRow;

/// The columns the editor writes, with their labels, in the form's order. Everything else in
/// the row (env, placement, limits, hooks...) is kept as it is; SQL or TOML sets those.
pub const EDITABLE: [(&str, &str); 12] = [
    ("schedule", "Schedule"),
    ("timezone", "Time zone"),
    ("command", "Command"),
    ("run_user", "Run as"),
    ("workdir", "Working directory"),
    ("pool", "Pool"),
    ("timeout", "Timeout"),
    ("retries", "Retries"),
    ("misfire", "Misfire"),
    ("starting_deadline", "Starting deadline"),
    ("max_catch_up", "Max catch-up"),
    ("overlap", "Overlap"),
];

/// The longest value a field takes (a command line included).
pub const FIELD_MAX: usize = 4096;

/// A column's value in `row` (None: NULL).
pub fn value(row: &JobRow, column: &str) -> Option<String> {
    match column {
        "schedule" => Some(row.schedule.clone()),
        "timezone" => row.timezone.clone(),
        "command" => row.command.clone(),
        "run_user" => row.run_user.clone(),
        "workdir" => row.workdir.clone(),
        "pool" => row.pool.clone(),
        c => row.policy.get(c).cloned().flatten(),
    }
}

/// `row` with the form's values: a field left empty is NULL (the node's default), a value is
/// trimmed of surrounding blanks; fields the form lacks keep the row's value. Refuses a value
/// over [`FIELD_MAX`] characters or with a control character other than a tab (a command is
/// one line: the editor is not where multi-line scripts are written).
pub fn apply(row: &JobRow, form: &BTreeMap<String, String>) -> Result<JobRow, String> {
    let mut new = row.clone();
    for (column, label) in EDITABLE {
        let Some(v) = form.get(column) else { continue };
        if v.chars().count() > FIELD_MAX {
            return Err(format!("{label}: at most {FIELD_MAX} characters"));
        }
        if v.chars().any(|c| c.is_control() && c != '\t') {
            return Err(format!("{label}: one line, no control characters"));
        }
        let v = Some(v.trim().to_string()).filter(|v| !v.is_empty());
        match column {
            "schedule" => new.schedule = v.unwrap_or_default(),
            "timezone" => new.timezone = v,
            "command" => new.command = v,
            "run_user" => new.run_user = v,
            "workdir" => new.workdir = v,
            "pool" => new.pool = v,
            c => {
                let key = super::job_row::POLICY_COLUMNS
                    .iter()
                    .find(|k| **k == c)
                    .expect("an editable policy column is a policy column");
                new.policy.insert(key, v);
            }
        }
    }
    Ok(new)
}

/// The editable columns whose values differ: (column, before, after).
pub fn diff(old: &JobRow, new: &JobRow) -> Vec<(&'static str, Option<String>, Option<String>)> {
    EDITABLE
        .iter()
        .filter_map(|(c, _)| {
            let (a, b) = (value(old, c), value(new, c));
            (a != b).then_some((*c, a, b))
        })
        .collect()
}

/// A fingerprint of the row's whole definition as read (every signed column, the editable ones
/// among them, every policy column, and its source, template and signature), carried by the
/// confirmation form: the save happens only if the row still has it, so a column the editor
/// does not show (env, argv) changed in between is not saved under the operator's name.
pub fn fingerprint(row: &JobRow) -> String {
    let values: Vec<Option<String>> = EDITABLE.iter().map(|(c, _)| value(row, c)).collect();
    let text = format!(
        "{}|{:?}|{}|{:?}|{:?}|{:?}",
        serde_json::to_string(&values).unwrap_or_default(),
        row.definition(),
        row.source,
        row.template,
        row.signature,
        // Every policy column (retry_backoff, kill_grace, on_lease_lost...): a backfill copies
        // them all.
        row.policy
    );
    // SHA-256, its first 128 bits: the editor who may change the row also chooses the row the
    // operator reviews, so two rows with one fingerprint must not be within reach (a 64-bit
    // FNV hash let them be made for each other).
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> JobRow {
        let mut r = JobRow::blank("backup");
        r.schedule = "@daily".into();
        r.command = Some("tar c /srv".into());
        r
    }

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_form_changes_only_what_it_names_and_empty_is_the_default() {
        let old = row();
        let new = apply(
            &old,
            &form(&[
                ("schedule", " 0 3 * * * "),
                ("retries", "2"),
                ("command", "tar c /srv"),
            ]),
        )
        .unwrap();
        assert_eq!(new.schedule, "0 3 * * *");
        assert_eq!(value(&new, "retries").as_deref(), Some("2"));
        assert_eq!(
            diff(&old, &new),
            vec![
                ("schedule", Some("@daily".into()), Some("0 3 * * *".into())),
                ("retries", None, Some("2".into())),
            ]
        );
        let cleared = apply(&new, &form(&[("retries", "  ")])).unwrap();
        assert_eq!(value(&cleared, "retries"), None);
        assert_ne!(fingerprint(&old), fingerprint(&new));
        assert_eq!(fingerprint(&old), fingerprint(&row()));
    }

    #[test]
    fn control_characters_and_huge_values_are_refused() {
        let old = row();
        assert!(
            apply(&old, &form(&[("command", "a\nb")]))
                .unwrap_err()
                .contains("one line")
        );
        assert!(apply(&old, &form(&[("command", "\u{1b}[2J")])).is_err());
        let huge = "x".repeat(FIELD_MAX + 1);
        assert!(
            apply(&old, &form(&[("command", &huge)]))
                .unwrap_err()
                .contains("at most")
        );
    }
}
