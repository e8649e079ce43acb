//! Drift between the nodes' TOML files: each live node reports a fingerprint of each job its
//! file defines (`cron_nodes.toml_jobs`); jobs whose fingerprints differ, or that some nodes
//! lack, are drift. Read by `sqlcron status`, `doctor` and the dashboard's overview.

use super::NodeRow;

/// A job the live nodes' files disagree about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Drift {
    pub job: String,
    /// Node name → the job's fingerprint there ("absent" when the node's file lacks it).
    pub nodes: std::collections::BTreeMap<String, String>,
}

/// Alive nodes whose TOML files disagree: per job, each node's fingerprint of it.
pub fn drift(nodes: &[NodeRow], now: i64) -> Vec<Drift> {
    let mut per_node = std::collections::BTreeMap::new();
    for n in nodes.iter().filter(|n| n.alive(now)) {
        let map: std::collections::BTreeMap<String, String> = n
            .toml_jobs
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default();
        per_node.insert(n.name.clone(), map);
    }
    let mut all_jobs = std::collections::BTreeSet::new();
    for m in per_node.values() {
        all_jobs.extend(m.keys().cloned());
    }
    let mut drift = vec![];
    for job in all_jobs {
        let versions: std::collections::BTreeMap<String, String> = per_node
            .iter()
            .map(|(node, m)| {
                (
                    node.clone(),
                    m.get(&job).cloned().unwrap_or_else(|| "absent".into()),
                )
            })
            .collect();
        let distinct: std::collections::BTreeSet<_> = versions.values().collect();
        if distinct.len() > 1 {
            drift.push(Drift {
                job,
                nodes: versions,
            });
        }
    }
    drift
}
