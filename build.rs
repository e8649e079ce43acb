// The migrations are embedded at compile time (`sqlx::migrate!`): rebuild when they change.
// `sqlcron --version` names the git commit the binary was built from ("unknown" outside git,
// e.g. from a source tarball); SQLCRON_GIT_COMMIT set in the environment wins.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=SQLCRON_GIT_COMMIT");
    let commit = std::env::var("SQLCRON_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    // Rebuild when HEAD moves: HEAD itself (a branch switch) and the branch it points at (a commit).
    // In a worktree these live in different git directories; `--git-path` resolves both.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            // A path that does not exist would rerun this script on every build.
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rustc-env=SQLCRON_GIT_COMMIT={commit}");
}
