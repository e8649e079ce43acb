//! `sqlcron next`: output format, defaults and exit codes.

use crate::util::{sqlcron, stderr, stdout};

#[test]
fn prints_count_fire_times_with_zone_offset() {
    let out = sqlcron(&[
        "next",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-03-28T12:00:00+01:00",
        "--count",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2026-03-29T03:00:00+02:00\n2026-03-30T02:30:00+02:00\n2026-03-31T02:30:00+02:00\n"
    );
}

#[test]
fn defaults_are_utc_now_and_five() {
    let out = sqlcron(&["next", "@hourly"]);
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<_> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 5);
    let now = chrono::Utc::now();
    let mut previous = now;
    for line in &lines {
        assert!(line.ends_with(":00:00+00:00"), "{line}");
        let t = chrono::DateTime::parse_from_rfc3339(line).unwrap();
        assert!(t > previous, "{line} not after {previous}");
        previous = t.into();
    }
    assert!(previous - now <= chrono::Duration::hours(5));
}

#[test]
fn invalid_expression_exits_2_with_nothing_on_stdout() {
    let out = sqlcron(&["next", "60 * * * *"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out).trim(),
        "sqlcron: minute field: 60 is out of range 0-59 in \"60 * * * *\""
    );
}

#[test]
fn unknown_zone_and_bad_after_exit_2() {
    let out = sqlcron(&["next", "* * * * *", "--tz", "Mars/Olympus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown time zone \"Mars/Olympus\""));
    assert_eq!(stdout(&out), "");

    let out = sqlcron(&["next", "* * * * *", "--after", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--after: \"yesterday\" is not an RFC 3339 timestamp"));
    assert_eq!(stdout(&out), "");
}

#[test]
fn bad_usage_exits_2() {
    let out = sqlcron(&["next"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
}

/// Issue 25 (21): output into a pipe that closes early (`| head`) ends the command quietly, as
/// for any Unix tool: no panic, nothing on stderr.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .args(["next", "* * * * * *", "--count", "1000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(err, "", "stderr after the pipe closed");
    assert!(
        status.success() || status.signal() == Some(libc::SIGPIPE),
        "{status:?}"
    );
}

#[test]
fn calendars_of_the_configuration_file_skip_and_defer_fire_times() {
    let dir = tempfile::tempdir().unwrap();
    let ics = dir.path().join("holidays-de.ics");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/holidays-de-2026.ics"
        ),
        &ics,
    )
    .unwrap();
    let config = dir.path().join("sqlcron.toml");
    std::fs::write(
        &config,
        format!(
            "[[calendar]]\nname = \"holidays-de\"\nics_file = \"{}\"\ntimezone = \"Europe/Berlin\"\n\
             [[calendar]]\nname = \"window\"\nentries = [\"weekly Sat 02:00-04:00 Maintenance\"]\n",
            ics.display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let out = sqlcron(&[
        "--config",
        c,
        "next",
        "0 6 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-12-23T12:00:00+01:00",
        "--count",
        "2",
        "--skip-on",
        "holidays-de",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2026-12-24T06:00:00+01:00\n2026-12-27T06:00:00+01:00\n"
    );
    assert!(
        stderr(&out).contains(
            "2026-12-25T06:00:00+01:00: calendar: 2026-12-25 is 1. Weihnachtstag in holidays-de"
        ),
        "{}",
        stderr(&out)
    );
    // Outside the Saturday window, deferred: Friday's 06:00 and Saturday's 01:00 run once at
    // 02:00 on Saturday (2026-11-28).
    let out = sqlcron(&[
        "--config",
        c,
        "next",
        "0 6 * * *",
        "--after",
        "2026-11-26T12:00:00Z",
        "--count",
        "2",
        "--only-in",
        "window",
        "--defer",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "2026-11-28T02:00:00+00:00\n2026-12-05T02:00:00+00:00\n"
    );
    assert!(
        stderr(&out).contains("deferred: outside window"),
        "{}",
        stderr(&out)
    );
    let out = sqlcron(&["--config", c, "next", "@daily", "--skip-on", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("calendar \"nope\" is not defined"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_refuses_a_job_its_calendars_never_let_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sqlcron.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"sqlite://{}/db.sqlite\"\n[daemon]\ndefault_user = \"nobody\"\n\
             [[calendar]]\nname = \"always\"\nentries = [\"weekly Mon-Sun 00:00-24:00\"]\n\
             [[calendar]]\nname = \"xmas\"\nentries = [\"yearly 12-25 Christmas Day\"]\n\
             [[job]]\nname = \"never\"\nschedule = \"*/5 * * * *\"\ncommand = \"true\"\nskip_on = [\"always\"]\n\
             [[job]]\nname = \"on-xmas\"\nschedule = \"0 9 * * *\"\ncommand = \"true\"\nonly_in = [\"xmas\"]\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = sqlcron(&["--config", config.to_str().unwrap(), "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("job \"never\" skip_on/only_in: its calendars")
            && err.contains("next 10 years"),
        "{err}"
    );
    assert!(!err.contains("on-xmas"), "{err}");
}
