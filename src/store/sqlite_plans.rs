//! SQLite's query planner held to one plan per statement, on every SQLite connection this
//! process opens.
//!
//! By default SQLite plans some statements for the values bound to them: a `LIMIT ?` is
//! compiled in as the number bound, a `LIKE ?` as its pattern, a term `column = ?` is compared
//! with a partial index's `WHERE`. Such a prepared statement is marked expired whenever another
//! value is bound, and is parsed and planned again at its next step. The claim (`... ORDER BY
//! next_exec LIMIT ?`) was parsed again at every call: about 5 % of a SQLite daemon's CPU in a
//! burst (docs/benchmarks.md). With the planner's stability guarantee (`SQLITE_DBCONFIG_ENABLE_QPSG`)
//! a statement is planned once, without looking at its values; the plans of this schema's
//! statements do not depend on them (its partial indexes are on `IS NOT NULL` and on literals,
//! and a `LIKE` on a column without a case-blind index uses no index whichever pattern).
//!
//! sqlx gives no hook with the connection's handle through its `Any` driver, so the setting is
//! made by an automatic extension: SQLite calls it for every connection opened in the process.

use std::ffi::{c_char, c_int};

use libsqlite3_sys as ffi;

/// Registers the setting for every SQLite connection opened after this call (once per process;
/// later calls do nothing).
pub fn hold_plans() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `stable_plans` has the entry point's signature, lives as long as the process
        // and only calls `sqlite3_db_config` on the connection it is given.
        let rc = unsafe { ffi::sqlite3_auto_extension(Some(stable_plans)) };
        if rc != ffi::SQLITE_OK {
            tracing::warn!(
                error = %format!("SQLite result code {rc}"),
                "SQLite's plans cannot be held stable; statements with LIMIT ? are planned again at each call"
            );
        }
    });
}

/// The automatic extension: turns the stability guarantee on for `db`.
unsafe extern "C" fn stable_plans(
    db: *mut ffi::sqlite3,
    _error: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: `db` is the connection SQLite is opening; SQLITE_DBCONFIG_ENABLE_QPSG takes an
    // int (1: on) and an int pointer for the new state, which may be null.
    unsafe {
        ffi::sqlite3_db_config(
            db,
            ffi::SQLITE_DBCONFIG_ENABLE_QPSG,
            1 as c_int,
            std::ptr::null_mut::<c_int>(),
        );
    }
    // A connection is never refused for it: without the setting it only plans more often.
    ffi::SQLITE_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// A raw in-memory connection, opened after `hold_plans`.
    struct Raw(*mut ffi::sqlite3);

    impl Raw {
        fn open() -> Raw {
            hold_plans();
            let mut db = std::ptr::null_mut();
            let name = CString::new(":memory:").unwrap();
            // SAFETY: a valid C string and an out pointer.
            let rc = unsafe { ffi::sqlite3_open(name.as_ptr(), &mut db) };
            assert_eq!(rc, ffi::SQLITE_OK);
            Raw(db)
        }

        fn exec(&self, sql: &str) {
            let sql = CString::new(sql).unwrap();
            // SAFETY: an open connection and a valid C string.
            let rc = unsafe {
                ffi::sqlite3_exec(
                    self.0,
                    sql.as_ptr(),
                    None,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(rc, ffi::SQLITE_OK);
        }
    }

    impl Drop for Raw {
        fn drop(&mut self) {
            // SAFETY: opened by `open`, every statement finalized.
            unsafe { ffi::sqlite3_close(self.0) };
        }
    }

    #[test]
    fn every_new_connection_has_the_guarantee_on() {
        let db = Raw::open();
        let mut on: c_int = -1;
        // SAFETY: -1 reads the setting without changing it into `on`.
        unsafe {
            ffi::sqlite3_db_config(db.0, ffi::SQLITE_DBCONFIG_ENABLE_QPSG, -1 as c_int, &mut on)
        };
        assert_eq!(on, 1);
    }

    #[test]
    fn a_statement_with_limit_is_not_planned_again_for_each_value() {
        let db = Raw::open();
        db.exec(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, due INTEGER, held TEXT); \
             CREATE INDEX t_due ON t (due); CREATE INDEX t_held ON t (id) WHERE held IS NOT NULL; \
             INSERT INTO t (due) VALUES (1), (2), (3), (4);",
        );
        let sql = CString::new(
            "UPDATE t SET held = ? WHERE id IN (SELECT id FROM t WHERE due <= 10 ORDER BY due LIMIT ?) RETURNING id",
        )
        .unwrap();
        let mut stmt = std::ptr::null_mut();
        // SAFETY: an open connection, a valid C string, an out pointer; the statement is
        // finalized below.
        unsafe {
            assert_eq!(
                ffi::sqlite3_prepare_v3(
                    db.0,
                    sql.as_ptr(),
                    -1,
                    ffi::SQLITE_PREPARE_PERSISTENT,
                    &mut stmt,
                    std::ptr::null_mut()
                ),
                ffi::SQLITE_OK
            );
            let mut rows = 0;
            for limit in [1, 2, 1] {
                ffi::sqlite3_reset(stmt);
                ffi::sqlite3_bind_int(stmt, 1, 7);
                ffi::sqlite3_bind_int(stmt, 2, limit);
                while ffi::sqlite3_step(stmt) == ffi::SQLITE_ROW {
                    rows += 1;
                }
            }
            let replanned =
                ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_REPREPARE as c_int, 0);
            ffi::sqlite3_finalize(stmt);
            // The limits were kept (1 + 2 + 1 rows) and the plan made once.
            assert_eq!(rows, 4);
            assert_eq!(replanned, 0);
        }
    }
}
