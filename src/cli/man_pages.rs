//! `sqlcron man`: the manual pages, made from what they describe so that they cannot drift:
//! `sqlcron(8)` (the program and its daemon, with FILES, ENVIRONMENT and EXIT STATUS) and
//! `sqlcron-COMMAND(1)` for every command from the command line's own definition (clap_mangen),
//! and `sqlcron.toml(5)` from the book's table of every configuration key
//! (docs/src/reference/keys.md, which a test holds to the parser's own keys).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The book's table of every key; `sqlcron.toml(5)` is made of it.
const KEYS: &str = include_str!("../../docs/src/reference/keys.md");

const FILES: &str = "\
.SH FILES
.TP
\\fI/etc/sqlcron/sqlcron.toml\\fR
The configuration (see \\fBsqlcron.toml\\fR(5)); \\fB--config\\fR or \\fB$SQLCRON_CONFIG\\fR name another.
.TP
\\fI/var/lib/sqlcron/sqlcron.db\\fR
The embedded SQLite database when no \\fB[database] url\\fR is set (\\fB$STATE_DIRECTORY/sqlcron.db\\fR under systemd).
.TP
\\fI/usr/lib/systemd/system/sqlcron.service\\fR
The unit; \\fI/usr/share/sqlcron/run-as-users.conf\\fR is the drop-in for a daemon that runs jobs as other users.
";

const ENVIRONMENT: &str = "\
.SH ENVIRONMENT
.TP
\\fBSQLCRON_CONFIG\\fR
The configuration file, when \\fB--config\\fR is not given.
.TP
\\fBSQLCRON_DATABASE_URL\\fR
Overrides \\fB[database] url\\fR. The daemon removes it from its environment at start.
.TP
\\fBSTATE_DIRECTORY\\fR, \\fBCREDENTIALS_DIRECTORY\\fR
Set by systemd: where the SQLite database lives, and where \\fBurl_file\\fR and \\fBpassword_file\\fR are read from when relative.
.TP
\\fBRUST_LOG\\fR
Overrides \\fB[log] level\\fR.
.PP
A job gets a small environment of its own, never the daemon's: \\fBPATH\\fR, \\fBHOME\\fR, \\fBSHELL\\fR, \\fBLOGNAME\\fR, \\fBUSER\\fR, \\fBLANG\\fR, what it asks for, and \\fBSQLCRON_JOB\\fR, \\fBSQLCRON_SLOT\\fR, \\fBSQLCRON_ATTEMPT\\fR, \\fBSQLCRON_NODE\\fR, \\fBSQLCRON_FENCING_TOKEN\\fR and \\fBSQLCRON_RUN_ID\\fR.
";

const EXIT_STATUS: &str = "\
.SH EXIT STATUS
.TP
0
Success.
.TP
1
A runtime failure, such as the database unreachable.
.TP
2
Bad usage or an invalid configuration, or a job name that does not exist.
.TP
3
The database's schema needs a newer sqlcron (the daemon, \\fBmigrate\\fR, \\fBapply\\fR); the unit does not restart on it.
.PP
\\fBdoctor\\fR exits 1 on a warning and 2 on an error; \\fBrun --wait\\fR with the run's own status; \\fBlock\\fR and \\fBsem\\fR with 75 when the lock is busy.
";

/// The command line as the pages describe it: the visible commands, no `help` command.
fn described() -> clap::Command {
    let mut root = super::args::visible_command().disable_help_subcommand(true);
    root.build();
    root
}

/// Every visible command below `root`, at any depth.
fn commands(root: &clap::Command) -> Vec<clap::Command> {
    let mut all = Vec::new();
    let mut pending: Vec<clap::Command> = root.get_subcommands().cloned().collect();
    while let Some(cmd) = pending.pop() {
        if cmd.is_hide_set() {
            continue;
        }
        pending.extend(cmd.get_subcommands().cloned());
        all.push(cmd);
    }
    all
}

/// The page of one command: `sqlcron-daemon(8)`, any other `sqlcron-COMMAND(1)`.
fn command_page(cmd: clap::Command) -> std::io::Result<(String, Vec<u8>)> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let section = if name == "sqlcron-daemon" { "8" } else { "1" };
    let man = clap_mangen::Man::new(cmd).section(section);
    let mut out = Vec::new();
    render(&man, &mut out)?;
    out.extend_from_slice(EXIT_STATUS.as_bytes());
    out.extend_from_slice(see_also(&["sqlcron(8)", "sqlcron.toml(5)"]).as_bytes());
    Ok((man.get_filename(), out))
}

/// `sqlcron(8)`: the program, its commands, FILES, ENVIRONMENT, EXIT STATUS and every other page.
pub(super) fn main_page() -> std::io::Result<Vec<u8>> {
    let root = described();
    let mut names: Vec<String> = commands(&root)
        .iter()
        .map(|c| {
            let name = c.get_display_name().unwrap_or(c.get_name());
            let section = if name == "sqlcron-daemon" { 8 } else { 1 };
            format!("{name}({section})")
        })
        .collect();
    names.sort();
    let man = clap_mangen::Man::new(root).section("8");
    let mut out = Vec::new();
    render(&man, &mut out)?;
    for extra in [FILES, ENVIRONMENT, EXIT_STATUS] {
        out.extend_from_slice(extra.as_bytes());
    }
    let mut see: Vec<&str> = vec!["sqlcron.toml(5)"];
    see.extend(names.iter().map(String::as_str));
    see.push("systemd.service(5)");
    out.extend_from_slice(see_also(&see).as_bytes());
    Ok(out)
}

