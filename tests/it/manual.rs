//! Issue 54: the manual (docs/, an mdBook) holds together. Its table of every configuration key
//! agrees with the parser's own definitions, both ways; every internal link and anchor of the
//! README and the book leads somewhere (a design note the book includes is checked where the
//! book shows it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A struct's fields as the source declares them: (TOML name, type, flattened).
type Fields = Vec<(String, String, bool)>;

/// Every `pub struct NAME { ... }` of `text` with its fields, renames and flattening applied.
fn structs(text: &str, into: &mut BTreeMap<String, Fields>) {
    let mut current: Option<(String, Fields)> = None;
    let (mut rename, mut flatten) = (None::<String>, false);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("pub struct ") {
            if let Some(name) = rest.strip_suffix(" {") {
                current = Some((name.trim().to_string(), Vec::new()));
                (rename, flatten) = (None, false);
            }
            continue;
        }
        let Some((_, fields)) = current.as_mut() else {
            continue;
        };
        let trimmed = line.trim();
        if line == "}" {
            let (name, fields) = current.take().unwrap();
            into.insert(name, fields);
            continue;
        }
        if trimmed.starts_with("#[serde(") {
            if let Some(at) = trimmed.find("rename = \"") {
                let rest = &trimmed[at + "rename = \"".len()..];
                rename = Some(rest[..rest.find('"').unwrap()].to_string());
            }
            flatten |= trimmed.contains("flatten");
            continue;
        }
        if let Some(field) = trimmed.strip_prefix("pub ")
            && let Some((name, ty)) = field.split_once(": ")
        {
            let name = rename.take().unwrap_or_else(|| name.to_string());
            fields.push((name, ty.trim_end_matches(',').to_string(), flatten));
            flatten = false;
        }
    }
}

/// The struct a type names when it is one of the configuration's `Raw*` structs.
fn raw_struct<'a>(ty: &str, known: &'a BTreeMap<String, Fields>) -> Option<&'a str> {
    let last = ty.rsplit("::").next()?.trim_end_matches('>');
    known
        .get_key_value(last)
        .filter(|(k, _)| k.starts_with("Raw"))
        .map(|(k, _)| k.as_str())
}

/// (table, key) pairs the parser accepts, walking from `RawConfig`.
fn parser_keys() -> BTreeSet<(String, String)> {
    let mut known = BTreeMap::new();
    for file in [
        "src/config/raw.rs",
        "src/config/web.rs",
        "src/config/security.rs",
        "src/config/calendars.rs",
        "src/config/cluster.rs",
        "src/model/policy_keys.rs",
    ] {
        structs(
            &std::fs::read_to_string(root().join(file)).unwrap(),
            &mut known,
        );
    }
    let mut keys = BTreeSet::new();
    let mut pending = vec![("RawConfig".to_string(), String::new())];
    while let Some((name, table)) = pending.pop() {
        let fields = known.get(&name).unwrap_or_else(|| panic!("struct {name}"));
        for (field, ty, flatten) in fields {
            let inner = |wrapper: &str| {
                ty.strip_prefix(wrapper)
                    .and_then(|t| t.strip_suffix('>'))
                    .map(str::to_string)
            };
            if *flatten {
                let s = raw_struct(ty, &known).expect("a flattened Raw struct");
                pending.push((s.to_string(), table.clone()));
            } else if let Some(s) = inner("Vec<").and_then(|t| raw_struct(&t, &known)) {
                pending.push((s.to_string(), format!("[[{field}]]")));
            } else if let Some(value) = inner("BTreeMap<String, ")
                && let Some(s) = raw_struct(&value, &known)
            {
                let parent = table.trim_matches(['[', ']']);
                pending.push((s.to_string(), format!("[{parent}.{field}.NAME]")));
            } else if let Some(s) = raw_struct(ty, &known) {
                pending.push((s.to_string(), format!("[{field}]")));
            } else if table.is_empty() && ty.starts_with("BTreeMap<String, ") {
                keys.insert((format!("[{field}]"), "NAME".to_string()));
            } else {
                assert!(!table.is_empty(), "a key at the top of the file: {field}");
                keys.insert((table.clone(), field.clone()));
            }
        }
    }
    keys
}

fn documented_keys() -> BTreeSet<(String, String)> {
    sqlcron::cli::man_pages::documented_keys()
        .into_iter()
        .flat_map(|row| row.tables.into_iter().map(move |t| (t, row.key.clone())))
        .collect()
}

#[test]
fn every_key_the_parser_accepts_is_documented_and_no_documented_key_is_refused() {
    let parser = parser_keys();
    let docs = documented_keys();
    assert!(parser.len() > 80, "the walk found only {parser:?}");
    let undocumented: Vec<_> = parser.difference(&docs).collect();
    let unknown: Vec<_> = docs.difference(&parser).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/src/reference/keys.md and the parser disagree.\n\
         accepted but not documented: {undocumented:?}\n\
         documented but refused: {unknown:?}"
    );
}

