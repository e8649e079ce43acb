//! Writing the TOML's jobs to `cron_table`: create, update, remove; rows created with SQL are
//! never touched.

use std::collections::BTreeMap;

use sqlx::{AssertSqlSafe, Row};

use super::*;
use crate::model::job::JobSpec;

impl Store {
    /// Applies the TOML's jobs: creates and updates `source = 'toml'` rows, removes TOML rows no
    /// longer in the file, and never touches rows created with SQL. With `dry_run`, only reports.
    /// Each change is recorded in the audit trail as `actor`'s, with the columns it changed.
    ///
    /// Idempotent between nodes: nodes that start together apply the same file at once, and all
    /// but one find, at their insert, the job another node created after they read the table (a
    /// unique-key violation, or on Galera a certification conflict reported as a deadlock, which
    /// rolls their apply back). Such an apply is read and made again, and then finds the job
    /// there: the same file is applied once, with no error.
    pub async fn apply_toml(
        &self,
        jobs: &[JobSpec],
        dry_run: bool,
        actor: &Actor,
    ) -> Result<ApplyReport> {
        again_after_a_lost_race("the jobs", || self.apply_toml_once(jobs, dry_run, actor)).await
    }

    async fn apply_toml_once(
        &self,
        jobs: &[JobSpec],
        dry_run: bool,
        actor: &Actor,
    ) -> Result<ApplyReport> {
        // A row holding text that is not UTF-8 is read as bytes (`read_rows_text_or_bytes`): a TOML
        // job's bad value is drift the apply restores; a name that is not UTF-8 is no TOML
        // job's.
        let columns = || ["name", "source", "toml_hash", "changed_by"].into_iter();
        let (existing, _) = self
            .read_rows_text_or_bytes(
                "read jobs for apply",
                |bytes| {
                    let columns = columns().chain(JOB_VALUE_COLUMNS);
                    let list = if bytes {
                        dialect::as_bytes(self.dialect, columns)
                    } else {
                        columns.collect::<Vec<_>>().join(", ")
                    };
                    format!("SELECT {list} FROM cron_table")
                },
                |q| q,
            )
            .await?;
        let mut rows: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
        let mut stored: BTreeMap<String, &sqlx::any::AnyRow> = BTreeMap::new();
        for r in &existing {
            let Ok(Some(name)) = text_column(r, "name") else {
                continue;
            };
            // A source, hash or writer's mark that cannot be read makes the row no TOML job's:
            // the apply leaves it alone and reports it (its update, fenced by the hash and the
            // mark as read, could never match).
            let (source, hash) = match (
                text_column(r, "source"),
                text_column(r, "toml_hash"),
                text_column(r, "changed_by"),
            ) {
                (Ok(source), Ok(hash), Ok(_)) => (source.unwrap_or_default(), hash),
                _ => (String::new(), None),
            };
            stored.insert(name.clone(), r);
            rows.insert(name, (source, hash));
        }
        let mut report = ApplyReport::default();
        let mut tx = self
            .begin_write()
            .await
            .map_err(sql_err!(self, "begin apply"))?;
        // The removals first: a job the file renames only in case (`Backup` to `backup`) is, on
        // MySQL, the old row's twin until that row is gone (see `name_twin`).
        let wanted: std::collections::HashSet<&str> =
            jobs.iter().map(|j| j.name.as_str()).collect();
        for (name, (source, _)) in &rows {
            if source == "toml" && !wanted.contains(name.as_str()) {
                report.removed.push(name.clone());
                if !dry_run {
                    // Marked first, so that the delete trigger knows it is not a plain SQL one.
                    let marker = self.mark_removal(&mut tx, actor, "apply_remove").await?;
                    sqlx::query(AssertSqlSafe(self.dialect.render(
                        "UPDATE cron_table SET changed_by = ? WHERE name = ? AND source = 'toml'",
                    )))
                    .bind(marker.clone())
                    .bind(name.clone())
                    .execute(&mut *tx)
                    .await
                    .map_err(sql_err!(self, "mark TOML job for removal"))?;
                    let done = sqlx::query(AssertSqlSafe(
                        self.dialect
                            .render("DELETE FROM cron_table WHERE name = ? AND source = 'toml'"),
                    ))
                    .bind(name.clone())
                    .execute(&mut *tx)
                    .await
                    .map_err(sql_err!(self, "remove TOML job"))?;
                    if done.rows_affected() == 0 {
                        // Removed by another node applying the same file meanwhile.
                        return Err(StoreError::Raced(format!(
                            "job \"{name}\" was removed while this apply read it"
                        )));
                    }
                    self.audited(&mut tx, actor, &marker, "apply_remove", name, None)
                        .await?;
                }
            }
        }
        for job in jobs {
            let hash = job_hash(job);
            let values = job_values(job);
            match rows.get(&job.name) {
                Some((source, _)) if source != "toml" => report.conflicts.push(job.name.clone()),
                Some((_, stored_hash)) => {
                    // The stored hash says what the TOML wrote last; the columns say what the
                    // row holds now. A SQL edit of a TOML job leaves the hash alone: the apply
                    // restores the file's definition and records the drift.
                    let drift = stored
                        .get(&job.name)
                        .map(|r| changed_columns(r, &values))
                        .unwrap_or_default();
                    let same_file = stored_hash.as_deref() == Some(hash.as_str());
                    if same_file && drift.is_empty() {
                        continue;
                    }
                    if same_file {
                        report.restored.push((job.name.clone(), drift.join(",")));
                    } else {
                        report.updated.push(job.name.clone());
                    }
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
                        // Only the row as read: another node applying the same file at the
                        // same time has changed `changed_by` (and `toml_hash`) first, and this
                        // apply is made again from a fresh read, which finds nothing to do
                        // (one update, one audit row, however many nodes apply it).
                        let text = self.dialect.render(&format!(
                            "UPDATE cron_table SET {sets}, toml_enabled = ?, toml_hash = ?, \
                             changed_by = ? WHERE name = ? AND source = 'toml' \
                             AND COALESCE(toml_hash, '') = ? AND COALESCE(changed_by, '') = ?"
                        ));
                        let mut q = sqlx::query(AssertSqlSafe(text));
                        for (c, v) in JOB_VALUE_COLUMNS.iter().zip(&values) {
                            if *c == "enabled" {
                                q = bind_value(q, v);
                            }
                            q = bind_value(q, v);
                        }
                        // The detail is the database's own words for an update, so the
                        // audit triggers take it as is (PostgreSQL 0030, MySQL 0027); the
                        // action says whether the file or the row changed.
                        let detail = format!("changed {}", drift.join(","));
                        let action = if same_file {
                            "apply_restore"
                        } else {
                            "apply_update"
                        };
                        let mark = self.mark(&mut tx, actor, action, Some(&detail)).await?;
                        let read_by: Option<String> = stored
                            .get(&job.name)
                            .and_then(|r| text_column(r, "changed_by").ok())
                            .flatten();
                        let done = q
                            .bind(i64::from(job.enabled))
                            .bind(hash)
                            .bind(mark.clone())
                            .bind(job.name.clone())
                            .bind(stored_hash.clone().unwrap_or_default())
                            .bind(read_by.unwrap_or_default())
                            .execute(&mut *tx)
                            .await
                            .map_err(sql_err!(self, "update TOML job"))?;
                        if done.rows_affected() == 0 {
                            return Err(StoreError::Raced(format!(
                                "job \"{}\" changed while this apply read it",
                                job.name
                            )));
                        }
                        self.audited(&mut tx, actor, &mark, action, &job.name, Some(detail))
                            .await?;
                    }
                }
                None => {
                    // MySQL's unique key on the name is blind to case: an insert beside a row
                    // named `Backup` (made with SQL, or this file's own) failed, and the apply
                    // with it, at every try, so the node never started. Such a job is left
                    // alone and reported, as a job made with SQL under its name is.
                    // (A dry run removed nothing: a twin it would remove is no twin.)
                    let twin = self.name_twin(&mut tx, "cron_table", &job.name).await?;
                    if let Some(twin) = twin.filter(|t| !report.removed.contains(t)) {
                        report.twins.push((job.name.clone(), twin));
                        continue;
                    }
                    report.created.push(job.name.clone());
                    if !dry_run {
                        let cols = JOB_VALUE_COLUMNS.join(", ");
                        let marks = vec!["?"; JOB_VALUE_COLUMNS.len()].join(", ");
                        let text = self.dialect.render(&format!(
                            "INSERT INTO cron_table (name, {cols}, source, toml_enabled, toml_hash, \
                             changed_by) VALUES (?, {marks}, 'toml', ?, ?, ?)"
                        ));
                        let mut q = sqlx::query(AssertSqlSafe(text)).bind(job.name.clone());
                        for v in &values {
                            q = bind_value(q, v);
                        }
                        let mark = self.mark(&mut tx, actor, "apply_create", None).await?;
                        q.bind(i64::from(job.enabled))
                            .bind(hash)
                            .bind(mark.clone())
                            .execute(&mut *tx)
                            .await
                            .map_err(sql_err!(self, "create TOML job"))?;
                        self.audited(&mut tx, actor, &mark, "apply_create", &job.name, None)
                            .await?;
                    }
                }
            }
        }
        tx.commit().await.map_err(sql_err!(self, "commit apply"))?;
        Ok(report)
    }
}

