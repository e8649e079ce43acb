//! Issue 54 (4): every example of the README and the book runs, or says why it cannot. Each
//! `toml`, `sql`, `sh` and `console` block is either
//! - run here: TOML through the configuration parser (what `sqlcron check` reads), SQL on the
//!   three databases after a migration, a `console` block of `sqlcron next` and `sqlcron
//!   import` compared line by line with what the command prints;
//! - run by another test, named before the block as `<!-- run by tests/it/FILE.rs -->`;
//! - or marked `<!-- not run: REASON -->` before the block (a host that cannot exist here, a
//!   command that needs a booted systemd or a package manager, output whose times differ).
//!
//! A renamed key or a changed message then fails the suite instead of the reader.

use std::path::{Path, PathBuf};

use sqlcron::store::{Dialect, Store};

use crate::util::TestDb;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug)]
struct Block {
    /// Where: `docs/src/how-to/install.md:33`.
    at: String,
    lang: String,
    text: String,
    /// The comment before the block: `not run: ...` or `run by ...`.
    marker: Option<String>,
}

/// The README and the book's own pages (the design notes it includes are not examples).
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    pages.extend(crate::manual::book_pages_of(false));
    pages
}

fn blocks_of(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page
        .strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let indent = lines[i].len() - line.len();
        if let Some(lang) = line.strip_prefix("```")
            && !lang.is_empty()
        {
            let marker = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .and_then(|l| l.strip_prefix("<!--"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(|l| l.trim().to_string());
            let start = i;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim_start() != "```" {
                body.push(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
                i += 1;
            }
            blocks.push(Block {
                at: format!("{name}:{}", start + 1),
                lang: lang.trim().to_string(),
                text: body.join("\n") + "\n",
                marker,
            });
        }
        i += 1;
    }
    blocks
}

fn all_blocks() -> Vec<Block> {
    pages()
        .iter()
        .flat_map(|p| blocks_of(p))
        .filter(|b| ["toml", "sql", "sh", "console"].contains(&b.lang.as_str()))
        .collect()
}

/// The command lines of a `console` block with the lines each printed.
fn transcript(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.push((cmd.to_string(), Vec::new()));
        } else if let Some((_, printed)) = out.last_mut() {
            printed.push(line.to_string());
        }
    }
    out
}

fn check_toml(block: &Block) -> Result<(), String> {
    let env = sqlcron::config::Environment::default();
    sqlcron::config::parse(&block.text, Path::new("example.toml"), &env)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A `console` block whose commands are `sqlcron next` or `sqlcron import crontab` of a file the
/// block's page names: each command's output equals the lines shown.
fn check_console(block: &Block) -> Result<(), String> {
    for (cmd, shown) in transcript(&block.text) {
        let words = shell_words(&cmd);
        if words.first().map(String::as_str) != Some("sqlcron") {
            return Err(format!(
                "`{cmd}`: only sqlcron commands run here; mark the block"
            ));
        }
        let out = std::process::Command::new(crate::util::sqlcron_bin())
            .args(&words[1..])
            .env_remove("SQLCRON_CONFIG")
            .output()
            .map_err(|e| e.to_string())?;
        let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        if printed != shown {
            return Err(format!(
                "`{cmd}` printed:\n{}\nthe page shows:\n{}",
                printed.join("\n"),
                shown.join("\n")
            ));
        }
    }
    Ok(())
}

/// Words of a command line as sh splits them (double quotes only, no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

async fn check_sql(block: &Block, dialect: Dialect) -> Result<(), String> {
    let db = TestDb::new(dialect).await;
    let store = Store::connect(&crate::util::db_url(&db.url), 1).unwrap();
    store.migrate().await.map_err(|e| e.to_string())?;
    let text: String = block
        .text
        .lines()
        .map(|l| l.split(" -- ").next().unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    let mut result = Ok(());
    for statement in text.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        let statement = statement.trim_end_matches(';');
        if let Err(e) = store.execute_raw(statement).await {
            result = Err(format!("{dialect:?}: {statement}: {e}"));
            break;
        }
    }
    store.close().await;
    drop(db);
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_of_the_readme_and_the_book_runs_or_says_why_not() {
    let blocks = all_blocks();
    let mut failures = Vec::new();
    let (mut ran, mut by_others, mut not_run) = (0, 0, 0);
    for block in &blocks {
        match block.marker.as_deref() {
            Some(m) if m.starts_with("not run:") => {
                if m.len() < "not run: ".len() + 10 {
                    failures.push(format!("{}: `{m}` gives no reason", block.at));
                }
                not_run += 1;
                continue;
            }
            Some(m) if m.starts_with("run by ") => {
                let file = m["run by ".len()..].trim();
                if !root().join(file).exists() {
                    failures.push(format!("{}: `{m}`: no such test file", block.at));
                }
                by_others += 1;
                continue;
            }
            _ => {}
        }
        let result = match block.lang.as_str() {
            "toml" => check_toml(block),
            "console" => check_console(block),
            "sql" => {
                let mut r = Ok(());
                for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
                    r = check_sql(block, dialect).await;
                    if r.is_err() {
                        break;
                    }
                }
                r
            }
            _ => Err(
                "a shell block runs nowhere here: run it in a test and say so \
                      (<!-- run by tests/it/FILE.rs -->), or say why it cannot run \
                      (<!-- not run: REASON -->)"
                    .to_string(),
            ),
        };
        match result {
            Ok(()) => ran += 1,
            Err(e) => failures.push(format!("{} ({}): {e}", block.at, block.lang)),
        }
    }
    eprintln!(
        "examples: {} blocks: {ran} run here, {by_others} run by other tests, {not_run} not run (each with its reason)",
        blocks.len()
    );
    assert!(
        failures.is_empty(),
        "{} example(s) fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn blocks_and_their_markers_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("p.md");
    std::fs::write(
        &page,
        "x\n\n<!-- not run: a host that cannot exist here -->\n```sh\nssh db.internal\n```\n\n  ```toml\n  a = 1\n  ```\n",
    )
    .unwrap();
    let blocks = blocks_of(&page);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[0].marker.as_deref(),
        Some("not run: a host that cannot exist here")
    );
    assert_eq!(blocks[1].text, "a = 1\n");
    assert_eq!(blocks[1].marker, None);
    assert_eq!(
        shell_words(r#"sqlcron next "30 2 * * *" --tz Europe/Berlin"#),
        ["sqlcron", "next", "30 2 * * *", "--tz", "Europe/Berlin"]
    );
}
