//! MariaDB Galera: what a node checks before it migrates and serves (see docs/databases.md).
//!
//! Every Galera node takes writes; a conflicting write on another node makes the later commit
//! fail certification with a deadlock error, which sqlcron treats as any deadlock (retried, never
//! a run). Each sqlcron session sets `wsrep_sync_wait = 1` (dialect.rs), so its reads see every
//! write the cluster committed before them. What the operator must get right is checked here.

use sqlx::{AnyConnection, Executor, Row};

/// What a server says of its Galera state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaleraState {
    pub osu_method: String,
    pub ready: String,
    pub state: String,
    pub cluster_status: String,
    pub cluster_size: String,
}

/// Whether the node can serve sqlcron: `Err` says why not, and what to do.
pub fn judge(g: &GaleraState) -> Result<String, String> {
    if !g.osu_method.eq_ignore_ascii_case("TOI") {
        return Err(format!(
            "Galera: wsrep_OSU_method is {}; sqlcron's schema changes must reach every node in \
             order: set wsrep_OSU_method = TOI",
            g.osu_method
        ));
    }
    if !g.ready.eq_ignore_ascii_case("ON") || !g.cluster_status.eq_ignore_ascii_case("Primary") {
        return Err(format!(
            "Galera: this node does not serve (wsrep_ready = {}, state {}, cluster status {}): \
             it is joining, or cut off from the cluster's primary component; waiting for it",
            g.ready, g.state, g.cluster_status
        ));
    }
    Ok(format!(
        "Galera node {} in a cluster of {}",
        g.state, g.cluster_size
    ))
}

/// Reads the Galera state of the server `conn` is on; `None` when it runs no Galera (MySQL, or
/// MariaDB with `wsrep_on = OFF`).
pub async fn state(conn: &mut AnyConnection) -> Result<Option<GaleraState>, sqlx::Error> {
    // MySQL has no wsrep variables at all.
    let Ok(row) = conn
        .fetch_one("SELECT CAST(@@wsrep_on AS CHAR), CAST(@@wsrep_osu_method AS CHAR)")
        .await
    else {
        return Ok(None);
    };
    let on: String = row.try_get(0)?;
    if !(on.eq_ignore_ascii_case("ON") || on == "1") {
        return Ok(None);
    }
    let osu_method: String = row.try_get(1)?;
    let rows = conn
        .fetch_all(
            "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME IN ('WSREP_READY', 'WSREP_LOCAL_STATE_COMMENT', \
             'WSREP_CLUSTER_STATUS', 'WSREP_CLUSTER_SIZE')",
        )
        .await?;
    let mut g = GaleraState {
        osu_method,
        ready: "?".into(),
        state: "?".into(),
        cluster_status: "?".into(),
        cluster_size: "?".into(),
    };
    for r in rows {
        let name: String = r.try_get(0)?;
        let value: String = r.try_get(1)?;
        match name.to_ascii_uppercase().as_str() {
            "WSREP_READY" => g.ready = value,
            "WSREP_LOCAL_STATE_COMMENT" => g.state = value,
            "WSREP_CLUSTER_STATUS" => g.cluster_status = value,
            "WSREP_CLUSTER_SIZE" => g.cluster_size = value,
            _ => {}
        }
    }
    Ok(Some(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synced() -> GaleraState {
        GaleraState {
            osu_method: "TOI".into(),
            ready: "ON".into(),
            state: "Synced".into(),
            cluster_status: "Primary".into(),
            cluster_size: "3".into(),
        }
    }

    #[test]
    fn a_synced_node_of_the_primary_component_serves() {
        assert_eq!(
            judge(&synced()).unwrap(),
            "Galera node Synced in a cluster of 3"
        );
    }

    #[test]
    fn a_node_out_of_the_primary_component_or_with_rsu_is_refused_with_the_reason() {
        let cut_off = GaleraState {
            ready: "OFF".into(),
            cluster_status: "non-Primary".into(),
            ..synced()
        };
        assert!(judge(&cut_off).unwrap_err().contains("primary component"));
        let rsu = GaleraState {
            osu_method: "RSU".into(),
            ..synced()
        };
        assert!(judge(&rsu).unwrap_err().contains("wsrep_OSU_method = TOI"));
    }
}
