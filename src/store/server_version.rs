//! MySQL and MariaDB: the oldest server a node serves on. The claim skips rows another session
//! holds (`FOR UPDATE SKIP LOCKED`, see `dialect.rs`), which MariaDB has from 10.6 and MySQL
//! from 8.0.1; on an older server every claim would fail, so the node refuses to start there
//! and says why (docs/databases.md).

use sqlx::{AnyConnection, Executor, Row};

/// Whether a server that reports `version` (`SELECT VERSION()`) can serve sqlcron: `Err` says
/// why not, and what to do. A version that cannot be read is let through.
pub fn judge(version: &str) -> Result<(), String> {
    // Some proxies put MySQL 5.5's replication prefix before MariaDB's own version.
    let v = version.strip_prefix("5.5.5-").unwrap_or(version);
    let mariadb = v.to_ascii_lowercase().contains("mariadb");
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    let patch = parts.next().flatten().unwrap_or(0);
    let (needs, name) = if mariadb {
        ((10, 6, 0), "MariaDB 10.6")
    } else {
        ((8, 0, 1), "MySQL 8.0.1")
    };
    if (major, minor, patch) >= needs {
        return Ok(());
    }
    Err(format!(
        "the database server is {version}; sqlcron needs {name} or later (its claim skips rows \
         other nodes hold, with FOR UPDATE SKIP LOCKED): upgrade the server"
    ))
}

/// Reads the server's version on `conn` and judges it.
pub async fn check(conn: &mut AnyConnection) -> Result<Result<(), String>, sqlx::Error> {
    let row = conn.fetch_one("SELECT CAST(VERSION() AS CHAR)").await?;
    let version: String = row.try_get(0)?;
    Ok(judge(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_from_10_6_and_mysql_from_8_0_1_serve() {
        for ok in [
            "10.11.19-MariaDB-0+deb12u1",
            "10.6.0-MariaDB",
            "11.4.2-MariaDB-log",
            "5.5.5-10.11.6-MariaDB",
            "8.0.1",
            "8.0.36-0ubuntu0.22.04.1",
            "8.4.0",
            "9.1.0-commercial",
            "8.0.35-27",
        ] {
            assert_eq!(judge(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn older_servers_are_refused_with_the_version_needed() {
        for (old, needs) in [
            ("10.5.23-MariaDB-0+deb11u1", "MariaDB 10.6"),
            ("10.3.39-MariaDB", "MariaDB 10.6"),
            ("5.5.68-MariaDB", "MariaDB 10.6"),
            ("5.7.44-log", "MySQL 8.0.1"),
            ("8.0.0-dmr", "MySQL 8.0.1"),
        ] {
            let why = judge(old).unwrap_err();
            assert!(why.contains(needs), "{old}: {why}");
            assert!(why.contains(old), "{old}: {why}");
        }
    }

    #[test]
    fn a_version_that_cannot_be_read_is_let_through() {
        assert_eq!(judge(""), Ok(()));
        assert_eq!(judge("unknown"), Ok(()));
    }
}
