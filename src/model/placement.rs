//! Placement: which nodes may run a job. Pure: no database, no clock.
//!
//! A job's `on = { tags = [...], nodes = [...] }` is stored in `cron_table.placement` as a JSON
//! object (`NULL`: any node). A node matches when it carries **every** listed tag and its name
//! matches **any** listed glob (`*` any run of characters, `?` one character); a list left out
//! does not restrict. The database filters: each node works out which of the placement values in
//! use (`cron_placements`) it matches and claims with `placement IS NULL OR placement IN (...)`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Where a job may run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Tags a node must all carry (`[node] tags`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Globs of node names, any of which may match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

/// The longest placement value accepted (the MySQL key of `cron_placements`).
pub const PLACEMENT_MAX: usize = 700;

impl Placement {
    /// Checks a placement written in the TOML: tags and globs non-empty, at least one list.
    pub fn validate(&self) -> Result<(), String> {
        if self.tags.is_empty() && self.nodes.is_empty() {
            return Err("on: give tags, nodes or both (leave `on` out to run anywhere)".into());
        }
        if let Some(t) = self
            .tags
            .iter()
            .find(|t| t.trim().is_empty() || t.contains(char::is_whitespace))
        {
            return Err(format!("on.tags: \"{t}\" must be a non-empty word"));
        }
        if self.nodes.iter().any(|n| n.trim().is_empty()) {
            return Err("on.nodes: a name pattern is empty".into());
        }
        let json = self.to_json();
        if json.len() > PLACEMENT_MAX {
            return Err(format!("on: at most {PLACEMENT_MAX} characters as JSON"));
        }
        Ok(())
    }

    /// The stored form: JSON with sorted, unique tags and globs, so that equal placements
    /// written in any order share one value.
    pub fn to_json(&self) -> String {
        let tags: BTreeSet<&String> = self.tags.iter().collect();
        let nodes: BTreeSet<&String> = self.nodes.iter().collect();
        let canonical = Placement {
            tags: tags.into_iter().cloned().collect(),
            nodes: nodes.into_iter().cloned().collect(),
        };
        serde_json::to_string(&canonical).unwrap_or_default()
    }

    /// Parses the `placement` column.
    pub fn from_json(text: &str) -> Result<Placement, String> {
        // The raw text too: MySQL/MariaDB keep at most this many characters of a value in
        // `cron_placements` (`INSERT IGNORE` cuts a longer one), so a row with a longer value,
        // however it parses, would match no node's filter and wait unseen; refused, it is
        // matched by every node and parked by the one that claims or prepares it.
        if text.chars().count() > PLACEMENT_MAX {
            return Err(format!("placement: longer than {PLACEMENT_MAX} characters"));
        }
        let p: Placement = serde_json::from_str(text).map_err(|e| {
            format!("placement: not a JSON object {{\"tags\": [...], \"nodes\": [...]}} ({e})")
        })?;
        p.validate().map_err(|e| format!("placement: {e}"))?;
        Ok(p)
    }

    /// Whether a node of this name and these tags may run the job.
    pub fn matches(&self, node: &str, tags: &[String]) -> bool {
        self.tags.iter().all(|t| tags.contains(t))
            && (self.nodes.is_empty() || self.nodes.iter().any(|g| glob_match(g, node)))
    }

    /// How `status` and `explain` write it.
    pub fn describe(&self) -> String {
        let mut parts = vec![];
        if !self.tags.is_empty() {
            parts.push(format!("tags {}", self.tags.join("+")));
        }
        if !self.nodes.is_empty() {
            parts.push(format!("nodes {}", self.nodes.join("|")));
        }
        parts.join(", ")
    }
}

/// A node as placement sees it: its name, tags, and whether it can take work now (alive and
/// not drained).
#[derive(Debug, Clone)]
pub struct NodeOffer {
    pub name: String,
    pub tags: Vec<String>,
    pub available: bool,
}

impl NodeOffer {
    /// From the registry's columns (`cron_nodes.tags` is a JSON array).
    pub fn new(name: &str, tags_json: Option<&str>, available: bool) -> NodeOffer {
        NodeOffer {
            name: name.to_string(),
            tags: tags_json
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default(),
            available,
        }
    }
}

