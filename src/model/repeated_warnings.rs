//! How often the same warning is written: the first time, then at most once every
//! [`REPEAT_EVERY`] while it goes on, with how many times it was held back in between. A row a
//! writer left that cannot be read is read again at every tick or scan (the alert scan reads the
//! jobs every 2 s, the start rate at every claim): its warning each time was 43,200 journal lines
//! a day from one row, and pushed other lines past journald's rate limit.
//!
//! Pure: the time comes in as a parameter; the store keeps one of these for the process.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The longest a warning that goes on is held back.
pub const REPEAT_EVERY: Duration = Duration::from_secs(600);

/// The most warnings of one kind remembered (the kind is the key up to its first `": "`, a
/// call site's own text): past it, those not written for [`REPEAT_EVERY`] are forgotten (they
/// would be written at once again anyway); while it is still full, a new warning of that kind
/// is written at most once every [`REPEAT_EVERY`], with how many were held back in between.
/// Forgetting one to make room let more rows than this, read in turn, write every warning at
/// every read; a limit shared by every kind let a writer's rows of one kind (copies of a
/// template that does not exist, named to be read first) hold back every later warning of
/// every other kind for good.
const REMEMBERED: usize = 256;

/// The warnings written, each with when it last was and how many times it was held back since.
#[derive(Debug, Default)]
pub struct RepeatedWarnings {
    seen: HashMap<String, (Instant, u64)>,
    /// Per kind: how many are remembered, and when a new one was last written while it was
    /// full, with the new ones held back since.
    kinds: HashMap<String, Kind>,
}

#[derive(Debug, Default)]
struct Kind {
    remembered: usize,
    full_since: Option<(Instant, u64)>,
}

/// The longest key remembered, in bytes: a key carries a row's name or value, which a writer
/// chooses; longer keys are cut (at a character's boundary).
const LONGEST_KEY: usize = 512;

fn bounded(key: &str) -> &str {
    if key.len() <= LONGEST_KEY {
        return key;
    }
    let mut end = LONGEST_KEY;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

/// The kind of a warning's key: the text before its first `": "`.
fn kind_of(key: &str) -> &str {
    key.split_once(": ").map_or(key, |(kind, _)| kind)
}

impl RepeatedWarnings {
    /// Whether to write the warning `key` at `now`: `Some(n)` with the `n` times it (or, while
    /// its kind is full, a warning of its kind) was held back since it was last written (0 the
    /// first time), `None` to hold it back.
    pub fn say(&mut self, key: &str, now: Instant) -> Option<u64> {
        let key = bounded(key);
        if let Some((at, held)) = self.seen.get_mut(key) {
            if now.saturating_duration_since(*at) < REPEAT_EVERY {
                *held += 1;
                return None;
            }
            let n = *held;
            (*at, *held) = (now, 0);
            return Some(n);
        }
        let kind = kind_of(key);
        if let Some(k) = self.kinds.get_mut(kind)
            && k.remembered >= REMEMBERED
        {
            // Held back without a look at the others while the kind's last new one is recent:
            // a writer's many rows of one kind cost one count each, not a scan.
            if let Some((at, held)) = &mut k.full_since
                && now.saturating_duration_since(*at) < REPEAT_EVERY
            {
                *held += 1;
                return None;
            }
            self.forget_before(now);
        }
        let k = self.kinds.entry(kind.to_string()).or_default();
        if k.remembered >= REMEMBERED {
            // Still full, and its last new one (if any) is older than the interval.
            let held = k.full_since.map_or(0, |(_, held)| held);
            k.full_since = Some((now, 0));
            return Some(held);
        }
        k.remembered += 1;
        self.seen.insert(key.to_string(), (now, 0));
        // Room again: the new ones of its kind held back meanwhile are counted here.
        Some(k.full_since.take().map_or(0, |(_, held)| held))
    }

    /// Forgets the warnings not written for [`REPEAT_EVERY`].
    fn forget_before(&mut self, now: Instant) {
        let kinds = &mut self.kinds;
        self.seen.retain(|key, (at, _)| {
            let keep = now.saturating_duration_since(*at) < REPEAT_EVERY;
            if !keep && let Some(k) = kinds.get_mut(kind_of(key)) {
                k.remembered -= 1;
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_written_first_then_once_per_interval_with_the_count_held_back() {
        let mut w = RepeatedWarnings::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(w.say("a", t0), Some(0));
        assert_eq!(w.say("b", t0), Some(0), "another warning is its own");
        for i in 1..=5 {
            assert_eq!(w.say("a", t0 + s(i * 60)), None);
        }
        assert_eq!(w.say("a", t0 + REPEAT_EVERY), Some(5));
        assert_eq!(w.say("a", t0 + REPEAT_EVERY + s(1)), None);
        assert_eq!(w.say("a", t0 + REPEAT_EVERY * 2), Some(1));
        assert_eq!(w.say("b", t0 + REPEAT_EVERY * 2), Some(0));
    }

    #[test]
    fn the_warnings_remembered_are_bounded_per_kind() {
        let mut w = RepeatedWarnings::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        for i in 0..REMEMBERED {
            assert_eq!(w.say(&format!("copy: {i}"), t0), Some(0));
        }
        // Full of recent ones of its kind: a new one is written once, then held back and
        // counted, and the ones remembered too.
        let t1 = t0 + s(1);
        assert_eq!(w.say("copy: new", t1), Some(0));
        assert_eq!(w.say("copy: newer", t1), None);
        assert_eq!(w.say("copy: new", t1 + s(1)), None);
        assert_eq!(w.say("copy: 0", t1), None);
        assert_eq!(w.seen.len(), REMEMBERED);
        // Another kind is not held back by it.
        assert_eq!(w.say("calendar: holidays", t1), Some(0));
        // Kept full by the same keys written again at each interval: a new one still gets out
        // once per interval, with the count of those held back.
        let t2 = t0 + REPEAT_EVERY;
        for i in 0..REMEMBERED {
            assert_eq!(w.say(&format!("copy: {i}"), t2), Some(u64::from(i == 0)));
        }
        assert_eq!(w.say("copy: real", t2 + s(1)), Some(2));
        assert_eq!(w.say("copy: real", t2 + s(2)), None);
        // Past the interval with nothing written again (and past the kind's last new one),
        // the old ones are forgotten.
        assert_eq!(w.say("copy: later", t2 + REPEAT_EVERY), None);
        let t3 = t2 + REPEAT_EVERY + s(1);
        assert_eq!(
            w.say("copy: later", t3),
            Some(2),
            "the two held back since the last new one"
        );
        assert_eq!(w.say("copy: after", t3), Some(0));
        assert_eq!(w.seen.len(), 2);
        assert_eq!(w.say("copy: later", t3), None);
    }

    #[test]
    fn keys_are_bounded_in_length() {
        let mut w = RepeatedWarnings::default();
        let t0 = Instant::now();
        let long = format!("row: {}", "é".repeat(1_000));
        assert_eq!(w.say(&long, t0), Some(0));
        assert!(w.seen.keys().all(|k| k.len() <= LONGEST_KEY));
        assert_eq!(w.say(&format!("{long}x"), t0), None, "the same once cut");
    }
}
