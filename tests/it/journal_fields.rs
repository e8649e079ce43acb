//! Every field the daemon writes to the journal is in the manual's page of journal fields
//! (docs/src/reference/journal.md): the log calls of `src/` are read, their fields taken, and
//! each must be there as `SQLCRON_<FIELD>`.

use std::collections::BTreeSet;
use std::path::Path;

/// The log macros whose fields reach the journal (`finished!` is the run's end in
/// daemon/claimed.rs, a wrapper of `info!`/`warn!`).
const LOG_CALLS: [&str; 6] = [
    "tracing::info!(",
    "tracing::warn!(",
    "tracing::error!(",
    "tracing::debug!(",
    "tracing::trace!(",
    "finished!(",
];

/// The text between a call's opening parenthesis (at `start`) and its closing one, string
/// literals skipped whole.
fn call_body(text: &str, start: usize) -> &str {
    let bytes = text.as_bytes();
    let (mut depth, mut i, mut in_str) = (1, start, false);
    while depth > 0 && i < bytes.len() {
        match (in_str, bytes[i]) {
            (true, b'\\') => i += 1,
            (true, b'"') => in_str = false,
            (false, b'"') => in_str = true,
            (false, b'(' | b'[' | b'{') => depth += 1,
            (false, b')' | b']' | b'}') => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    &text[start..i.saturating_sub(1)]
}

/// The arguments of a call separated at its top-level commas, up to the message (the first
/// string literal): those are the fields.
fn field_arguments(body: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut in_str) = (Vec::new(), String::new(), 0, false);
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (true, '\\') => {
                cur.push(c);
                cur.extend(chars.next());
                continue;
            }
            (true, '"') => in_str = false,
            (false, '"') => in_str = true,
            (false, '(' | '[' | '{') => depth += 1,
            (false, ')' | ']' | '}') => depth -= 1,
            (false, ',') if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out.into_iter()
        .take_while(|a| !a.starts_with('"'))
        .filter(|a| !a.is_empty() && !a.starts_with("target:") && !a.starts_with("$("))
        .collect()
}

/// The field names of the log calls in `text` (a file's code before its tests): `name = v`,
/// `%name`, `?name` and a bare `name`.
pub(crate) fn logged_fields(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut fields = BTreeSet::new();
    for call in LOG_CALLS {
        for (at, _) in code.match_indices(call) {
            for arg in field_arguments(call_body(code, at + call.len())) {
                let arg = arg.trim_start_matches(['%', '?']);
                let name: String = arg
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                    .collect();
                assert!(!name.is_empty(), "a log field not understood: {arg:?}");
                fields.insert(name);
            }
        }
    }
    fields
}

#[test]
fn the_reader_finds_each_kind_of_field() {
    let text = r#"
        tracing::warn!(job = %row.name, %slot, attempt, ?plan, "took {} (a, b = c)", x);
        tracing::info!(target: "sqlcron::model::job", job = %job, stream, "{text}");
        finished!(job = %row.name, outcome, exit);
        #[cfg(test)]
        tracing::info!(only_in_tests = 1, "x");
    "#;
    let found: Vec<String> = logged_fields(text).into_iter().collect();
    assert_eq!(
        found,
        [
            "attempt", "exit", "job", "outcome", "plan", "slot", "stream"
        ]
    );
}

#[test]
fn every_field_the_daemon_logs_is_in_the_journal_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    crate::architecture::rust_files(root, &root.join("src"), &mut files);
    let mut fields: BTreeSet<String> = BTreeSet::new();
    for file in &files {
        fields.extend(logged_fields(
            &std::fs::read_to_string(root.join(file)).unwrap(),
        ));
    }
    assert!(fields.len() > 40, "{fields:?}");
    let page = std::fs::read_to_string(root.join("docs/src/reference/journal.md")).unwrap();
    let missing: Vec<String> = fields
        .iter()
        .map(|f| format!("SQLCRON_{}", f.to_ascii_uppercase().replace('.', "_")))
        .filter(|f| !page.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "fields the daemon logs that docs/src/reference/journal.md does not name: {missing:?}"
    );
}
