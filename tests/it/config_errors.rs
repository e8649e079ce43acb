//! Issue 51, point 11: `sqlcron check` names the line of the key, the job, the key and a fix.
//! Before: `line 14: unknown field retires` (the job's header line, no job, no hint) and
//! `expected a string` for `timeout = 30`.

use crate::util::{sqlcron, stderr};

#[test]
fn check_names_the_line_job_key_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    let file = |last: &str| {
        format!(
            "[database]\nurl = \"sqlite://{}/x.db\"\n[daemon]\n{}\n\n\
             [[job]]\nname = \"a\"\nschedule = \"@daily\"\ncommand = \"true\"\n\n\
             [[job]]\nname = \"c\"\nschedule = \"@daily\"\ncommand = \"true\"\n{last}\n",
            dir.path().display(),
            crate::util::default_user()
        )
    };
    for (last, want) in [
        (
            "retires = 2",
            "job \"c\": unknown key `retires`; did you mean `retries`?",
        ),
        (
            "timeout = 30",
            "job \"c\": `timeout`: invalid type: integer `30`, expected a string; write it in quotes, with a unit: timeout = \"30s\"",
        ),
    ] {
        let text = file(last);
        std::fs::write(&cfg, &text).unwrap();
        let line = text.lines().position(|l| l == last).unwrap() + 1;
        let want = format!("c.toml: line {line}: {want}");
        let out = sqlcron(&["--config", cfg.to_str().unwrap(), "check"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(&want), "{last}: {}", stderr(&out));
    }
}