/// Why a job with this `placement` column cannot run now, if it cannot: no available node
/// matches it. `None` when some node can (or the job may run anywhere and some node is
/// available; with no node available at all, nothing is said: that is an outage, not placement).
pub fn unplaceable(placement: Option<&str>, nodes: &[NodeOffer]) -> Option<String> {
    let p = Placement::from_json(placement?).ok()?;
    let fits = nodes
        .iter()
        .any(|n| n.available && p.matches(&n.name, &n.tags));
    (!fits).then(|| format!("no live node matches ({})", p.describe()))
}

/// The stored placement values a node matches. A value that does not parse is matched by every
/// node, so that one of them claims the row and parks it with the error (it would otherwise wait
/// unseen forever).
pub fn matching_values<'a>(
    values: impl IntoIterator<Item = &'a str>,
    node: &str,
    tags: &[String],
) -> Vec<String> {
    values
        .into_iter()
        .filter(|v| Placement::from_json(v).map_or(true, |p| p.matches(node, tags)))
        .map(str::to_string)
        .collect()
}

/// Whether a claimed row's placement keeps it from this node: a value that parses and does not
/// admit it. The claim's SQL takes only rows whose value the node matches, but on MySQL/MariaDB
/// the claim and the read of the claimed rows are two statements, and a writer may change the
/// placement between them. A value that does not parse excludes no node (every node matches
/// it, and the one that claims the row parks it).
pub fn excludes(placement: Option<&str>, node: &str, tags: &[String]) -> bool {
    placement.is_some_and(|v| Placement::from_json(v).is_ok_and(|p| !p.matches(node, tags)))
}

/// The most placement values a node filters its claim by: each is a bound parameter of the
/// claim and the peek (twice, once on MySQL), and the databases limit those (SQLite to 32,766,
/// older builds to 999). Beyond it a node keeps the first values and says so (see [`bounded`]).
pub const MAX_MATCHING: usize = 400;

/// At most [`MAX_MATCHING`] of the values a node matches, and how many were left out: first
/// those in the form sqlcron writes ([`Placement::to_json`]), then others that parse, then the
/// rest. A flood of garbage values (each matched by every node, so that its rows get parked), or
/// of a real value written over and over with other spacing or order (each its own value, which
/// no row need use), cannot push out the placements of the jobs sqlcron wrote. A flood of values
/// in sqlcron's own form that a node matches still can (an editor may insert values; it may as
/// well pause or delete the jobs), until the pruning duty deletes the values no row uses.
pub fn bounded(mut matching: Vec<String>) -> (Vec<String>, usize) {
    if matching.len() <= MAX_MATCHING {
        return (matching, 0);
    }
    matching.sort_by_key(|v| match Placement::from_json(v) {
        Ok(p) if p.to_json() == *v => 0,
        Ok(_) => 1,
        Err(_) => 2,
    });
    let left_out = matching.len() - MAX_MATCHING;
    matching.truncate(MAX_MATCHING);
    matching.sort();
    (matching, left_out)
}

