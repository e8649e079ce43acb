//! Which placement values this node matches, kept up to date from the peek, its drain state,
//! and what the peek tells the event delivery. The claim and the peek filter
//! by the list, so the database never hands this node a row it may not run (see
//! `placement.rs`).

use std::sync::atomic::Ordering;

use super::Shared;
use crate::config::Config;
use crate::model::placement::{MAX_MATCHING, bounded, matching_values};
use crate::store::{Peek, StoreError};

/// What the node last learnt of the placement values in use.
#[derive(Debug, Clone, Default)]
pub struct PlacementView {
    /// How many values `cron_placements` held when they were read.
    count: i64,
    /// The node's tags they were matched against (a reload may change them).
    tags: Vec<String>,
    /// The values this node matches; `None` while no placement is in use at all.
    matching: Option<Vec<String>>,
}

impl PlacementView {
    pub fn matching(&self) -> Option<&[String]> {
        self.matching.as_deref()
    }
}

impl Shared {
    /// The peek, under an up-to-date placement view: when the number of placement values
    /// changed (or the node's tags did), the values are read again, matched, and the peek
    /// repeated with the new filter. Also follows the node's drain flag, and passes on what the
    /// peek saw for the event delivery (which has no idle looks of its own) and the number of
    /// live nodes.
    pub(super) async fn peek_placed(
        &self,
        config: &Config,
    ) -> Result<(Peek, PlacementView), StoreError> {
        let view = self.placement.lock().unwrap().clone();
        let mut peek = self.store.peek(&self.node, view.matching()).await?;
        let view = if peek.placements != view.count || view.tags != config.node_tags {
            let values = self.store.placement_values().await?;
            let (matching, left_out) = bounded(matching_values(
                values.iter().map(String::as_str),
                &self.node,
                &config.node_tags,
            ));
            if left_out > 0 {
                tracing::error!(
                    values = values.len(),
                    left_out,
                    "more than {MAX_MATCHING} placement values match this node: rows with the \
                     {left_out} others are not claimed by it until fewer are in use (values no \
                     row uses are pruned with the history)"
                );
            }
            tracing::info!(
                values = values.len(),
                matching = matching.len(),
                tags = ?config.node_tags,
                "placements read"
            );
            let fresh = PlacementView {
                count: values.len() as i64,
                tags: config.node_tags.clone(),
                matching: (!values.is_empty()).then_some(matching),
            };
            *self.placement.lock().unwrap() = fresh.clone();
            peek = self.store.peek(&self.node, fresh.matching()).await?;
            fresh
        } else {
            view
        };
        self.templates.store(peek.templates, Ordering::Relaxed);
        self.metrics.nodes_alive(peek.alive.max(0) as usize);
        if peek.next_event.is_some_and(|at| at <= peek.now) {
            self.events.notify_one();
        }
        let was = self.drained.swap(peek.drain, Ordering::SeqCst);
        if was != peek.drain {
            if peek.drain {
                tracing::warn!(
                    running = self.supervision().len(),
                    "node drained: claiming nothing new, letting runs finish (sqlcron undrain to resume)"
                );
            } else {
                tracing::info!("node undrained: claiming again");
            }
        }
        Ok((peek, view))
    }
}
