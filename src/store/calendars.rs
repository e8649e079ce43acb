//! `cron_calendars`: the named calendars every node reads, written from the TOML's
//! `[[calendar]]` tables at start and reload, or with SQL.

use sqlx::{AssertSqlSafe, Row};

use super::{Actor, Dialect, Result, Store, StoreError, dialect, text_column};

/// One row of `cron_calendars`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarRow {
    pub name: String,
    /// One entry per line.
    pub entries: String,
    /// Written by an apply of the TOML (else made with SQL).
    pub from_toml: bool,
}

/// What an apply of the calendars changed, by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CalendarReport {
    pub written: Vec<String>,
    pub removed: Vec<String>,
}

/// A calendar as read, or `None` for one whose name or entries are not UTF-8 (written with
/// SQL on SQLite or MariaDB): left out with a warning, as a calendar that does not exist.
fn calendar_row(r: &sqlx::any::AnyRow) -> Option<CalendarRow> {
    let name = text_column(r, "name");
    match (
        &name,
        text_column(r, "entries"),
        r.try_get::<i64, _>("from_toml"),
    ) {
        (Ok(Some(name)), Ok(Some(entries)), Ok(from_toml)) => Some(CalendarRow {
            name: name.clone(),
            entries,
            from_toml: from_toml != 0,
        }),
        _ => {
            // With replacements where the name is not UTF-8: each such calendar its own warning.
            let name = match name {
                Ok(Some(name)) => name,
                _ => super::text_lossy(r, "name")
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| "?".into()),
            };
            if let Some(held) = super::say_again(&format!("calendar: {name}")) {
                tracing::warn!(calendar = %name, held_back = held, "a calendar that cannot be read (text that is not UTF-8); left out");
            }
            None
        }
    }
}

/// The columns of a calendar read, as text or (`bytes`) as bytes. SQLite keeps a name written
/// as a blob or a number as such, and no `name = ?` (the apply's fenced writes, a job's look
/// for its calendar) ever matches it: such a row is read with no name, so left out as one that
/// cannot be read (the apply's write of the TOML's calendar of that name is then an insert).
fn calendar_columns(dialect: Dialect, bytes: bool) -> String {
    let rest = dialect::select_list(dialect, &["entries"], &["from_toml"], bytes);
    let name = match (dialect, bytes) {
        (Dialect::Sqlite, false) => "CASE WHEN typeof(name) = 'text' THEN name END AS name".into(),
        (Dialect::Sqlite, true) => {
            "CASE WHEN typeof(name) = 'text' THEN CAST(name AS BLOB) END AS name".into()
        }
        _ => dialect::select_list(dialect, &["name"], &[], bytes),
    };
    format!("{name}, {rest}")
}

impl Store {
    /// Every calendar, by name.
    pub async fn calendars(&self) -> Result<Vec<CalendarRow>> {
        Ok(self.read_calendars().await?.0)
    }

