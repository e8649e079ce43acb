//! `doctor`'s look at a database server's TLS certificate: offered or not, by whom, until when.

use crate::store::certificate::ServerTls;

use super::doctor::{Finding, Level, bad, ok};

/// A certificate closer to its expiry than this is a warning.
const CERTIFICATE_WARNING_DAYS: i64 = 30;

/// What the server at `host:port` presented, judged at `now` (the database's clock).
pub(super) fn certificate_finding(
    host: &str,
    port: u16,
    probe: Result<ServerTls, String>,
    now: chrono::DateTime<chrono::Utc>,
) -> Finding {
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match probe {
        Err(e) => bad(
            "certificate",
            Level::Warn,
            format!("could not read the TLS certificate: {e}"),
            "check that doctor reaches the server as the daemon does",
        ),
        Ok(ServerTls::NotOffered) if loopback => ok(
            "certificate",
            format!("{host}:{port} offers no TLS (a loopback address)"),
        ),
        Ok(ServerTls::NotOffered) => bad(
            "certificate",
            Level::Warn,
            format!(
                "{host}:{port} offers no TLS: the password and the jobs cross the network in clear text"
            ),
            "turn TLS on at the server and add sslmode=verify-full (PostgreSQL) or ssl-mode=VERIFY_IDENTITY (MySQL) to the URL (docs/databases.md)",
        ),
        Ok(ServerTls::Certificate { subject, not_after }) => {
            let left = not_after - now;
            let when = not_after.format("%Y-%m-%d %H:%M UTC");
            let renew = format!("renew the certificate of {host}:{port} and reload the server");
            if left <= chrono::TimeDelta::zero() {
                bad(
                    "certificate",
                    Level::Error,
                    format!(
                        "{host}:{port} presents {subject}, expired on {when}: verifying connections fail"
                    ),
                    renew,
                )
            } else if left < chrono::TimeDelta::days(CERTIFICATE_WARNING_DAYS) {
                bad(
                    "certificate",
                    Level::Warn,
                    format!(
                        "{host}:{port} presents {subject}, expiring on {when}, in {}",
                        days_and_hours(left)
                    ),
                    renew,
                )
            } else {
                ok(
                    "certificate",
                    format!(
                        "{host}:{port} presents {subject}, valid until {when} ({} days)",
                        left.num_days()
                    ),
                )
            }
        }
    }
}

/// "3 days 4 h", "5 h".
fn days_and_hours(d: chrono::TimeDelta) -> String {
    match (d.num_days(), d.num_hours() % 24) {
        (0, h) => format!("{h} h"),
        (1, h) => format!("1 day {h} h"),
        (n, h) => format!("{n} days {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_certificate_is_judged_by_its_expiry() {
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 12, 0, 0).unwrap();
        let cert = |days: i64| {
            Ok(ServerTls::Certificate {
                subject: "CN=db".into(),
                not_after: now + chrono::TimeDelta::days(days) + chrono::TimeDelta::hours(3),
            })
        };
        let f = certificate_finding("db", 5432, cert(200), now);
        assert_eq!(f.level, Level::Ok);
        assert!(
            f.message
                .contains("valid until 2027-06-13 15:00 UTC (200 days)"),
            "{}",
            f.message
        );
        let f = certificate_finding("db", 5432, cert(10), now);
        assert_eq!(f.level, Level::Warn);
        assert!(f.message.contains("in 10 days 3 h"), "{}", f.message);
        assert!(f.fix.contains("renew"), "{}", f.fix);
        let f = certificate_finding("db", 5432, cert(-2), now);
        assert_eq!(f.level, Level::Error);
        assert!(
            f.message.contains("expired on 2026-11-23 15:00 UTC"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_server_without_tls_is_a_warning_beyond_this_host() {
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 12, 0, 0).unwrap();
        for (host, level) in [
            ("127.0.0.1", Level::Ok),
            ("localhost", Level::Ok),
            ("::1", Level::Ok),
            ("db.example", Level::Warn),
        ] {
            let f = certificate_finding(host, 5432, Ok(ServerTls::NotOffered), now);
            assert_eq!(f.level, level, "{host}: {}", f.message);
        }
        let f = certificate_finding("db", 5432, Err("refused".into()), now);
        assert_eq!(f.level, Level::Warn);
    }
}
