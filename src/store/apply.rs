//! Writing the TOML's jobs to `cron_table`: create, update, remove; rows created with SQL are
//! never touched.

use std::collections::BTreeMap;

use sqlx::{AssertSqlSafe, Row};

use super::*;
use crate::job::JobSpec;

impl Store {
    /// Applies the TOML's jobs: creates and updates `source = 'toml'` rows, removes TOML rows no
    /// longer in the file, and never touches rows created with SQL. With `dry_run`, only reports.
    pub async fn apply_toml(&self, jobs: &[JobSpec], dry_run: bool) -> Result<ApplyReport> {
        let existing = sqlx::query("SELECT name, source, toml_hash FROM cron_table")
            .fetch_all(&self.pool)
            .await
            .map_err(sql_err!(self, "read jobs for apply"))?;
        let mut rows: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
        for r in &existing {
            let name: String = r.try_get("name").map_err(sql_err!(self, "apply"))?;
            let source: String = r.try_get("source").map_err(sql_err!(self, "apply"))?;
            let hash: Option<String> = r.try_get("toml_hash").map_err(sql_err!(self, "apply"))?;
            rows.insert(name, (source, hash));
        }
        let mut report = ApplyReport::default();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(sql_err!(self, "begin apply"))?;
        for job in jobs {
            let hash = job_hash(job);
            let values = job_values(job);
            match rows.get(&job.name) {
                Some((source, _)) if source != "toml" => report.conflicts.push(job.name.clone()),
                Some((_, Some(h))) if *h == hash => {}
                Some(_) => {
                    report.updated.push(job.name.clone());
                    if !dry_run {
                        // `enabled` changes only when the TOML's own value changed: a pause made
                        // with `sqlcron pause` (or SQL) survives an update of the job.
                        let sets = JOB_VALUE_COLUMNS
                            .iter()
                            .map(|c| match *c {
                                "enabled" => "enabled = CASE WHEN toml_enabled IS NULL \
                                     OR toml_enabled <> ? THEN ? ELSE enabled END"
                                    .to_string(),
                                c => format!("{c} = ?"),
                            })
                            .collect::<Vec<_>>()
                            .join(", ");
                        let text = self.dialect.render(&format!(
                            "UPDATE cron_table SET {sets}, toml_enabled = ?, toml_hash = ? \
                             WHERE name = ? AND source = 'toml'"
                        ));
                        let mut q = sqlx::query(AssertSqlSafe(text));
                        for (c, v) in JOB_VALUE_COLUMNS.iter().zip(&values) {
                            if *c == "enabled" {
                                q = bind_value(q, v);
                            }
                            q = bind_value(q, v);
                        }
                        q.bind(i64::from(job.enabled))
                            .bind(hash)
                            .bind(job.name.clone())
                            .execute(&mut *tx)
                            .await
                            .map_err(sql_err!(self, "update TOML job"))?;
                    }
                }
                None => {
                    report.created.push(job.name.clone());
                    if !dry_run {
                        let cols = JOB_VALUE_COLUMNS.join(", ");
                        let marks = vec!["?"; JOB_VALUE_COLUMNS.len()].join(", ");
                        let text = self.dialect.render(&format!(
                            "INSERT INTO cron_table (name, {cols}, source, toml_enabled, toml_hash) \
                             VALUES (?, {marks}, 'toml', ?, ?)"
                        ));
                        let mut q = sqlx::query(AssertSqlSafe(text)).bind(job.name.clone());
                        for v in &values {
                            q = bind_value(q, v);
                        }
                        q.bind(i64::from(job.enabled))
                            .bind(hash)
                            .execute(&mut *tx)
                            .await
                            .map_err(sql_err!(self, "create TOML job"))?;
                    }
                }
            }
        }
        let wanted: std::collections::HashSet<&str> =
            jobs.iter().map(|j| j.name.as_str()).collect();
        for (name, (source, _)) in &rows {
            if source == "toml" && !wanted.contains(name.as_str()) {
                report.removed.push(name.clone());
                if !dry_run {
                    sqlx::query(AssertSqlSafe(self.dialect.render(
                        "DELETE FROM cron_table WHERE name = ? AND source = 'toml'",
                    )))
                    .bind(name.clone())
                    .execute(&mut *tx)
                    .await
                    .map_err(sql_err!(self, "remove TOML job"))?;
                }
            }
        }
        tx.commit().await.map_err(sql_err!(self, "commit apply"))?;
        Ok(report)
    }
}

/// Columns a TOML apply writes (after `name`).
const JOB_VALUE_COLUMNS: [&str; 20] = [
    "schedule",
    "timezone",
    "command",
    "argv",
    "env",
    "workdir",
    "enabled",
    "pool",
    "misfire",
    "starting_deadline",
    "max_catch_up",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "kill_grace",
    "jitter",
    "on_lease_lost",
    "rerun_lost",
    "error",
];

enum Value {
    Text(Option<String>),
    Int(Option<i64>),
}

fn bind_value<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    v: &Value,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    match v {
        Value::Text(t) => q.bind(t.clone()),
        Value::Int(i) => q.bind(*i),
    }
}

fn job_values(job: &JobSpec) -> Vec<Value> {
    use crate::job::format_duration as fd;
    let o = &job.overrides;
    let env = (!job.env.is_empty()).then(|| serde_json::to_string(&job.env).unwrap_or_default());
    vec![
        Value::Text(Some(job.schedule.clone())),
        Value::Text(job.timezone.clone()),
        Value::Text(job.command.clone()),
        Value::Text(
            job.argv
                .as_ref()
                .map(|a| serde_json::to_string(a).unwrap_or_default()),
        ),
        Value::Text(env),
        Value::Text(job.workdir.clone()),
        Value::Int(Some(i64::from(job.enabled))),
        Value::Text(job.pool.clone()),
        Value::Text(o.misfire.map(|m| m.as_str().to_string())),
        Value::Text(o.starting_deadline.map(fd)),
        Value::Int(o.max_catch_up.map(i64::from)),
        Value::Int(o.retries.map(i64::from)),
        Value::Text(o.retry_backoff.map(fd)),
        Value::Text(o.retry_backoff_max.map(fd)),
        Value::Text(o.timeout.map(fd)),
        Value::Text(o.kill_grace.map(fd)),
        Value::Text(o.jitter.map(fd)),
        Value::Text(o.on_lease_lost.map(|l| l.as_str().to_string())),
        Value::Int(o.rerun_lost.map(i64::from)),
        Value::Text(None),
    ]
}

/// A stable fingerprint of a TOML job definition (FNV-1a, hex), used to skip unchanged jobs on
/// apply and to detect nodes whose files disagree.
pub fn job_hash(job: &JobSpec) -> String {
    let text = format!("{job:?}");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