/// Writes every page into `dir` (created if missing); returns their paths.
pub(super) fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for cmd in commands(&described()) {
        let (file, text) = command_page(cmd)?;
        let path = dir.join(file);
        std::fs::write(&path, text)?;
        written.push(path);
    }
    for (file, text) in [
        ("sqlcron.8", main_page()?),
        ("sqlcron.toml.5", configuration_page().into_bytes()),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

/// A page as clap_mangen renders it, without its version section (the version goes in the
/// title's source line).
fn render(man: &clap_mangen::Man, w: &mut dyn Write) -> std::io::Result<()> {
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    man.render_subcommands_section(w)?;
    Ok(())
}

fn see_also(pages: &[&str]) -> String {
    let refs: Vec<String> = pages
        .iter()
        .map(|p| match p.split_once('(') {
            Some((name, section)) => format!("\\fB{name}\\fR({section}"),
            None => p.to_string(),
        })
        .collect();
    format!(".SH SEE ALSO\n{}\n", refs.join(",\n"))
}

/// One row of the keys table: the key, the tables it may be in, its type, default and meaning.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyRow {
    pub key: String,
    pub tables: Vec<String>,
    pub kind: String,
    pub default: String,
    pub meaning: String,
}

/// The rows of the book's keys table (`| key | in | type | default | meaning |`).
pub fn key_rows(text: &str) -> Vec<KeyRow> {
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let [key, tables, kind, default, meaning] = cells[..] else {
                return None;
            };
            Some(KeyRow {
                key: key.trim_matches('`').to_string(),
                tables: tables
                    .split(", ")
                    .map(|t| t.trim_matches('`').to_string())
                    .collect(),
                kind: kind.to_string(),
                default: default.to_string(),
                meaning: meaning.to_string(),
            })
        })
        .collect()
}

/// The book's keys table as the rows of [`key_rows`].
pub fn documented_keys() -> Vec<KeyRow> {
    key_rows(KEYS)
}

/// Markdown's inline code and links as roff: `x` in bold, links as their text.
fn roff_text(s: &str) -> String {
    let mut out = String::new();
    let mut bold = false;
    for c in s.chars() {
        match c {
            '`' => {
                out.push_str(if bold { "\\fR" } else { "\\fB" });
                bold = !bold;
            }
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            _ => out.push(c),
        }
    }
    if bold {
        out.push_str("\\fR");
    }
    out
}

fn configuration_page() -> String {
    let mut page = format!(
        ".TH SQLCRON.TOML 5 \"\" \"sqlcron {}\"\n\
         .SH NAME\nsqlcron.toml \\- the configuration of sqlcron(8)\n\
         .SH DESCRIPTION\n\
         TOML, read from \\fB--config\\fR, else \\fB$SQLCRON_CONFIG\\fR, else \\fI/etc/sqlcron/sqlcron.toml\\fR. \
         Every key is optional unless marked required. Durations are strings with a unit: \
         \"500ms\", \"30s\", \"5m\", \"1h\", \"90d\". Unknown keys are errors. \
         \\fBsqlcron check\\fR validates a file; a daemon reads it again on SIGHUP.\n",
        env!("CARGO_PKG_VERSION")
    );
    let rows = documented_keys();
    let mut tables: Vec<&str> = Vec::new();
    for row in &rows {
        for t in &row.tables {
            if !tables.contains(&t.as_str()) {
                tables.push(t);
            }
        }
    }
    for table in tables {
        page.push_str(&format!(".SH {}\n", table.replace('-', "\\-")));
        for row in rows.iter().filter(|r| r.tables.iter().any(|t| t == table)) {
            page.push_str(&format!(
                ".TP\n\\fB{}\\fR ({}; default: {})\n{}\n",
                row.key.replace('-', "\\-"),
                roff_text(&row.kind),
                roff_text(&row.default),
                roff_text(&row.meaning)
            ));
        }
    }
    page.push_str(".SH SEE ALSO\n\\fBsqlcron\\fR(8), \\fBsqlcron-check\\fR(1)\n");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_table_is_read_whole() {
        let rows = documented_keys();
        assert!(rows.len() > 80, "{} rows", rows.len());
        let lease = rows.iter().find(|r| r.key == "lease").expect("lease");
        assert_eq!(lease.tables, ["[daemon]"]);
        assert_eq!(lease.default, "`10s`");
        let misfire = rows.iter().find(|r| r.key == "misfire").expect("misfire");
        assert_eq!(misfire.tables, ["[defaults]", "[[job]]"]);
    }

    #[test]
    fn every_page_is_written_with_its_sections() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_all(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for page in [
            "sqlcron.8",
            "sqlcron-daemon.8",
            "sqlcron-status.1",
            "sqlcron-import-crontab.1",
            "sqlcron.toml.5",
        ] {
            assert!(names.contains(&page.to_string()), "{page} in {names:?}");
        }
        let main = std::fs::read_to_string(dir.path().join("sqlcron.8")).unwrap();
        for section in [
            ".SH FILES",
            ".SH ENVIRONMENT",
            ".SH EXIT STATUS",
            "sqlcron\\-status",
        ] {
            assert!(main.contains(section), "{section} in sqlcron(8)");
        }
        let toml = std::fs::read_to_string(dir.path().join("sqlcron.toml.5")).unwrap();
        for row in documented_keys() {
            assert!(
                toml.contains(&format!("\\fB{}\\fR", row.key.replace('-', "\\-"))),
                "{} in sqlcron.toml(5)",
                row.key
            );
        }
    }
}
