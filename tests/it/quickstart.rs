//! Issue 26 (2): the README's quickstart, run exactly as written, as root and as an ordinary
//! user: `hello` must have run `ok`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::util::stderr;

/// The README's quickstart commands: the first `sh` block after `## Quickstart`.
fn quickstart_block() -> String {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Quickstart").expect("a Quickstart section")..];
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + section[start..].find("```").expect("the block's end");
    section[start..end].to_string()
}

/// The output the README shows for the quickstart: the lines of the `console` block after it
/// that are not commands (`$ ...`).
fn shown_output() -> Vec<String> {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Quickstart").expect("a Quickstart section")..];
    let start = section.find("```console\n").expect("a console block") + "```console\n".len();
    let end = start + section[start..].find("```").expect("the block's end");
    section[start..end]
        .lines()
        .filter(|l| !l.starts_with("$ ") && !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// A printed line with what differs from run to run made alike: instants (`T`), durations
/// (`D`, however many units), numbers (`N`), paths (`P`), and the HOST column of node rows.
fn shape(line: &str, node_row: bool) -> String {
    let mut out: Vec<&str> = Vec::new();
    for (i, token) in line.split_whitespace().enumerate() {
        let is_instant =
            token.len() >= 20 && token.as_bytes()[4] == b'-' && token.as_bytes()[10] == b'T';
        let digits = token.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &token[digits.len()..];
        let is_duration = !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && ["ms", "s", "min", "h", "d"].contains(&unit);
        let shaped = if node_row && i == 1 {
            "HOST"
        } else if is_instant {
            "T"
        } else if is_duration {
            "D"
        } else if token.chars().all(|c| c.is_ascii_digit()) {
            "N"
        } else if token.contains('/') && !token.starts_with('*') {
            "P"
        } else {
            token
        };
        if !(shaped == "D" && out.last() == Some(&"D")) {
            out.push(shaped);
        }
    }
    out.join(" ")
}

/// The shapes of `lines`, node rows (those after a `NODE HOST` header) told apart.
fn shapes(lines: &[String]) -> Vec<String> {
    let mut nodes = false;
    lines
        .iter()
        .map(|l| {
            if l.trim().is_empty() || l.starts_with("JOB ") || l.starts_with("RUN ") {
                nodes = false;
            }
            let s = shape(l, nodes && !l.starts_with("NODE "));
            if l.starts_with("NODE ") {
                nodes = true;
            }
            s
        })
        .collect()
}

/// Issue 54 (1): every line the README shows the quickstart printing is printed, in its shape
/// (times, durations, numbers, paths and the host aside).
fn prints_what_the_readme_shows(printed: &str) {
    let printed: Vec<String> = printed.lines().map(str::to_string).collect();
    let printed = shapes(&printed);
    // A job the README shows as not run yet (`- - -`) may have run in the quickstart's 25 s
    // (`rotate-reports`, every quarter hour): its line then shows that run instead.
    let ran = |s: &str, outcome: &str| s.replacen(" - - - ", &format!(" T D ago {outcome} "), 1);
    let missing: Vec<String> = shapes(&shown_output())
        .into_iter()
        .filter(|s| {
            let ran_meanwhile = s.contains(" - - - ")
                && ["ok", "failed"]
                    .iter()
                    .any(|outcome| printed.contains(&ran(s, outcome)));
            !(printed.contains(s) || ran_meanwhile)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the README shows lines the quickstart did not print (in shape):\n{}\nprinted:\n{}",
        missing.join("\n"),
        printed.join("\n")
    );
}

/// The quickstart's 25 s may hold a quarter hour: the README's `rotate-reports` line, never
/// run, is then printed with that run.
#[test]
fn a_job_shown_as_not_run_yet_may_have_run_meanwhile() {
    let shown = shapes(&shown_output());
    let never = shown
        .iter()
        .find(|s| s.starts_with("rotate-reports "))
        .expect("the README shows rotate-reports");
    assert!(never.contains(" - - - "), "{never}");
    prints_what_the_readme_shows(
        &shown_output()
            .iter()
            .map(|l| {
                if l.starts_with("rotate-reports ") {
                    "rotate-reports  2026-12-03T21:15:00Z  14min 49s  2026-12-03T21:00:00.011Z  \
                     10s ago  failed  idle   */15 * * * * (UTC)"
                        .to_string()
                } else {
                    l.clone()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn the_shapes_tell_lines_apart() {
    assert_eq!(
        shape(
            "hello  2026-12-03T21:40:20Z  9s  2026-12-03T21:40:10.013Z  0s ago  ok  idle  */10 * * * * * (UTC)",
            false
        ),
        "hello T D T D ago ok idle */10 * * * * * (UTC)"
    );
    assert_eq!(
        shape(
            "rotate-reports  2026-12-03T21:45:00Z  4min 49s  -  -  -  idle  */15 * * * * (UTC)",
            false
        ),
        shape(
            "rotate-reports  2026-12-03T21:45:00Z  49s  -  -  -  idle  */15 * * * * (UTC)",
            false
        )
    );
    assert_ne!(
        shape(
            "3    hello  2026-12-03T21:40:10Z  1    ok       web-1  2026-12-03T21:40:10.012Z  exit 0",
            false
        ),
        shape(
            "3    hello  2026-12-03T21:40:10Z  1    failed   web-1  2026-12-03T21:40:10.012Z  exit 1",
            false
        )
    );
    assert_eq!(
        shape(
            "web-1  vm  30485  yes  -  0 running  2026-12-03T21:40:05.257Z",
            true
        ),
        "web-1 HOST N yes - N running T"
    );
}

/// A directory anyone may read holding what the quickstart expects of a clone (its `config/`)
/// and `bin/sqlcron`, the binary under test.
fn checkout() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sqlcron-quickstart")
        .tempdir()
        .unwrap();
    let public =
        |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    public(dir.path(), 0o755).unwrap();
    for sub in ["config", "bin"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        public(&dir.path().join(sub), 0o755).unwrap();
    }
    let example = dir.path().join("config/sqlcron.example.toml");
    std::fs::write(&example, include_str!("../../config/sqlcron.example.toml")).unwrap();
    public(&example, 0o644).unwrap();
    let bin = dir.path().join("bin/sqlcron");
    std::fs::copy(env!("CARGO_BIN_EXE_sqlcron"), &bin).unwrap();
    public(&bin, 0o755).unwrap();
    dir
}

/// Runs the block in `dir` with a clean environment, as `user` (through `runuser`) or as the
/// user running the tests; returns its standard output.
fn run(dir: &Path, user: Option<&str>) -> String {
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", dir.display());
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--"]);
            c
        }
        None => Command::new("env"),
    };
    if user.is_some() {
        cmd.arg("env");
    }
    let out = cmd
        .args(["-i", &format!("PATH={path}"), "HOME=/tmp", "LANG=C.UTF-8"])
        .args(["bash", "-e", "-c", &quickstart_block()])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "the quickstart failed ({:?}):\n{text}\n{}",
        out.status,
        stderr(&out)
    );
    let hello_ok = text.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // history: RUN JOB SLOT TRY OUTCOME ...
        f.get(1) == Some(&"hello") && f.get(4) == Some(&"ok")
    });
    assert!(hello_ok, "no ok run of hello:\n{text}\n{}", stderr(&out));
    prints_what_the_readme_shows(&text);
    // Issue 26 (9): `status` tells when next and in how long, when last and how long ago.
    assert!(
        text.lines()
            .any(|l| l.starts_with("JOB ") && l.contains(" LEFT ") && l.contains(" PASSED ")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("hello ") && l.contains(" ago ") && l.contains(" ok ")),
        "{text}"
    );
    text
}

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

#[test]
fn the_quickstart_works_as_root() {
    if !is_root() {
        eprintln!("SKIPPED the_quickstart_works_as_root: the tests do not run as root");
        return;
    }
    let dir = checkout();
    run(dir.path(), None);
}

#[test]
fn the_quickstart_works_as_an_ordinary_user() {
    let dir = checkout();
    if is_root() {
        run(dir.path(), Some("nobody"));
    } else {
        run(dir.path(), None);
    }
}
