//! Reads of `cron_runs` that one value a writer put there cannot stop: text that is not UTF-8
//! (SQLite keeps any bytes, MariaDB accepts encoded surrogates) failed the whole read in the
//! driver, and with it the alert scan, the chains, `history` and the dashboard's runs for every
//! job. Such a read is made again with the text as bytes, shown with replacement characters;
//! a row whose numbers cannot be read is left out with a warning.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::claim::AnyQuery;

use super::*;

/// The text columns of `cron_runs`; every other column a read names is a number.
const RUN_TEXT_COLUMNS: [&str; 5] = ["job_name", "node", "outcome", "output", "message"];

impl Store {
    /// The rows of `cron_runs` that `sql` reads (its select list written `{cols}`, filled with
    /// `cols`, a list of column names and `NULL AS x`), `bind` binding its values; each decoded
    /// with `decode`, a row it cannot decode left out with a warning.
    pub(super) async fn read_runs<T>(
        &self,
        op: &'static str,
        cols: &str,
        sql: &str,
        bind: impl Fn(AnyQuery) -> AnyQuery,
        decode: impl Fn(&AnyRow) -> std::result::Result<T, sqlx::Error>,
    ) -> Result<Vec<T>> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                op,
                |bytes| {
                    let cols = match bytes {
                        true => run_columns_as_bytes(self.dialect, cols),
                        false => cols.to_string(),
                    };
                    self.dialect.render(&sql.replace("{cols}", &cols))
                },
                bind,
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                decode(r)
                    .inspect_err(|e| {
                        let id = r.try_get::<i64, _>("id").ok();
                        if let Some(held) = super::say_again(&format!("{op}: {id:?}: {e}")) {
                            tracing::warn!(statement = op, run = ?id, error = %e, held_back = held, "a cron_runs row that cannot be read; left out");
                        }
                    })
                    .ok()
            })
            .collect())
    }
}

/// The outcome given a run record whose numbers cannot be read, which a scan pages past: no
/// alert and no chained run is made for it.
pub const UNREADABLE: &str = "unreadable";

/// [`UNREADABLE`], with a warning naming the record.
pub(super) fn unreadable(id: i64) -> String {
    if let Some(held) = super::say_again(&format!("run numbers: {id}")) {
        tracing::warn!(
            run = id,
            held_back = held,
            "a cron_runs row whose numbers cannot be read; passed over"
        );
    }
    UNREADABLE.to_string()
}

/// Numbers of a row as read, `None` for one that cannot be; `unreadable` when any could not.
pub(super) struct LenientNumbers<const N: usize> {
    pub values: [Option<i64>; N],
    pub unreadable: bool,
}

/// `columns` of `r` read as [`LenientNumbers`].
pub(super) fn lenient_numbers<const N: usize>(r: &AnyRow, columns: [&str; N]) -> LenientNumbers<N> {
    let read = columns.map(|c| r.try_get::<Option<i64>, _>(c));
    LenientNumbers {
        unreadable: read.iter().any(|v| v.is_err()),
        values: read.map(|v| v.ok().flatten()),
    }
}

/// `cols` of `cron_runs` with its text columns as bytes and its numbers as
/// `dialect::select_list` reads them; an expression (`NULL AS output`) as it is.
fn run_columns_as_bytes(d: Dialect, cols: &str) -> String {
    let (mut text, mut numbers, mut kept) = (vec![], vec![], vec![]);
    for c in cols.split(',').map(str::trim) {
        if c.contains(' ') {
            kept.push(c);
        } else if RUN_TEXT_COLUMNS.contains(&c) {
            text.push(c);
        } else {
            numbers.push(c);
        }
    }
    let mut list = dialect::select_list(d, &text, &numbers, true);
    for c in kept {
        list.push_str(", ");
        list.push_str(c);
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_of_runs_as_bytes_casts_the_text_and_keeps_expressions() {
        let cols = "id, job_name, slot, NULL AS output, message";
        assert_eq!(
            run_columns_as_bytes(Dialect::Mysql, cols),
            "CAST(job_name AS BINARY) AS job_name, CAST(message AS BINARY) AS message, id, slot, \
             NULL AS output"
        );
        assert!(run_columns_as_bytes(Dialect::Sqlite, cols).contains(
            "CASE WHEN typeof(slot) = 'text' THEN CAST(slot AS BLOB) ELSE slot END AS slot"
        ));
        assert_eq!(
            run_columns_as_bytes(Dialect::Postgres, cols),
            "job_name, message, id, slot, NULL AS output"
        );
    }
}
