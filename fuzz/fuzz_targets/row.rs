//! Decoding a `cron_table` row written with SQL: any values in the user's columns give a
//! schedule and policy or a message, never a panic. The input is split on NUL bytes into the
//! columns' values; an empty value is NULL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqlcron::store::{JobRow, POLICY_COLUMNS, PoolWait};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut fields = text.split('\0').map(|f| (!f.is_empty()).then(|| f.to_string()));
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
    let _ = sqlcron::daemon::resolve(&row, &sqlcron::model::job::Policy::default());
    // Signed mode: the canonical text of any definition, and any signature column, checked
    // against a key (never valid by chance; never a panic).
    let definition = row.definition();
    let _ = definition.canonical();
    let key = sqlcron::model::signing::SecretKey::from_seed([9; 32]);
    assert!(
        sqlcron::model::signing::verify(&definition, row.signature.as_deref(), &[key.public()])
            .is_err()
            || row.signature.as_deref() == Some(key.sign(&definition).as_str())
    );
    if let Some(limits) = &row.limits
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(limits)
    {
        let _ = sqlcron::model::job::Limits::from_json(&v);
    }
    if let Some(file) = &row.env_file {
        let _ = sqlcron::exec::envfile::parse(file);
    }
});
