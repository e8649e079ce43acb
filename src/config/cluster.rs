//! `[cluster]`: settings every node shares through the database, today the start rate
//! (`max_starts_per_second`, `burst`, and per pool under `[cluster.pools.NAME]`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::start_rate::{CLUSTER, MAX_PER_SECOND, Rate, pool_budget};

use super::validate::Collector;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Starts per second across the cluster; 0 removes the limit.
    pub max_starts_per_second: Option<f64>,
    /// Starts that may go at once after a quiet time (default: one second's worth).
    pub burst: Option<i64>,
    /// A start rate per pool, on top of the cluster's.
    #[serde(default)]
    pub pools: BTreeMap<String, RawPoolRate>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPoolRate {
    pub max_starts_per_second: Option<f64>,
    pub burst: Option<i64>,
}

/// The start-rate budgets this file sets, by their name in `cron_start_rate`: a rate to write,
/// or `None` (a rate of 0) to remove the budget. Budgets the file does not name are left as the
/// database has them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterConfig {
    pub start_rates: BTreeMap<String, Option<Rate>>,
}

fn rate(
    location: &str,
    per_second: Option<f64>,
    burst: Option<i64>,
    c: &mut Collector,
) -> Option<Option<Rate>> {
    let per_second = match per_second {
        None => {
            if burst.is_some() {
                c.push(
                    format!("{location} burst"),
                    "needs max_starts_per_second beside it",
                );
            }
            return None;
        }
        Some(0.0) => return Some(None),
        Some(p) if p.is_finite() && p > 0.0 && p <= MAX_PER_SECOND => p,
        Some(p) => {
            c.push(
                format!("{location} max_starts_per_second"),
                format!(
                    "{p} must be more than 0 and at most {MAX_PER_SECOND} (0 removes the limit)"
                ),
            );
            return None;
        }
    };
    let burst = match burst {
        None => per_second.ceil().max(1.0) as u32,
        Some(b) if (1..=1_000_000).contains(&b) => b as u32,
        Some(b) => {
            c.push(
                format!("{location} burst"),
                format!("{b} must be 1-1000000"),
            );
            return None;
        }
    };
    Some(Some(Rate { per_second, burst }))
}

pub(super) fn validate(raw: &RawCluster, c: &mut Collector) -> ClusterConfig {
    let mut start_rates = BTreeMap::new();
    if let Some(r) = rate("[cluster]", raw.max_starts_per_second, raw.burst, c) {
        start_rates.insert(CLUSTER.to_string(), r);
    }
    for (pool, raw) in &raw.pools {
        let location = format!("[cluster.pools.{pool}]");
        if raw.max_starts_per_second.is_none() {
            c.push(
                format!("{location} max_starts_per_second"),
                "is required (0 removes the pool's limit)",
            );
            continue;
        }
        if let Some(r) = rate(&location, raw.max_starts_per_second, raw.burst, c) {
            start_rates.insert(pool_budget(pool), r);
        }
    }
    ClusterConfig { start_rates }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (ClusterConfig, Vec<String>) {
        let raw: RawCluster = toml::from_str(text).unwrap();
        let mut c = Collector { problems: vec![] };
        let config = validate(&raw, &mut c);
        let problems = c
            .problems
            .into_iter()
            .map(|p| format!("{}: {}", p.location, p.message))
            .collect();
        (config, problems)
    }

    #[test]
    fn rates_with_their_bursts_and_removals() {
        let (config, problems) = parse(
            "max_starts_per_second = 50\n\
             [pools.reports]\nmax_starts_per_second = 0.5\nburst = 3\n\
             [pools.old]\nmax_starts_per_second = 0\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let rates = &config.start_rates;
        assert_eq!(
            rates["cluster"],
            Some(Rate {
                per_second: 50.0,
                burst: 50
            })
        );
        assert_eq!(
            rates["pool:reports"],
            Some(Rate {
                per_second: 0.5,
                burst: 3
            })
        );
        assert_eq!(rates["pool:old"], None);
        assert_eq!(parse("").0, ClusterConfig::default());
    }

    #[test]
    fn bad_rates_name_the_key() {
        let (_, problems) = parse("max_starts_per_second = -1\n[pools.x]\nburst = 2\n");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("[cluster] max_starts_per_second: -1 must be"));
        assert!(problems[1].starts_with("[cluster.pools.x] max_starts_per_second: is required"));
        let (_, problems) = parse("max_starts_per_second = 10\nburst = 0\n");
        assert_eq!(problems, vec!["[cluster] burst: 0 must be 1-1000000"]);
        let (_, problems) = parse("burst = 4\n");
        assert_eq!(problems.len(), 1);
    }
}