impl Store {
    /// On MySQL and MariaDB, the name of a row of `table` (`cron_table`, `cron_calendars`)
    /// other than `name` that the database takes for `name` (`cron_table`'s collation compares
    /// without case; every collation there, `utf8mb4_bin` too, without trailing spaces); `None`
    /// on the other databases, where a name equals only itself.
    pub(super) async fn name_twin(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        table: &'static str,
        name: &str,
    ) -> Result<Option<String>> {
        if self.dialect != Dialect::Mysql {
            return Ok(None);
        }
        let found: Vec<Vec<u8>> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT CAST(name AS BINARY) FROM {table} WHERE name = ?"
        )))
        .bind(name.to_string())
        .fetch_all(&mut **tx)
        .await
        .map_err(sql_err!(self, "read jobs for apply"))?;
        Ok(found
            .iter()
            .find(|n| n.as_slice() != name.as_bytes())
            .map(|n| String::from_utf8_lossy(n).into_owned()))
    }
}

/// Columns a TOML apply writes (after `name`).
pub(super) const JOB_VALUE_COLUMNS: [&str; 33] = [
    "schedule",
    "timezone",
    "command",
    "argv",
    "http",
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
    "overlap",
    "run_user",
    "run_group",
    "env_file",
    "inherit_env",
    "limits",
    "alerts",
    "placement",
    "run_on",
    "calendars",
    "requires",
    "after_jobs",
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
    use crate::model::duration::format_duration as fd;
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
        Value::Text(
            job.http
                .as_ref()
                .map(crate::model::http_target::HttpTarget::to_json),
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
        Value::Text(o.overlap.map(|m| m.as_str().to_string())),
        Value::Text(job.user.clone()),
        Value::Text(job.group.clone()),
        Value::Text(job.env_file.clone()),
        Value::Text(
            (!job.inherit_env.is_empty())
                .then(|| serde_json::to_string(&job.inherit_env).unwrap_or_default()),
        ),
        Value::Text(
            (!job.limits.is_empty())
                .then(|| serde_json::to_string(&job.limits).unwrap_or_default()),
        ),
        Value::Text(job.alerts.to_json()),
        Value::Text(
            job.placement
                .as_ref()
                .map(crate::model::placement::Placement::to_json),
        ),
        Value::Text(job.every_node.then(|| "every_node".to_string())),
        Value::Text(o.calendars.to_json()),
        Value::Text(
            o.requires
                .as_deref()
                .and_then(crate::model::requires::to_json),
        ),
        Value::Text(crate::model::chains::to_json(&job.after)),
        Value::Text(None),
    ]
}

/// What a signature would cover of the row `apply` writes for `job`: a row written with SQL
/// that claims to be this TOML job is trusted only when it runs exactly this.
pub fn definition_of(job: &JobSpec) -> crate::model::signing::Definition {
    crate::model::signing::Definition::from_columns(
        JOB_VALUE_COLUMNS
            .into_iter()
            .zip(job_values(job))
            .map(|(c, v)| match v {
                Value::Text(t) => (c, t),
                Value::Int(i) => (c, i.map(|i| i.to_string())),
            }),
    )
}

/// The columns whose stored value differs from what the TOML writes (`enabled` left out: an
/// apply keeps a pause).
fn changed_columns(row: &sqlx::any::AnyRow, values: &[Value]) -> Vec<&'static str> {
    JOB_VALUE_COLUMNS
        .iter()
        .zip(values)
        .filter(|(c, v)| {
            **c != "enabled"
                && **c != "error"
                && match v {
                    Value::Text(t) => text_column(row, c).ok().as_ref() != Some(t),
                    Value::Int(i) => row.try_get::<Option<i64>, _>(**c).ok() != Some(*i),
                }
        })
        .map(|(c, _)| *c)
        .collect()
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
