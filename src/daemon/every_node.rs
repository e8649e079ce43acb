//! Host-local jobs (`run_on = "every_node"`): this node keeps its own copy of each template it
//! matches, named `job@node` and pinned to itself by its placement, so that each of its slots
//! is claimed by this node only, exactly once, with its own history; a node that was down finds
//! its copy due when it comes back and follows the job's misfire policy. Copies whose template
//! is gone are removed by any node. Run at start, on reload, and with a heartbeat (5 s) when
//! the audit trail shows a definition changed since the last run, or that run is a minute old.

use std::time::{Duration, Instant};

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
const ORPHAN_SWEEP: Duration = Duration::from_secs(600);

/// A node reads its templates and copies at least this often, whatever the audit trail says: a
/// change whose audit row got an earlier id than one already seen (two transactions committing
/// out of order) or written with the audit triggers off reaches the copies within this.
const FULL_SYNC: Duration = Duration::from_secs(60);

/// Whether the heartbeat syncs the copies: with no mark from the database (none read yet, or no
/// audit row), always; otherwise when the audit trail's newest row is not the one of the last
/// sync, or the last sync is [`FULL_SYNC`] old.
fn sync_due(mark: Option<i64>, last: Option<(i64, Instant)>, now: Instant) -> bool {
    match (mark, last) {
        (Some(mark), Some((seen, at))) => {
            mark != seen || now.saturating_duration_since(at) >= FULL_SYNC
        }
        _ => true,
    }
}

impl Shared {
    /// With each heartbeat: [`Shared::sync_copies`] when a definition may have changed since
    /// the last sync (`mark`: the audit trail's newest row id, from the heartbeat, or on MySQL
    /// from the last peek). An idle fleet's nodes so stop reading their templates and copies
    /// every 5 s (docs/fleet.md).
    pub(super) async fn sync_copies_if_changed(
        &self,
        config: &Config,
        mark: Option<i64>,
    ) -> Result<(), StoreError> {
        let now = Instant::now();
        let last = *self.copies_synced.lock().unwrap_or_else(|e| e.into_inner());
        if !sync_due(mark, last, now) {
            return Ok(());
        }
        // A sync that read nothing (the peek had counted no template yet) or left work for
        // later (a copy to remove still held by its run) is not one the mark may stand for.
        let complete = self.sync_copies(config).await?;
        *self.copies_synced.lock().unwrap_or_else(|e| e.into_inner()) =
            mark.filter(|_| complete).map(|m| (m, now));
        Ok(())
    }

    /// Brings this node's copies in line with the templates. False when it read nothing, or a
    /// copy it should remove is held by a run and is left for the next sync.
    pub(super) async fn sync_copies(&self, config: &Config) -> Result<bool, StoreError> {
        use std::sync::atomic::Ordering;
        // Nothing to do (and no statement) while no template exists and the last sync found
        // no copy: the peek counts the templates.
        if self.templates.load(Ordering::Relaxed) == 0 && !self.copies_seen.load(Ordering::Relaxed)
        {
            return Ok(false);
        }
        // A name with an @, written with SQL (a TOML job is refused), would share its copies'
        // names with another template's on another node (`a@b` on `c`, `a` on `b@c`): none made,
        // and its copies made before such names were refused go as orphans (below), whichever
        // node they belong to.
        let (refused, templates): (Vec<JobRow>, Vec<JobRow>) = self
            .store
            .every_node_templates()
            .await?
            .into_iter()
            .partition(|t| t.name.contains('@'));
        let refused: Vec<String> = refused.into_iter().map(|t| t.name).collect();
        for name in &refused {
            if let Some(held) = crate::store::say_again(&format!("every_node @: {name}")) {
                tracing::error!(
                    job = %name,
                    held_back = held,
                    "a run_on = \"every_node\" job's name may not contain @ (its copies are named job@node); no copy made"
                );
            }
        }
        let names: Vec<String> = templates.iter().map(|t| t.name.clone()).collect();
        let mine: Vec<String> = names.iter().map(|t| copy_name(t, &self.node)).collect();
        let copies = self.store.copies_named(&mine).await?;
        // Copies of templates that are gone, whichever node they belong to (nothing would ever
        // remove those of a node that is gone): looked for when the templates' names change,
        // at the first sync, while no template exists and every ten minutes, not with each
        // heartbeat (the look reads every node's copies). The names held back count: a
        // template renamed with an @ has its copies removed at once.
        let now = std::time::Instant::now();
        let all_names: Vec<String> = names.iter().chain(&refused).cloned().collect();
        let sweep = {
            let swept = self.copies_swept.lock().unwrap_or_else(|e| e.into_inner());
            names.is_empty()
                || swept.as_ref().is_none_or(|(seen, at)| {
                    *seen != all_names || now.duration_since(*at) >= ORPHAN_SWEEP
                })
        };
        let orphans = if sweep {
            let found = self.store.orphan_copies().await?;
            *self.copies_swept.lock().unwrap_or_else(|e| e.into_inner()) = Some((all_names, now));
            found
        } else {
            vec![]
        };
        self.copies_seen.store(
            !templates.is_empty() || !orphans.is_empty(),
            Ordering::Relaxed,
        );
        if templates.is_empty() && orphans.is_empty() {
            return Ok(true);
        }
        let mut complete = true;
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
                (false, Some(_)) => {
                    if self.store.remove_copy(&name, &actor).await? {
                        tracing::info!(job = %name, "host-local copy removed: this node no longer matches");
                    } else {
                        // Held by a run now: removed at the next heartbeat's sync.
                        complete = false;
                    }
                }
                _ => {}
            }
        }
        for (copy, template) in &orphans {
            if self.store.remove_copy(copy, &actor).await? {
                match template.contains('@') {
                    true => {
                        tracing::info!(job = %copy, template, "host-local copy removed: its job's name holds an @")
                    }
                    false => {
                        tracing::info!(job = %copy, template, "host-local copy removed: its job is gone")
                    }
                }
            } else {
                // Held by a run now: looked for again at the next sync.
                *self.copies_swept.lock().unwrap_or_else(|e| e.into_inner()) = None;
                complete = false;
            }
        }
        Ok(complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_syncs_when_the_audit_trail_moved_or_a_minute_passed() {
        let at = Instant::now();
        assert!(sync_due(None, Some((7, at)), at), "no mark: always");
        assert!(sync_due(Some(7), None, at), "never synced");
        assert!(!sync_due(
            Some(7),
            Some((7, at)),
            at + Duration::from_secs(5)
        ));
        assert!(
            sync_due(Some(8), Some((7, at)), at + Duration::from_secs(5)),
            "a change"
        );
        assert!(
            sync_due(Some(6), Some((7, at)), at),
            "rows pruned: read again"
        );
        assert!(
            sync_due(Some(7), Some((7, at)), at + FULL_SYNC),
            "the safety net"
        );
    }

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
