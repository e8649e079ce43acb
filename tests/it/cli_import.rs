//! `sqlcron import crontab`: real crontab files written here (a user crontab, `/etc/crontab`
//! format and a `cron.d` file) become TOML that `sqlcron check` accepts, job for job, with every
//! unsupported line reported by its number.

use sqlcron::config::{Environment, parse};

use crate::util::{sqlcron, stderr, stdout};

#[test]
fn crontab_files_round_trip_into_checked_toml() {
    let me = sqlcron::exec::account::current().unwrap().name;
    let dir = tempfile::tempdir().unwrap();
    let user_tab = dir.path().join("alice.crontab");
    std::fs::write(
        &user_tab,
        "# m h dom mon dow command\n\
         MAILTO=ops@example.com\n\
         PATH=/usr/local/bin:/usr/bin:/bin\n\
         CRON_TZ=Europe/Berlin\n\
         30 2 * * * /usr/local/bin/backup.sh --full >/dev/null 2>&1\n\
         */15 9-17 * * mon-fri cd /srv/app && ./manage.py sync\n\
         0 0 1,15 jan,jul * date +\\%F >> /tmp/dates\n\
         @reboot /usr/bin/start-things\n\
         TZ=UTC\n\
         @weekly /usr/local/bin/backup.sh --verify\n\
         0 12 * * * echo needs stdin % input\n\
         99 * * * * /bin/true\n",
    )
    .unwrap();
    let system_tab = dir.path().join("crontab");
    std::fs::write(
        &system_tab,
        format!(
            "SHELL=/bin/sh\n\
             17 * * * * {me} cd / && run-parts --report /etc/cron.hourly\n\
             25 6 * * * {me} test -x /usr/sbin/anacron || run-parts --report /etc/cron.daily\n"
        ),
    )
    .unwrap();

    let out = sqlcron(&[
        "import",
        "crontab",
        user_tab.to_str().unwrap(),
        "--user",
        &me,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let notes = stderr(&out);
    for line in [
        ":8: left out: @reboot",
        ":11: left out: an unescaped %",
        ":12: left out",
    ] {
        assert!(notes.contains(line), "{line} in {notes}");
    }
    assert!(
        notes.contains("4 job(s) imported, 3 line(s) left out"),
        "{notes}"
    );
    let user_toml = stdout(&out);
    assert!(
        user_toml.contains("# alice.crontab:2: MAILTO=ops@example.com")
            || user_toml.contains("MAILTO=ops@example.com"),
        "{user_toml}"
    );

    let out = sqlcron(&[
        "import",
        "crontab",
        "--system",
        system_tab.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let system_toml = stdout(&out);

    // Both outputs together are a configuration `check` accepts.
    let config = dir.path().join("sqlcron.toml");
    let db = dir.path().join("x.db");
    // The crontabs' jobs run as this user; root must be allowed in so many words.
    let text = format!(
        "[database]\nurl = \"sqlite://{}\"\n[daemon]\nallowed_users = [\"{me}\"]\n{user_toml}\n{}",
        db.display(),
        system_toml.replace("name = \"cron-", "name = \"system-cron-")
    );
    std::fs::write(&config, &text).unwrap();
    let out = sqlcron(&["--config", config.to_str().unwrap(), "check"]);
    assert_eq!(out.status.code(), Some(0), "{}\n{text}", stderr(&out));
    assert!(stdout(&out).contains("ok (6 job(s)"), "{}", stdout(&out));

    let parsed = parse(&text, &config, &Environment::default()).unwrap();
    let job = |name: &str| {
        parsed
            .jobs
            .iter()
            .find(|j| j.name == name)
            .unwrap_or_else(|| panic!("job {name} in {text}"))
    };
    let backup = job("backup");
    assert_eq!(backup.schedule, "30 2 * * *");
    assert_eq!(backup.timezone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(backup.user.as_deref(), Some(me.as_str()));
    assert_eq!(
        backup.command.as_deref(),
        Some("/usr/local/bin/backup.sh --full >/dev/null 2>&1")
    );
    assert_eq!(backup.env["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(job("manage").schedule, "*/15 9-17 * * mon-fri");
    assert_eq!(
        job("date").command.as_deref(),
        Some("date +%F >> /tmp/dates")
    );
    let weekly = job("backup-2");
    assert_eq!(weekly.schedule, "@weekly");
    assert_eq!(weekly.timezone.as_deref(), Some("UTC"));
    let hourly = job("system-cron-hourly");
    assert_eq!(hourly.user.as_deref(), Some(me.as_str()));
    assert_eq!(hourly.env["SHELL"], "/bin/sh");
    assert_eq!(
        job("system-cron-daily").command.as_deref(),
        Some("test -x /usr/sbin/anacron || run-parts --report /etc/cron.daily")
    );
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let out = sqlcron(&["import", "crontab", "/nonexistent/crontab"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent/crontab"),
        "{}",
        stderr(&out)
    );
}
