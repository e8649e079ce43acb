//! The placement values in use (`cron_placements`), as a node reads them to build its claim's
//! filter, and the parking of rows whose value no claim can name (bytes that are not UTF-8).

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// The placement values in use, as [`Store::placement_values`] reads them.
#[derive(Debug, Default)]
pub struct PlacementValues {
    /// The values that are text.
    pub text: Vec<String>,
    /// The values that are not UTF-8 text, as bytes.
    pub unreadable: Vec<Vec<u8>>,
    /// Every row read, a NULL a writer put there too (what the peek counts).
    pub rows: usize,
}

impl Store {
    /// Every placement value in use (`cron_placements`), and apart those that are not UTF-8
    /// (which a writer could insert on SQLite and MariaDB), as bytes: no node can name one in
    /// its claim ([`Store::park_placed_as`] parks their rows), and they must not stop the
    /// others being read.
    pub async fn placement_values(&self) -> Result<PlacementValues> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read placements",
                |bytes| {
                    let col = dialect::columns(self.dialect, &["placement"], bytes);
                    format!("SELECT {col} FROM cron_placements ORDER BY placement")
                },
                |q| q,
            )
            .await?;
        let mut values = PlacementValues {
            rows: rows.len(),
            ..Default::default()
        };
        for r in &rows {
            match text_column(r, "placement") {
                Ok(Some(v)) => values.text.push(v),
                Ok(None) => {}
                Err(_) => {
                    if let Ok(Some(b)) = r.try_get::<Option<Vec<u8>>, _>("placement") {
                        values.unreadable.push(b);
                    }
                }
            }
        }
        Ok(values)
    }

    /// Parks the unclaimed rows that wait for a slot whose placement is `value`, bytes that
    /// are not UTF-8 text: no node can name such a value in its claim, so none would claim the
    /// row and park it as it parks a placement that does not parse; it would wait unseen. A row
    /// still claimed by a node that died is left as it is (parking it would leave that node's
    /// run `running` for good): it shows as held by that node. The number parked.
    pub async fn park_placed_as(&self, value: &[u8], error: &str) -> Result<u64> {
        let same = match self.dialect {
            // The value as text, byte for byte (as the writer cast it).
            Dialect::Sqlite => "placement = CAST(? AS TEXT)",
            // (Under the column's collation, which pads: the rows whose bytes differ only in
            // trailing spaces, whose values the key of `cron_placements` keeps one of, too.)
            Dialect::Mysql => "placement = ?",
            // PostgreSQL keeps no text that is not UTF-8.
            Dialect::Postgres => return Ok(0),
        };
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_table SET error = ?, next_exec = ?, slot = NULL, dirty = 0 \
             WHERE {same} AND exec_by IS NULL AND next_exec IS NOT NULL AND next_exec <> ?"
        ))))
        .bind(error.to_string())
        .bind(PARKED)
        .bind(value.to_vec())
        .bind(PARKED)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "park rows placed as no node can name"))?;
        Ok(done.rows_affected())
    }
}
