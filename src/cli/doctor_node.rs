//! `doctor`'s look at this node itself: whether its daemon runs, and what answers on its
//! `[metrics] listen` address. Every other check can pass on a host whose daemon crashed or was
//! stopped while the cluster's other nodes run.

use crate::store::NodeRow;

use super::doctor::{Finding, Level, bad, ok};

/// This node (`name`) among the nodes the database knows, judged at `now` (its clock).
pub(super) fn this_node(nodes: &[NodeRow], name: &str, now: i64) -> Finding {
    let Some(node) = nodes.iter().find(|n| n.name == name) else {
        // An operator's machine with the cluster's configuration runs no daemon: a warning.
        return bad(
            "this node",
            Level::Warn,
            format!("no daemon has run as \"{name}\" on this database"),
            "on a host that should run jobs: systemctl enable --now sqlcron",
        );
    };
    let ago = |at: Option<i64>| {
        at.map_or_else(
            || "at an unknown time".to_string(),
            |t| {
                let secs = ((now - t).max(0) / 1000) as u64;
                format!(
                    "{} ago",
                    crate::model::duration::format_duration(std::time::Duration::from_secs(secs))
                )
            },
        )
    };
    if !node.alive(now) {
        let how = match node.stopped {
            Some(at) => format!("was stopped {}", ago(Some(at))),
            None => format!(
                "is not running (last seen {}; not stopped cleanly: killed, crashed or cut off from the database)",
                ago(node.last_seen)
            ),
        };
        return bad(
            "this node",
            Level::Error,
            format!("this node's daemon (\"{name}\") {how}: it runs none of its jobs"),
            "systemctl status sqlcron; journalctl -u sqlcron; systemctl start sqlcron",
        );
    }
    if node.drain {
        return bad(
            "this node",
            Level::Warn,
            format!("\"{name}\" is drained: it claims no new run"),
            format!("sqlcron undrain {name}, once its maintenance is over"),
        );
    }
    ok(
        "this node",
        format!("\"{name}\" runs (pid {})", node.pid.unwrap_or(0)),
    )
}

/// `[metrics] listen`: free, or served by a running sqlcron.
pub(super) async fn listener(config: &crate::config::Config) -> Finding {
    let Some(addr) = config.metrics_listen else {
        return ok("metrics", "[metrics] listen not set");
    };
    if std::net::TcpListener::bind(addr).is_ok() {
        return ok("metrics", format!("{addr} is free"));
    }
    let served = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.ok()?;
        let mut answer = vec![0u8; 512];
        let n = s.read(&mut answer).await.ok()?;
        Some(String::from_utf8_lossy(&answer[..n]).to_string())
    })
    .await
    .ok()
    .flatten();
    // The status code itself: a body that says "for 200s" is no 200.
    let status = served
        .as_deref()
        .filter(|a| a.starts_with("HTTP/1"))
        .and_then(|a| a.split_whitespace().nth(1));
    match status {
        Some("200") => ok(
            "metrics",
            format!("{addr} answers /healthz (a running daemon)"),
        ),
        Some("503") => bad(
            "metrics",
            Level::Error,
            format!(
                "{addr}: the daemon answers /healthz unhealthy: {}",
                super::terminal::shown(
                    served
                        .as_deref()
                        .and_then(|a| a.split("\r\n\r\n").nth(1))
                        .and_then(|b| b.lines().next())
                        .unwrap_or("")
                )
            ),
            "journalctl -u sqlcron (the reason is in its log)",
        ),
        _ => bad(
            "metrics",
            Level::Error,
            format!("{addr} is in use by another program"),
            "choose another [metrics] listen address, or stop what holds it",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, last_seen: i64, stopped: Option<i64>, drain: bool) -> NodeRow {
        NodeRow {
            name: name.into(),
            host: Some("h".into()),
            pid: Some(7),
            version: None,
            started: Some(0),
            last_seen: Some(last_seen),
            stopped,
            toml_jobs: None,
            tags: None,
            drain,
            clock_offset: None,
        }
    }

    #[test]
    fn this_nodes_daemon_down_is_an_error_though_others_run() {
        let now = 1_000_000;
        let others = node("n1", now, None, false);
        let found = this_node(std::slice::from_ref(&others), "n2", now);
        assert_eq!(
            found.level,
            Level::Warn,
            "never ran here: {}",
            found.message
        );
        let crashed = node("n2", now - 60_000, None, false);
        let found = this_node(&[others.clone(), crashed], "n2", now);
        assert_eq!(found.level, Level::Error);
        assert!(
            found.message.contains("not stopped cleanly"),
            "{}",
            found.message
        );
        let stopped = node("n2", now - 60_000, Some(now - 60_000), false);
        let found = this_node(&[others.clone(), stopped], "n2", now);
        assert_eq!(found.level, Level::Error);
        assert!(
            found.message.contains("was stopped 1m ago"),
            "{}",
            found.message
        );
        let drained = node("n2", now, None, true);
        assert_eq!(this_node(&[drained], "n2", now).level, Level::Warn);
        assert_eq!(this_node(&[others], "n1", now).level, Level::Ok);
    }
}
