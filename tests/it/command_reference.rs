//! The manual's command reference (docs/src/reference/commands.md) names every command an
//! operator can type and every option of each, as the command line itself defines them.

use clap::CommandFactory;

/// The rows of the reference that are about `sqlcron PATH` (`sqlcron lock` is not `sqlcron
/// locks`).
fn rows_about<'a>(page: &'a str, path: &str) -> Vec<&'a str> {
    let start = format!("`sqlcron {path}");
    page.lines()
        .filter(|l| l.starts_with('|'))
        .filter(|l| {
            l.match_indices(&start).any(|(at, _)| {
                let next = l[at + start.len()..].chars().next();
                matches!(next, Some(' ' | '`'))
            })
        })
        .collect()
}

/// Each visible command (`import crontab` as one), with its visible long options.
fn commands() -> Vec<(String, Vec<String>)> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, Vec<String>)>) {
        let subs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            let flags = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set() && !a.is_global_set())
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .filter(|l| l != "--help" && l != "--version")
                .collect();
            out.push((path.trim().to_string(), flags));
        }
        for s in subs {
            walk(s, &format!("{path} {}", s.get_name()), out);
        }
    }
    let mut out = Vec::new();
    walk(&sqlcron::cli::Cli::command(), "", &mut out);
    out
}

#[test]
fn every_command_and_option_is_in_the_command_reference() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/src/reference/commands.md")).unwrap();
    let all = commands();
    assert!(all.len() > 25, "{all:?}");
    let mut missing = Vec::new();
    for (path, flags) in &all {
        let rows = rows_about(&page, path);
        if rows.is_empty() {
            missing.push(format!("sqlcron {path}"));
            continue;
        }
        for flag in flags {
            if !rows.iter().any(|r| r.contains(flag.as_str())) {
                missing.push(format!("sqlcron {path} {flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/src/reference/commands.md does not name: {missing:?}"
    );
}

#[test]
fn a_row_is_found_by_its_whole_command() {
    let page = "| `sqlcron lock NAME` | a |\n| `sqlcron locks [--json]` | b |\n";
    assert_eq!(rows_about(page, "lock"), ["| `sqlcron lock NAME` | a |"]);
    assert_eq!(rows_about(page, "locks").len(), 1);
    assert!(rows_about(page, "unlock").is_empty());
}