    /// Every calendar that can be read, and the names of those whose name can be read but
    /// whose entries cannot (the apply writes such a calendar of the TOML anew).
    async fn read_calendars(&self) -> Result<(Vec<CalendarRow>, Vec<String>)> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read calendars",
                |bytes| {
                    let cols = calendar_columns(self.dialect, bytes);
                    format!("SELECT {cols} FROM cron_calendars ORDER BY cron_calendars.name")
                },
                |q| q,
            )
            .await?;
        let unreadable = rows
            .iter()
            .filter(|r| calendar_row(r).is_none())
            .filter_map(|r| text_column(r, "name").ok().flatten())
            .collect();
        Ok((rows.iter().filter_map(calendar_row).collect(), unreadable))
    }

    /// The calendars named (those that exist).
    pub async fn calendars_named(&self, names: &[String]) -> Result<Vec<CalendarRow>> {
        if names.is_empty() {
            return Ok(vec![]);
        }
        let marks = vec!["?"; names.len()].join(", ");
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read calendars",
                |bytes| {
                    let cols = calendar_columns(self.dialect, bytes);
                    self.dialect.render(&format!(
                        "SELECT {cols} FROM cron_calendars WHERE name IN ({marks})"
                    ))
                },
                |q| names.iter().fold(q, |q, n| q.bind(n.clone())),
            )
            .await?;
        Ok(rows.iter().filter_map(calendar_row).collect())
    }

    /// Writes the TOML's calendars `(name, entries)`, in one transaction: those whose entries
    /// differ are written, those an earlier apply wrote and the TOML no longer defines are
    /// removed; calendars made with SQL under other names are left alone. Each write is vouched
    /// for (the audit triggers leave it to sqlcron) and audited as `calendar_write` or
    /// `calendar_remove` with `actor`.
    ///
    /// Nodes starting together apply the same calendars at once: an apply that lost the race
    /// (see [`StoreError::lost_a_race`]) is read and made again, as the jobs' apply is.
    pub async fn apply_calendars(
        &self,
        defs: &[(String, String)],
        actor: &Actor,
    ) -> Result<CalendarReport> {
        super::again_after_a_lost_race("the calendars", || self.apply_calendars_once(defs, actor))
            .await
    }

    async fn apply_calendars_once(
        &self,
        defs: &[(String, String)],
        actor: &Actor,
    ) -> Result<CalendarReport> {
        let (stored, unreadable) = self.read_calendars().await?;
        let mut report = CalendarReport::default();
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        // Twins given a file's name: not removed below as rows the file no longer defines (the
        // database takes the old name for the new one, and would remove the row just renamed).
        let mut renamed = vec![];
        for (name, entries) in defs {
            let found = stored.iter().find(|r| &r.name == name);
            let mut twin = None;
            // An update only of the row as read: another node applying the same file at the
            // same time wrote it first, and this apply is made again from a fresh read (one
            // write and one audit row per change, however many nodes apply it).
            let text = match found {
                Some(r) if &r.entries == entries && r.from_toml => continue,
                Some(_) => {
                    "UPDATE cron_calendars SET entries = ?, from_toml = 1, changed_by = ? \
                     WHERE name = ? AND entries = ? AND from_toml = ?"
                }
                // Stored with entries that cannot be read (written with SQL): written anew,
                // with no fence on what could not be read.
                None if unreadable.contains(name) => {
                    "UPDATE cron_calendars SET entries = ?, from_toml = 1, changed_by = ? \
                     WHERE name = ?"
                }
                None => {
                    // MySQL compares names without trailing spaces: beside a row `holidays `
                    // made with SQL, the insert failed on the key at every try, and no node
                    // could start (and the jobs, which look a calendar up by its exact name,
                    // found none). That row is given the file's name and entries, as a row of
                    // the same name made with SQL is.
                    twin = self.name_twin(&mut tx, "cron_calendars", name).await?;
                    match &twin {
                        Some(t) => {
                            tracing::warn!(calendar = %name, row = %t, "a calendar made with SQL under a name the database takes for this one's: given this name and the file's entries");
                            "UPDATE cron_calendars SET entries = ?, from_toml = 1, changed_by = ?, \
                             name = ? WHERE name = ?"
                        }
                        None => {
                            "INSERT INTO cron_calendars (entries, from_toml, changed_by, name) \
                             VALUES (?, 1, ?, ?)"
                        }
                    }
                }
            };
            let mark = self.mark(&mut tx, actor, "calendar_write", None).await?;
            let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(text)))
                .bind(entries.clone())
                .bind(mark.clone())
                .bind(name.clone());
            if let Some(r) = found {
                q = q.bind(r.entries.clone()).bind(i64::from(r.from_toml));
            }
            if let Some(t) = twin {
                q = q.bind(t.clone());
                renamed.push(t);
            }
            let done = q
                .execute(&mut *tx)
                .await
                .map_err(sql_err!(self, "write calendar"))?;
            if done.rows_affected() == 0 {
                return Err(StoreError::Raced(format!(
                    "calendar \"{name}\" changed while this apply read it"
                )));
            }
            self.audited(&mut tx, actor, &mark, "calendar_write", name, None)
                .await?;
            report.written.push(name.clone());
        }
        for gone in stored
            .iter()
            .filter(|r| r.from_toml && !defs.iter().any(|(n, _)| *n == r.name))
            .filter(|r| !renamed.contains(&r.name))
        {
            // Marked first, so that the delete trigger knows it is not a plain SQL one.
            let marker = self.mark_removal(&mut tx, actor, "calendar_remove").await?;
            sqlx::query(AssertSqlSafe(self.dialect.render(
                "UPDATE cron_calendars SET changed_by = ? WHERE name = ? AND from_toml = 1",
            )))
            .bind(marker.clone())
            .bind(gone.name.clone())
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "mark calendar for removal"))?;
            let done = sqlx::query(AssertSqlSafe(
                self.dialect
                    .render("DELETE FROM cron_calendars WHERE name = ? AND from_toml = 1"),
            ))
            .bind(gone.name.clone())
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "remove calendar"))?;
            if done.rows_affected() == 0 {
                // Removed by another node applying the same file meanwhile.
                return Err(StoreError::Raced(format!(
                    "calendar \"{}\" was removed while this apply read it",
                    gone.name
                )));
            }
            self.audited(&mut tx, actor, &marker, "calendar_remove", &gone.name, None)
                .await?;
            report.removed.push(gone.name.clone());
        }
        tx.commit()
            .await
            .map_err(sql_err!(self, "commit calendars"))?;
        Ok(report)
    }
}
