//! Which placement values this node matches, kept up to date from the peek, its drain state,
//! and what the peek tells the event delivery. The claim and the peek filter
//! by the list, so the database never hands this node a row it may not run (see
//! `placement.rs`). Also when a pass may claim on the last peek instead of a new one
//! ([`may_reuse_peek`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
    /// The values this node matches (none: it takes only rows without a placement, also while
    /// it knows of no value in use).
    matching: Vec<String>,
    /// When they were read (`None`: not yet).
    read_at: Option<Instant>,
}

impl PlacementView {
    pub fn matching(&self) -> &[String] {
        &self.matching
    }
}

/// How often a peek also counts the live nodes (`sqlcron_nodes_alive`): the count reads a row
/// per node, at each poll of every node a fleet's largest part of an idle peek, for a gauge
/// nothing else reads.
pub(super) const ALIVE_EVERY: Duration = Duration::from_secs(60);

/// Whether a peek at `now` counts the live nodes, the last count taken at `last` (`None`: none
/// yet, as at the start).
pub(super) fn alive_due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= ALIVE_EVERY)
}

/// How long a node goes on with the placement values it read while their number stays the same:
/// a value deleted (no row used it: the housekeeping's) and another added between two of its
/// peeks leave the number as it was, and the node would not learn of the new one.
pub(super) const PLACEMENTS_REREAD: Duration = Duration::from_secs(60);

/// Whether the node reads the placement values again at `now`, its peek having counted `count`
/// of them: when the number changed, when its tags did (a reload), and at least every
/// [`PLACEMENTS_REREAD`].
pub(super) fn placements_stale(
    view: &PlacementView,
    count: i64,
    tags: &[String],
    now: Instant,
) -> bool {
    count != view.count
        || view.tags != tags
        || view
            .read_at
            .is_none_or(|at| now.saturating_duration_since(at) >= PLACEMENTS_REREAD)
}

/// How long a peek may stand in for a new one while claims keep filling every free place.
pub(super) const PEEK_REUSE: Duration = Duration::from_millis(250);

/// Whether a pass may claim on the last peek, `age` old, instead of looking again: only while
/// the claim after it took every place it asked for (likely more is due: a burst) and no
/// start-rate budget is in use, for at most [`PEEK_REUSE`]. What the peek also carries (rows to
/// prepare, placement changes, events due) is then seen up to that much later; an idle node looks
/// less often than that anyway. A drain is not delayed: the claim reads the drain flag itself.
pub(super) fn may_reuse_peek(claim_filled: bool, age: Duration) -> bool {
    claim_filled && age < PEEK_REUSE
}

/// The last peek, when it was taken, and whether the claim after it filled every free place.
#[derive(Debug, Clone)]
pub(super) struct LastPeek {
    peek: Peek,
    view: PlacementView,
    at: Instant,
    claim_filled: bool,
}

impl Shared {
    /// The peek for a pass: the last one, when [`may_reuse_peek`] allows it (its clock moved on
    /// by the time since, nothing left to prepare), else a new one ([`Shared::peek_placed`]).
    pub(super) async fn peek_for_pass(
        &self,
        config: &Config,
    ) -> Result<(Peek, PlacementView), StoreError> {
        let last = self.last_peek.lock().unwrap().clone();
        if let Some(last) = last
            && last.view.tags == config.node_tags
            && may_reuse_peek(last.claim_filled, last.at.elapsed())
        {
            let age = last.at.elapsed();
            let mut peek = last.peek;
            peek.now += age.as_millis() as i64;
            peek.pending_prepare = false;
            return Ok((peek, last.view));
        }
        let at = Instant::now();
        let (peek, view) = self.peek_placed(config).await?;
        *self.last_peek.lock().unwrap() = Some(LastPeek {
            peek: peek.clone(),
            view: view.clone(),
            at,
            claim_filled: false,
        });
        Ok((peek, view))
    }

    /// Whether the pass's claim took every free place it asked for, unlimited by the start
    /// rate: the next pass may then claim on the same peek.
    pub(super) fn claim_filled(&self, filled: bool) {
        if let Some(last) = self.last_peek.lock().unwrap().as_mut() {
            last.claim_filled = filled;
        }
    }