/// A documented key is accepted by `sqlcron check` itself (not refused as unknown), whatever
/// its value's type: the parser's answer, not the source's reading.
#[test]
fn sqlcron_check_knows_every_documented_key() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |text: &str| {
        let file = dir.path().join("c.toml");
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new(crate::util::sqlcron_bin())
            .args(["check", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // What a refusal looks like (the check below could fail).
    assert!(refused("[daemon]\nno_such_key = \"x\"\n").contains("unknown key"));
    for (table, key) in documented_keys() {
        let (header, key) = match (table.as_str(), key.as_str()) {
            ("[[job]]", k) => (
                "[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n".to_string(),
                k,
            ),
            ("[[calendar]]", k) => ("[[calendar]]\nname = \"c\"\n".to_string(), k),
            (t, k) => (format!("{}\n", t.replace("NAME", "p")), k),
        };
        let key = if key == "NAME" { "p" } else { key };
        if header.contains(&format!("\n{key} =")) {
            continue;
        }
        let text = refused(&format!("{header}{key} = \"x\"\n"));
        assert!(
            !text.contains("unknown key"),
            "{table} {key} is documented but sqlcron check refuses it: {text}"
        );
    }
}

/// GitHub's and mdBook's anchor of a heading.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading.trim();
    // A link in a heading counts by its text.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let close = rest[open..].find("](").map(|c| open + c);
        let end = close.and_then(|c| rest[c..].find(')').map(|e| c + e));
        match (close, end) {
            (Some(c), Some(e)) => {
                text.push_str(&rest[open + 1..c]);
                rest = &rest[e + 1..];
            }
            _ => {
                text.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The file a page's text comes from: itself, or the design note it only includes.
fn source_of(page: &Path) -> PathBuf {
    let text = std::fs::read_to_string(page).unwrap();
    match text
        .trim()
        .strip_prefix("{{#include ")
        .and_then(|t| t.strip_suffix("}}"))
    {
        Some(included) => normalize(&page.parent().unwrap().join(included)),
        None => page.to_path_buf(),
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The lines of `text` outside fenced code blocks, with inline code removed, numbered from 1.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        out.push((n + 1, kept));
    }
    out
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(source_of(page)).unwrap();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// `](target)` links of a line.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    out
}

/// Every page of the book (`docs/src`), sorted; with `with_design_notes` false, not the pages
/// that include the design notes.
pub(crate) fn book_pages_of(with_design_notes: bool) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    let mut dirs = vec![root().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && (with_design_notes || !path.ends_with("design")) {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

fn book_pages() -> Vec<PathBuf> {
    book_pages_of(true)
}

/// Broken links of `page` (shown as `shown_as` in messages).
fn broken_links(page: &Path) -> Vec<String> {
    let book = root().join("docs/src");
    let in_book = page.starts_with(&book);
    let text = std::fs::read_to_string(source_of(page)).unwrap();
    let name = page.strip_prefix(root()).unwrap().display().to_string();
    let mut broken = Vec::new();
    for (n, line) in prose(&text) {
        for target in links(&line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                normalize(&page.parent().unwrap().join(path))
            };
            if in_book && !file.starts_with(&book) {
                broken.push(format!("{name}:{n}: {target}: outside the book"));
            } else if !file.exists() {
                broken.push(format!("{name}:{n}: {target}: no such file"));
            } else if !fragment.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&file).contains(fragment)
            {
                broken.push(format!("{name}:{n}: {target}: no such heading"));
            }
        }
    }
    broken
}

#[test]
fn every_internal_link_and_anchor_of_the_readme_and_the_book_leads_somewhere() {
    let mut pages = book_pages();
    pages.push(root().join("README.md"));
    let broken: Vec<String> = pages.iter().flat_map(|p| broken_links(p)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // Every page of the book is in its summary, and every summary entry is a page.
    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = summary.lines().flat_map(links).collect();
    for page in book_pages() {
        let rel = page
            .strip_prefix(root().join("docs/src"))
            .unwrap()
            .display()
            .to_string();
        if rel != "SUMMARY.md" {
            assert!(listed.contains(&rel), "{rel} is not in docs/src/SUMMARY.md");
        }
    }
}

/// The link check sees a broken link and a missing heading (it could fail).
#[test]
fn the_link_check_finds_a_broken_link_and_a_missing_heading() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("p.md");
    std::fs::write(
        &page,
        "# Title\n\n[a](p.md#title) [b](nothing.md) [c](p.md#no-such) `[d](skip.md)`\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&page).unwrap();
    let mut found = Vec::new();
    for (_, line) in prose(&text) {
        for target in links(&line) {
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = normalize(&dir.path().join(path));
            if !file.exists() || (!fragment.is_empty() && !anchors(&file).contains(fragment)) {
                found.push(target);
            }
        }
    }
    assert_eq!(found, ["nothing.md", "p.md#no-such"]);
    assert_eq!(
        slug(" Locks, semaphores and pools"),
        "locks-semaphores-and-pools"
    );
    assert_eq!(slug(" `[daemon]` keys"), "daemon-keys");
}

/// Every column of `cron_table`, as each database has it after the migrations, is in the
/// manual's table of columns (docs/src/reference/cron-table.md).
async fn every_column_of_cron_table_is_documented(dialect: sqlcron::store::Dialect) {
    use sqlcron::store::Dialect;
    let db = crate::util::TestDb::new(dialect).await;
    let store = db.store().await;
    let sql = match dialect {
        Dialect::Sqlite => "SELECT name FROM pragma_table_info('cron_table')",
        Dialect::Postgres => {
            "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = 'cron_table'"
        }
        Dialect::Mysql => {
            "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = 'cron_table'"
        }
    };
    let columns: Vec<String> = store.scalars(sql).await.unwrap();
    assert!(columns.len() > 40, "{columns:?}");
    let page = std::fs::read_to_string(root().join("docs/src/reference/cron-table.md")).unwrap();
    let missing: Vec<&String> = columns
        .iter()
        .filter(|c| !page.contains(&format!("`{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "{dialect:?}: columns of cron_table not in docs/src/reference/cron-table.md: {missing:?}"
    );
    store.close().await;
}

for_each_dialect!(every_column_of_cron_table_is_documented);