/// Shell-style glob: `*` matches any run of characters (also none), `?` exactly one.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it currently stands for.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            // Let the star take one more character and retry.
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_row_placed_elsewhere_is_excluded_and_no_other() {
        let tags = ["gpu".to_string()];
        assert!(!excludes(None, "a", &tags));
        assert!(!excludes(Some(r#"{"nodes":["a"]}"#), "a", &tags));
        assert!(!excludes(
            Some(r#"{"tags":["gpu"],"nodes":["a*"]}"#),
            "a1",
            &tags
        ));
        assert!(excludes(Some(r#"{"nodes":["b"]}"#), "a", &tags));
        assert!(excludes(Some(r#"{"tags":["ssd"]}"#), "a", &tags));
        // Not parseable: matched by every node, parked by the one that claims it.
        assert!(!excludes(Some(r#"{"Nodes":["b"]}"#), "a", &tags));
        assert!(!excludes(Some("garbage"), "a", &tags));
    }

    #[test]
    fn a_value_longer_than_mysql_keeps_does_not_parse_however_it_is_spaced() {
        let spaced = format!(r#"{{"nodes":["b"{}]}}"#, " ".repeat(PLACEMENT_MAX));
        assert!(
            Placement::from_json(&spaced)
                .unwrap_err()
                .contains("longer than 700")
        );
        let fits = format!(r#"{{"nodes":["b"{}]}}"#, " ".repeat(PLACEMENT_MAX - 20));
        assert!(Placement::from_json(&fits).is_ok());
    }

    #[test]
    fn bounded_keeps_the_values_sqlcron_writes_before_others_that_parse() {
        // Spacing and order of a value that parses, each its own value (`{ "nodes":...` sorts
        // before `{"nodes":...`): the ones sqlcron writes come first, whatever their number.
        let mut values: Vec<String> = (0..MAX_MATCHING + 50)
            .map(|i| format!(r#"{{ "nodes":["n{i}"]}}"#))
            .collect();
        values.push(r#"{"nodes":["b"]}"#.to_string());
        values.push(r#"{"tags":["gpu"]}"#.to_string());
        let (kept, left_out) = bounded(values);
        assert_eq!((kept.len(), left_out), (MAX_MATCHING, 52));
        assert!(kept.contains(&r#"{"nodes":["b"]}"#.to_string()));
        assert!(kept.contains(&r#"{"tags":["gpu"]}"#.to_string()));
    }

    #[test]
    fn bounded_keeps_values_that_parse_before_garbage() {
        let real = r#"{"tags":["a"]}"#.to_string();
        let mut values: Vec<String> = (0..MAX_MATCHING + 50).map(|i| format!("g{i}")).collect();
        values.push(real.clone());
        let (kept, left_out) = bounded(values);
        assert_eq!(kept.len(), MAX_MATCHING);
        assert_eq!(left_out, 51);
        assert!(kept.contains(&real));
        let few = vec![real.clone()];
        assert_eq!(bounded(few.clone()), (few, 0));
    }

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn globs() {
        for (p, n, want) in [
            ("web-*", "web-1", true),
            ("web-*", "web-", true),
            ("web-*", "db-1", false),
            ("*", "anything", true),
            ("w?b-*2", "web-12", true),
            ("w?b-*2", "web-13", false),
            ("*-eu-*", "web-eu-3", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} vs {n}");
        }
    }

    #[test]
    fn every_tag_and_any_glob() {
        let p = Placement {
            tags: tags(&["gpu", "eu"]),
            nodes: tags(&["web-*", "batch-?"]),
        };
        assert!(p.matches("web-1", &tags(&["eu", "gpu", "ssd"])));
        assert!(p.matches("batch-7", &tags(&["gpu", "eu"])));
        assert!(!p.matches("web-1", &tags(&["gpu"])), "every tag is needed");
        assert!(
            !p.matches("db-1", &tags(&["gpu", "eu"])),
            "the name must match"
        );
        let only_tags = Placement {
            tags: tags(&["gpu"]),
            nodes: vec![],
        };
        assert!(only_tags.matches("anything", &tags(&["gpu"])));
    }

    #[test]
    fn stored_form_is_canonical_and_checked() {
        let a = Placement {
            tags: tags(&["gpu", "eu", "gpu"]),
            nodes: vec![],
        };
        let b = Placement {
            tags: tags(&["eu", "gpu"]),
            nodes: vec![],
        };
        assert_eq!(a.to_json(), b.to_json());
        assert_eq!(a.to_json(), r#"{"tags":["eu","gpu"]}"#);
        assert_eq!(Placement::from_json(&a.to_json()).unwrap(), b);
        assert!(
            Placement::from_json("{}")
                .unwrap_err()
                .contains("give tags")
        );
        assert!(
            Placement::from_json("gpu")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            Placement::from_json(r#"{"tag":["x"]}"#).is_err(),
            "unknown keys are refused"
        );
        // A broken value is matched by every node, so that one of them parks the row.
        let values = [r#"{"tags":["gpu"]}"#, r#"{"nodes":["web-*"]}"#, "garbage"];
        assert_eq!(
            matching_values(values, "web-2", &tags(&["eu"])),
            [r#"{"nodes":["web-*"]}"#, "garbage"]
        );
    }
}
