//! How long live nodes have run different versions: a rolling upgrade under way is normal for a
//! while (`doctor` says so), one left half done is a warning (docs/upgrades.md).

/// After this long with live nodes of different versions, `doctor` warns.
pub(super) const UPGRADE_WINDOW_MS: i64 = 60 * 60 * 1000;

/// Since when live nodes have run more than one version, from each live node's version and the
/// instant it started (ms): the earliest start among the nodes of the version that appeared
/// second. `None` when they run one version. A node of the older version that restarts does not
/// move it; the mixed state began when the first node of a second version came up, and lasts at
/// least since then.
pub(super) fn mixed_since<'a>(
    nodes: impl IntoIterator<Item = (&'a str, Option<i64>)>,
) -> Option<i64> {
    let mut first_of: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for (version, started) in nodes {
        let started = started.unwrap_or(i64::MAX);
        first_of
            .entry(version)
            .and_modify(|s| *s = (*s).min(started))
            .or_insert(started);
    }
    let mut firsts: Vec<i64> = first_of.into_values().collect();
    firsts.sort_unstable();
    firsts.get(1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_version_is_not_mixed() {
        assert_eq!(
            mixed_since([("0.1 (commit a)", Some(5)), ("0.1 (commit a)", Some(9))]),
            None
        );
    }

    #[test]
    fn mixed_since_the_first_node_of_the_second_version() {
        // Old nodes started at 100 and 300 (one restarted late); new nodes at 1000 and 2000.
        let nodes = [
            ("old", Some(100)),
            ("new", Some(2000)),
            ("old", Some(3000)),
            ("new", Some(1000)),
        ];
        assert_eq!(mixed_since(nodes), Some(1000));
    }

    #[test]
    fn three_versions_count_from_the_second_to_appear() {
        let nodes = [("a", Some(10)), ("b", Some(50)), ("c", Some(20))];
        assert_eq!(mixed_since(nodes), Some(20));
    }
}