    /// The peek, under an up-to-date placement view: when the number of placement values
    /// changed (or the node's tags did, or a minute passed: [`placements_stale`]), the values
    /// are read again, matched, and the peek repeated when the node's filter changed. Also
    /// follows the node's drain flag, and passes on what the peek saw for the event delivery
    /// (which has no idle looks of its own) and the number of live nodes.
    pub(super) async fn peek_placed(
        &self,
        config: &Config,
    ) -> Result<(Peek, PlacementView), StoreError> {
        let view = self.placement.lock().unwrap().clone();
        let started = Instant::now();
        let alive = alive_due(*self.alive_counted.lock().unwrap(), started);
        let mut peek = self.store.peek(&self.node, view.matching(), alive).await?;
        let view = if placements_stale(&view, peek.placements, &config.node_tags, started) {
            let read = self.store.placement_values().await?;
            let values = read.text;
            for value in &read.unreadable {
                let error =
                    "placement: not UTF-8 text (written with SQL); no node can claim the row";
                match self.store.park_placed_as(value, error).await {
                    Ok(0) => {}
                    Ok(parked) => {
                        tracing::error!(
                            parked,
                            "cron_table rows whose placement is not UTF-8 text parked (no node could claim them)"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not park the rows whose placement is not UTF-8 text");
                    }
                }
            }
            let (matching, left_out) = bounded(matching_values(
                values.iter().map(String::as_str),
                &self.node,
                &config.node_tags,
            ));
            let fresh = PlacementView {
                // Every row, values not UTF-8 and a writer's NULL too: the peek counts them all
                // (with them left out, the count differed at every peek, and the values were
                // read again at each).
                count: read.rows as i64,
                tags: config.node_tags.clone(),
                // No value read is no value matched, not no filter: a writer who deletes the
                // values (or the first placed row, written after this read) must not make every
                // node take every placed row.
                matching,
                read_at: Some(started),
            };
            // The minute's reread that finds what the node knew says nothing.
            if fresh.count != view.count
                || fresh.matching != view.matching
                || fresh.tags != view.tags
            {
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
                    matching = fresh.matching().len(),
                    tags = ?config.node_tags,
                    "placements read"
                );
            }
            *self.placement.lock().unwrap() = fresh.clone();
            if fresh.matching != view.matching {
                peek = self.store.peek(&self.node, fresh.matching(), alive).await?;
            }
            fresh
        } else {
            view
        };
        self.templates.store(peek.templates, Ordering::Relaxed);
        // (MySQL only; 0: no audit row, or not MySQL.)
        self.peeked_audit_mark
            .store(peek.audit_mark.unwrap_or(0), Ordering::Relaxed);
        if let Some(alive) = peek.alive {
            self.metrics.nodes_alive(alive.max(0) as usize);
            *self.alive_counted.lock().unwrap() = Some(started);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placement_values_are_read_again_when_their_number_or_the_tags_change_or_a_minute_on() {
        let start = Instant::now();
        let tags = vec!["web".to_string()];
        let view = PlacementView {
            count: 3,
            tags: tags.clone(),
            matching: vec![],
            read_at: Some(start),
        };
        assert!(!placements_stale(&view, 3, &tags, start));
        assert!(placements_stale(&view, 4, &tags, start));
        // One deleted and another added: the same number, seen within the minute.
        assert!(!placements_stale(
            &view,
            3,
            &tags,
            start + PLACEMENTS_REREAD - Duration::from_millis(1)
        ));
        assert!(placements_stale(&view, 3, &tags, start + PLACEMENTS_REREAD));
        assert!(placements_stale(&view, 3, &["db".to_string()], start));
        // Never read: read at the first peek, even with no value in use.
        assert!(placements_stale(&PlacementView::default(), 0, &[], start));
    }

    #[test]
    fn the_live_nodes_are_counted_at_the_first_peek_and_then_once_a_minute() {
        let start = Instant::now();
        assert!(alive_due(None, start));
        assert!(!alive_due(Some(start), start));
        assert!(!alive_due(
            Some(start),
            start + ALIVE_EVERY - Duration::from_millis(1)
        ));
        assert!(alive_due(Some(start), start + ALIVE_EVERY));
        // A clock read before the last count (another thread's) is not a minute later.
        assert!(!alive_due(Some(start + ALIVE_EVERY), start));
    }

    #[test]
    fn a_peek_stands_in_only_while_claims_fill_and_not_for_long() {
        let ms = Duration::from_millis;
        assert!(may_reuse_peek(true, ms(0)));
        assert!(may_reuse_peek(true, PEEK_REUSE - ms(1)));
        assert!(!may_reuse_peek(true, PEEK_REUSE));
        // The last claim left places free (nothing more due, or the start rate held it back).
        assert!(!may_reuse_peek(false, ms(0)));
    }
}
