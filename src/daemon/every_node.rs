//! Host-local jobs (`run_on = "every_node"`): this node keeps its own copy of each template it
//! matches, named `job@node` and pinned to itself by its placement, so that each of its slots
//! is claimed by this node only, exactly once, with its own history; a node that was down finds
//! its copy due when it comes back and follows the job's misfire policy. Copies whose template
//! is gone are removed by any node. Run at start, on reload and with each heartbeat.

use super::Shared;
use crate::config::Config;
use crate::model::placement::Placement;
use crate::store::{JobRow, StoreError};

/// The name of `node`'s copy of `template`.
pub fn copy_name(template: &str, node: &str) -> String {
    format!("{template}@{node}")
}

/// Whether a copy carries its template's definition (the columns `update_copy` writes).
fn same_definition(t: &JobRow, c: &JobRow) -> bool {
    t.schedule == c.schedule
        && t.timezone == c.timezone
        && t.command == c.command
        && t.argv == c.argv
        && t.http == c.http
        && t.env == c.env
        && t.workdir == c.workdir
        && t.enabled == c.enabled
        && t.pool == c.pool
        && t.policy == c.policy
        && t.run_user == c.run_user
        && t.run_group == c.run_group
        && t.env_file == c.env_file
        && t.inherit_env == c.inherit_env
        && t.limits == c.limits
        && t.alerts == c.alerts
        && t.signature == c.signature
}

/// Whether this node runs a template: it matches the template's placement (none: every node).
fn wanted(placement: Option<&str>, node: &str, tags: &[String]) -> bool {
    match placement {
        None => true,
        Some(p) => Placement::from_json(p).is_ok_and(|p| p.matches(node, tags)),
    }
}

/// How often a node looks for copies whose template is gone while the templates' names stay
/// the same (a copy made in a race with its template's removal).
const ORPHAN_SWEEP: std::time::Duration = std::time::Duration::from_secs(600);

impl Shared {
    /// Brings this node's copies in line with the templates.
    pub(super) async fn sync_copies(&self, config: &Config) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        // Nothing to do (and no statement) while no template exists and the last sync found
        // no copy: the peek counts the templates.
        if self.templates.load(Ordering::Relaxed) == 0 && !self.copies_seen.load(Ordering::Relaxed)
        {
            return Ok(());
        }
        let templates = self.store.every_node_templates().await?;
        let names: Vec<String> = templates.iter().map(|t| t.name.clone()).collect();
        let mine: Vec<String> = names.iter().map(|t| copy_name(t, &self.node)).collect();
        let copies = self.store.copies_named(&mine).await?;
        // Copies of templates that are gone, whichever node they belong to (nothing would ever
        // remove those of a node that is gone): looked for when the templates' names change,
        // at the first sync, while no template exists and every ten minutes, not with each
        // heartbeat (the look reads every node's copies).
        let now = std::time::Instant::now();
        let sweep = {
            let swept = self.copies_swept.lock().unwrap_or_else(|e| e.into_inner());
            names.is_empty()
                || swept.as_ref().is_none_or(|(seen, at)| {
                    *seen != names || now.duration_since(*at) >= ORPHAN_SWEEP
                })
        };
        let orphans = if sweep {
            let found = self.store.orphan_copies().await?;
            *self.copies_swept.lock().unwrap_or_else(|e| e.into_inner()) = Some((names, now));
            found
        } else {
            vec![]
        };
        self.copies_seen.store(
            !templates.is_empty() || !orphans.is_empty(),
            Ordering::Relaxed,
        );
        if templates.is_empty() && orphans.is_empty() {
            return Ok(());
        }
        let actor = crate::exec::account::this_process(Some(&format!("daemon {}", self.node)));
        let pin = Placement {
            tags: vec![],
            nodes: vec![self.node.clone()],
        }
        .to_json();
        for t in &templates {
            let name = copy_name(&t.name, &self.node);
            let mine = copies.iter().find(|c| c.name == name);
            let want = wanted(t.placement.as_deref(), &self.node, &config.node_tags);
            match (want, mine) {
                (true, None) if self.store.create_copy(&t.name, &name, &pin, &actor).await? => {
                    tracing::info!(job = %name, template = %t.name, "host-local copy created");
                }
                (true, Some(c)) if !same_definition(t, c) => {
                    self.store.update_copy(&t.name, &name, &actor).await?;
                    tracing::info!(job = %name, template = %t.name, "host-local copy updated");
                }
                (false, Some(_)) if self.store.remove_copy(&name, &actor).await? => {
                    tracing::info!(job = %name, "host-local copy removed: this node no longer matches");
                }
                _ => {}
            }
        }
        for (copy, template) in &orphans {
            if self.store.remove_copy(copy, &actor).await? {
                tracing::info!(job = %copy, template, "host-local copy removed: its job is gone");
            } else {
                // Held by a run now: looked for again at the next sync.
                *self.copies_swept.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_names_and_placement() {
        assert_eq!(copy_name("logrotate", "web-1"), "logrotate@web-1");
        assert!(wanted(None, "web-1", &[]));
        let web = Some(r#"{"tags":["web"]}"#);
        assert!(!wanted(web, "db-1", &["db".into()]));
        assert!(wanted(web, "web-1", &["web".into()]));
        assert!(
            !wanted(Some("garbage"), "web-1", &[]),
            "a broken placement runs nowhere"
        );
    }
}
