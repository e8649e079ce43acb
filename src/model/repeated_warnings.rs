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

/// The most warnings remembered: past it, those not written for [`REPEAT_EVERY`] are forgotten
/// (they would be written at once again anyway); while it is still full, a new warning is held
/// back until there is room. Forgetting one to make room let more rows than this, read in turn,
/// write every warning at every read: at most this many lines in ten minutes now.
const REMEMBERED: usize = 1024;

/// The warnings written, each with when it last was and how many times it was held back since.
#[derive(Debug, Default)]
pub struct RepeatedWarnings {
    seen: HashMap<String, (Instant, u64)>,
}

impl RepeatedWarnings {
    /// Whether to write the warning `key` at `now`: `Some(n)` with the `n` times it was held
    /// back since it was last written (0 the first time), `None` to hold it back.
    pub fn say(&mut self, key: &str, now: Instant) -> Option<u64> {
        if let Some((at, held)) = self.seen.get_mut(key) {
            if now.saturating_duration_since(*at) < REPEAT_EVERY {
                *held += 1;
                return None;
            }
            let n = *held;
            (*at, *held) = (now, 0);
            return Some(n);
        }
        if self.seen.len() >= REMEMBERED {
            self.seen
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < REPEAT_EVERY);
            if self.seen.len() >= REMEMBERED {
                return None;
            }
        }
        self.seen.insert(key.to_string(), (now, 0));
        Some(0)
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
    fn the_warnings_remembered_are_bounded() {
        let mut w = RepeatedWarnings::default();
        let t0 = Instant::now();
        for i in 0..REMEMBERED {
            assert_eq!(w.say(&i.to_string(), t0), Some(0));
        }
        // Full of recent ones: a new warning is held back, the others too.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(w.say("new", t1), None);
        assert_eq!(w.say("0", t1), None);
        assert_eq!(w.seen.len(), REMEMBERED);
        // Past the interval, the old ones are forgotten, and there is room again.
        assert_eq!(w.say("new", t0 + REPEAT_EVERY), Some(0));
        assert_eq!(w.seen.len(), 1);
        assert_eq!(w.say("new", t0 + REPEAT_EVERY), None);
    }
}
