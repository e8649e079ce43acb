//! Host-local jobs (`run_on = "every_node"`): the job's row is a template that no node claims;
//! each matching node keeps its own copy, named `job@node`, pinned to itself by its placement,
//! with its own slots, lease and history. Copies are written here; which ones a node needs is
//! decided by the daemon (`daemon/every_node.rs`).

use sqlx::AssertSqlSafe;

use super::claim::decode_rows;

use super::*;

/// The definition columns a copy takes from its template: what the TOML writes, but for where
/// the job runs (a copy is pinned to its node) and the parked reason.
fn definition() -> impl Iterator<Item = &'static str> {
    super::apply::JOB_VALUE_COLUMNS
        .into_iter()
        .filter(|c| !matches!(*c, "placement" | "run_on" | "error"))
        // The template's signature comes along: a copy is judged by its template, and a new
        // signature unparks the copies as it does the template.
        .chain(["signature"])
}

/// Marks a copy being removed (SQLite's audit trigger then records no `sql_delete`; PostgreSQL's
/// and MySQL's record the claimed `copy_remove`, see `audit.rs`).
const REMOVING: &str = "removing (every_node copy)";

impl Store {
    /// The templates (`run_on = 'every_node'`), by name.
    pub async fn every_node_templates(&self) -> Result<Vec<JobRow>> {
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "read every_node templates",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    format!(
                        "SELECT {cols} FROM cron_table WHERE run_on = 'every_node' \
                         ORDER BY cron_table.name"
                    )
                },
                |q| q,
            )
            .await?;
        Ok(decode_rows(&rows, bytes))
    }

    /// The copies named `names` that exist: one node's own. Each node reads only its own, so
    /// that a fleet's syncs cost the server a row per template and node, not the fleet's
    /// every copy for each node (docs/fleet.md).
    pub async fn copies_named(&self, names: &[String]) -> Result<Vec<JobRow>> {
        if names.is_empty() {
            return Ok(vec![]);
        }
        let marks = vec!["?"; names.len()].join(", ");
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "read every_node copies",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    self.dialect.render(&format!(
                        "SELECT {cols} FROM cron_table WHERE template IS NOT NULL \
                         AND name IN ({marks})"
                    ))
                },
                |q| names.iter().fold(q, |q, n| q.bind(n.clone())),
            )
            .await?;
        Ok(decode_rows(&rows, bytes))
    }

    /// Copies (rows named `TEMPLATE@NODE`) whose template no longer exists, is no longer
    /// `every_node` or has a name with an `@` (written with SQL; such a template gets no
    /// copies), whichever node they belong to: (name, template).
    pub async fn orphan_copies(&self) -> Result<Vec<(String, String)>> {
        // Names compared byte for byte: MySQL's default collation ignores case, and a copy
        // of `Backup` is not a copy of `backup`.
        let same = match self.dialect {
            Dialect::Mysql => "CAST(t.name AS BINARY) = CAST(c.template AS BINARY)",
            _ => "t.name = c.template",
        };
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read every_node copies",
                |bytes| {
                    let cols = dialect::columns(self.dialect, &["c.name", "c.template"], bytes);
                    format!(
                        "SELECT {cols} FROM cron_table c WHERE c.template IS NOT NULL \
                         AND NOT EXISTS (SELECT 1 FROM cron_table t \
                         WHERE {same} AND t.run_on = 'every_node' \
                         AND t.name NOT LIKE '%@%') ORDER BY c.name",
                    )
                },
                |q| q,
            )
            .await?;
        // A row whose name or template cannot be read as text (a blob written with SQL, text
        // that is not UTF-8) is left alone, logged, and does not stop the sync of the others.
        Ok(rows
            .iter()
            .filter_map(
                |r| match (text_column(r, "name"), text_column(r, "template")) {
                    // Only a row named as a copy of its template (`T@NODE`): a job's own row
                    // given a `template` with SQL is not a copy, and is not removed as one.
                    (Ok(Some(name)), Ok(Some(template))) => name
                        .strip_prefix(template.as_str())
                        .is_some_and(|rest| rest.starts_with('@'))
                        .then_some((name, template)),
                    _ => {
                        let row = super::text_lossy(r, "name").ok().flatten();
                        let row = row.unwrap_or_else(|| "?".into());
                        if let Some(held) = super::say_again(&format!("every_node: {row}")) {
                            tracing::error!(
                                row = %row,
                                held_back = held,
                                "cron_table row cannot be read; left alone"
                            );
                        }
                        None
                    }
                },
            )
            .collect())
    }

    /// Creates `copy`, a copy of `template` pinned by `placement`. False when it exists.
    pub async fn create_copy(
        &self,
        template: &str,
        copy: &str,
        placement: &str,
        actor: &Actor,
    ) -> Result<bool> {
        let cols = definition().collect::<Vec<_>>().join(", ");
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "copy_create", None).await?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "INSERT INTO cron_table (name, template, source, placement, changed_by, {cols}) \
             SELECT ?, name, 'copy', ?, ?, {cols} FROM cron_table \
             WHERE name = ? AND run_on = 'every_node'"
        ))))
        .bind(copy.to_string())
        .bind(placement.to_string())
        .bind(mark)
        .bind(template.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "create every_node copy"));
        match done {
            Ok(d) => {
                tx.commit().await.map_err(sql_err!(self, "commit"))?;
                Ok(d.rows_affected() == 1)
            }
            Err(e) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives `copy` its template's current definition (a changed schedule or command then
    /// re-prepares it, as any change does).
    pub async fn update_copy(&self, template: &str, copy: &str, actor: &Actor) -> Result<()> {
        let text = match self.dialect {
            Dialect::Mysql => {
                let sets: Vec<String> = definition().map(|c| format!("c.{c} = t.{c}")).collect();
                format!(
                    "UPDATE cron_table c JOIN cron_table t ON t.name = ? \
                     SET {}, c.changed_by = ? WHERE c.name = ? AND c.template = t.name",
                    sets.join(", ")
                )
            }
            _ => {
                let sets: Vec<String> = definition().map(|c| format!("{c} = t.{c}")).collect();
                format!(
                    "UPDATE cron_table SET {}, changed_by = ? FROM cron_table t \
                     WHERE t.name = ? AND cron_table.name = ? AND cron_table.template = t.name",
                    sets.join(", ")
                )
            }
        };
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "copy_update", None).await?;
        let q = sqlx::query(AssertSqlSafe(self.dialect.render(&text)));
        let q = match self.dialect {
            Dialect::Mysql => q
                .bind(template.to_string())
                .bind(mark)
                .bind(copy.to_string()),
            _ => q
                .bind(mark)
                .bind(template.to_string())
                .bind(copy.to_string()),
        };
        q.execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "update every_node copy"))?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(())
    }

    /// Removes a copy that no run holds now (a held one is removed at a later sync). True when
    /// it was removed.
    pub async fn remove_copy(&self, copy: &str, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        self.claim_change(&mut tx, actor, REMOVING, "copy_remove", None)
            .await?;
        let marked = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET changed_by = ? \
             WHERE name = ? AND template IS NOT NULL AND exec_by IS NULL",
        )))
        .bind(REMOVING)
        .bind(copy.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "mark every_node copy"))?;
        if marked.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(AssertSqlSafe(
            self.dialect
                .render("DELETE FROM cron_table WHERE name = ? AND changed_by = ?"),
        ))
        .bind(copy.to_string())
        .bind(REMOVING)
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "remove every_node copy"))?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }
}
