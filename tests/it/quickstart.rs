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
