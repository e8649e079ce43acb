//! What each fuzz target checks, as plain functions of the input bytes: the coverage-guided
//! targets (`fuzz_targets/`, `scripts/fuzz.sh`) and the property tests of the suite
//! (`tests/fuzz_inputs.rs`, random and mutated seed inputs) call the same code. Each target
//! uses one of them: the others are dead code in its binary.
#![allow(dead_code)]

use sqlcron::store::{JobRow, POLICY_COLUMNS, PoolWait};

/// The schedule parser and the next-fire search: any text, in a few zones, never panics, and a
/// fire time found is strictly after the instant asked about.
pub fn schedule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for zone in ["UTC", "Europe/Berlin", "America/St_Johns"] {
        let Ok(schedule) = sqlcron::schedule::Schedule::parse(text, zone) else {
            return;
        };
        // 2026-03-29T00:30:00Z, just before a DST change in Berlin.
        let after = chrono::DateTime::from_timestamp(1_774_744_200, 0).unwrap();
        if let Some(next) = schedule.next_after(after) {
            assert!(
                next > after,
                "{text:?} in {zone}: {next} is not after {after}"
            );
        }
    }
}

/// The configuration parser: any text gives a configuration or an error, never a panic.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = sqlcron::config::Environment::default();
    let _ = sqlcron::config::parse(text, std::path::Path::new("fuzz.toml"), &env);
}

/// Decoding a `cron_table` row written with SQL: any values in the user's columns give a
/// schedule and policy or a message, never a panic. The input is split on NUL bytes into the
/// columns' values; an empty value is NULL.
pub fn row(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut fields = text
        .split('\0')
        .map(|f| (!f.is_empty()).then(|| f.to_string()));
    let mut next = || fields.next().flatten();
    let mut row = JobRow {
        id: 1,
        name: "fuzz".into(),
        schedule: next().unwrap_or_default(),
        timezone: next(),
        command: next(),
        argv: next(),
        env: next(),
        workdir: None,
        enabled: true,
        pool: None,
        run_user: next(),
        run_group: next(),
        env_file: next(),
        inherit_env: next(),
        limits: next(),
        alerts: None,
        placement: None,
        run_on: None,
        template: None,
        http: next(),
        signature: None,
        after: None,
        upstream: None,
        policy: Default::default(),
        source: "sql".into(),
        next_exec: None,
        slot: None,
        attempt: 0,
        exec_by: None,
        prev_exec_by: None,
        lease_until: None,
        token: 0,
        run_now: false,
        dirty: false,
        last_status: None,
        last_exit: None,
        last_start: None,
        last_end: None,
        last_node: None,
        error: None,
        claimed_at: None,
        pool_wait: PoolWait::No,
        decode_error: None,
    };
    for col in POLICY_COLUMNS {
        row.policy.insert(col, next());
    }
    // After the policy columns, so that the seeds written before this column keep their meaning.
    row.alerts = next();
    row.placement = next();
    row.run_on = next();
    row.signature = next();
    row.workdir = next();
    row.after = next();
    row.upstream = next();
    if let Some(up) = row
        .upstream
        .as_deref()
        .and_then(sqlcron::model::chains::Upstream::from_json)
    {
        let _ = up.env();
    }
    let _ = sqlcron::model::row_decode::resolve(&row, &sqlcron::model::job::Policy::default());
    // Signed mode: the canonical text of any definition, and any signature column, checked
    // against a key (never valid by chance; never a panic).
    let definition = row.definition();
    let _ = definition.canonical();
    let key = sqlcron::model::signing::SecretKey::from_seed([9; 32]);
    let verified = sqlcron::model::signing::verify(
        &row.name,
        &definition,
        row.signature.as_deref(),
        &[key.public()],
    );
    assert!(
        verified.is_err()
            || verified
                .is_ok_and(|g| row.signature.as_deref()
                    == Some(key.sign(&row.name, g, &definition).as_str()))
    );
    if let Some(limits) = &row.limits
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(limits)
    {
        let _ = sqlcron::model::job::Limits::from_json(&v);
    }
    if let Some(file) = &row.env_file {
        let _ = sqlcron::exec::envfile::parse(file);
    }
}
