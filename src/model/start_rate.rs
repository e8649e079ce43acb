//! The cluster-wide start rate as a pure decision: a budget of starts shared by every node,
//! kept as one number in the database (a generic cell rate algorithm, GCRA).
//!
//! A budget's clock `tat` (microseconds, database time) is the moment up to which starts have
//! been given out. At the steady rate one start is worth `interval` microseconds; a full budget
//! lets `burst` starts go at once. A node that claimed rows takes starts from the budget by
//! moving the clock forward (a compare-and-set in the store); the `i`-th start it takes may go
//! at `base + i × interval`, where `base` is the clock, or `now − burst × interval` when the
//! budget has been idle. A node never takes starts further ahead than [`HORIZON_MS`]: a node that
//! dies with starts taken wastes at most that much of the budget, and a claimed row never waits
//! longer than that for its turn.
//!
//! docs/start-rate.md has the design and what operators see.

/// The furthest ahead (milliseconds of database time) a node takes starts from a budget.
pub const HORIZON_MS: i64 = 1_000;

/// The name of the cluster's budget in `cron_start_rate`.
pub const CLUSTER: &str = "cluster";

/// The name of a pool's budget in `cron_start_rate`.
pub fn pool_budget(pool: &str) -> String {
    format!("pool:{pool}")
}

/// A budget's rate: starts per second at the steady rate, and how many may go at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

/// The longest one start may be worth: a day.
const MAX_INTERVAL_US: i64 = 86_400_000_000;

/// The furthest ahead of now a budget's clock can be moved by takes: an hour (a thousand nodes
/// each a horizon ahead stay well within it).
const MAX_AHEAD_US: i64 = 3_600_000_000;

/// The most starts per second a budget may allow (one per microsecond is the clock's grain).
pub const MAX_PER_SECOND: f64 = 100_000.0;

impl Rate {
    /// Microseconds one start is worth: at least one, at most a day (a rate written with SQL
    /// may be anything the column holds).
    pub fn interval_us(&self) -> i64 {
        let us = 1_000_000.0 / self.per_second;
        if us.is_nan() {
            return MAX_INTERVAL_US;
        }
        (us.round() as i64).clamp(1, MAX_INTERVAL_US)
    }

    /// The clock from which the next start counts: `tat`, or the point at which an idle budget
    /// is full again. A clock further ahead than [`MAX_AHEAD_US`] (which no take makes: a
    /// garbage value written with SQL) counts as an idle budget's, so that it cannot stop every
    /// start.
    fn base(&self, tat: i64, now_us: i64) -> i64 {
        let tat = if tat > now_us.saturating_add(MAX_AHEAD_US) {
            i64::MIN
        } else {
            tat
        };
        tat.max(now_us.saturating_sub(i64::from(self.burst).saturating_mul(self.interval_us())))
    }

    /// How many starts fit within the horizon at database time `now_ms` when the clock reads
    /// `tat`: what a node may claim for this budget.
    pub fn room(&self, tat: i64, now_ms: i64) -> usize {
        let now_us = now_ms.saturating_mul(1000);
        let limit = now_us.saturating_add(HORIZON_MS * 1000);
        let base = self.base(tat, now_us);
        if limit < base {
            return 0;
        }
        (limit.saturating_sub(base) / self.interval_us()).min(1_000_000) as usize
    }

    /// Takes up to `want` starts at `now_ms`: how long each must wait (milliseconds from
    /// `now_ms`, in order, none beyond the horizon), the clock to write, and from when (database
    /// time) one more start would fit within the horizon.
    pub fn take(&self, tat: i64, now_ms: i64, want: usize) -> Grant {
        let now_us = now_ms.saturating_mul(1000);
        let interval = self.interval_us();
        let granted = want.min(self.room(tat, now_ms));
        let base = self.base(tat, now_us);
        let waits_ms = (1..=granted as i64)
            .map(|i| {
                let at = base.saturating_add(i.saturating_mul(interval));
                ceil_ms(at.saturating_sub(now_us).max(0))
            })
            .collect();
        let tat = if granted == 0 {
            tat
        } else {
            base.saturating_add((granted as i64).saturating_mul(interval))
        };
        Grant {
            waits_ms,
            tat,
            next_room_ms: self.when_room(tat, now_ms, 1),
            interval_ms: ceil_ms(interval).max(1),
        }
    }

    /// The database time (milliseconds, at least `now_ms`) from which `n` starts fit within
    /// the horizon when the clock reads `tat`.
    pub fn when_room(&self, tat: i64, now_ms: i64, n: usize) -> i64 {
        let base = self.base(tat, now_ms.saturating_mul(1000));
        let at = base
            .saturating_add((n as i64).saturating_mul(self.interval_us()))
            .saturating_sub(HORIZON_MS * 1000);
        ceil_ms(at).max(now_ms)
    }

    /// How many starts a node waits for before it claims: a quarter of a second's worth (at
    /// least one), so that claims come in batches rather than one per start.
    pub fn batch(&self) -> usize {
        if !self.per_second.is_finite() {
            return 1;
        }
        (self.per_second / 4.0).ceil().clamp(1.0, 1_000_000.0) as usize
    }
}

/// Microseconds to milliseconds, rounded up.
fn ceil_ms(us: i64) -> i64 {
    us.div_euclid(1000) + i64::from(us.rem_euclid(1000) > 0)
}

/// What a node took from a budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// Per start taken, in order: milliseconds from the database time of the take.
    pub waits_ms: Vec<i64>,
    /// The budget's clock after the take (unchanged when nothing was taken).
    pub tat: i64,
    /// Database time from which one more start fits within the horizon.
    pub next_room_ms: i64,
    /// What one start is worth, in milliseconds (rounded up).
    pub interval_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn rate(per_second: f64, burst: u32) -> Rate {
        Rate { per_second, burst }
    }

    #[test]
    fn an_idle_budget_lets_its_burst_go_at_once_then_the_steady_rate() {
        let r = rate(100.0, 10);
        let g = r.take(0, NOW, 50);
        assert_eq!(g.waits_ms.len(), 50);
        assert!(g.waits_ms[..10].iter().all(|w| *w == 0), "{:?}", g.waits_ms);
        // The eleventh start waits one interval (10 ms), the fiftieth forty.
        assert_eq!(g.waits_ms[10], 10);
        assert_eq!(g.waits_ms[49], 400);
        assert_eq!(g.tat, (NOW + 400) * 1000);
    }

    #[test]
    fn nothing_is_taken_beyond_the_horizon() {
        let r = rate(100.0, 10);
        // An idle budget holds the burst plus one second of the rate.
        assert_eq!(r.room(0, NOW), 110);
        let g = r.take(0, NOW, 1_000);
        assert_eq!(g.waits_ms.len(), 110);
        assert_eq!(*g.waits_ms.last().unwrap(), HORIZON_MS);
        // Taken up to the horizon: nothing more until one interval has passed.
        assert_eq!(r.room(g.tat, NOW), 0);
        assert_eq!(g.next_room_ms, NOW + 10);
        assert_eq!(r.room(g.tat, g.next_room_ms), 1);
        assert_eq!(r.when_room(g.tat, NOW, 25), NOW + 250);
        assert_eq!(r.room(g.tat, NOW + 250), 25);
        assert_eq!(r.batch(), 25);
        assert_eq!(r.when_room(0, NOW, 3), NOW, "an idle budget has room now");
        let again = r.take(g.tat, NOW, 5);
        assert!(again.waits_ms.is_empty());
        assert_eq!(again.tat, g.tat, "an empty take leaves the clock alone");
    }

    #[test]
    fn takers_one_after_another_share_one_rate() {
        // Three nodes taking in turns, each as much as it may, over ten seconds of database
        // time in 100 ms steps: the starts they are given never exceed burst + rate × time.
        let r = rate(50.0, 5);
        let mut tat = 0;
        let mut starts: Vec<i64> = Vec::new();
        for step in 0..100 {
            let now = NOW + step * 100;
            for _node in 0..3 {
                let g = r.take(tat, now, 20);
                starts.extend(g.waits_ms.iter().map(|w| now + w));
                tat = g.tat;
            }
        }
        starts.sort();
        for (i, at) in starts.iter().enumerate() {
            let allowed = 5.0 + (at - NOW) as f64 / 1000.0 * 50.0;
            assert!(
                i as f64 + 1.0 <= allowed + 1e-9,
                "start {i} at +{} ms",
                at - NOW
            );
        }
        // And the budget is used: about 50 a second after the burst.
        let in_last_five_s = starts
            .iter()
            .filter(|a| **a >= NOW + 5_000 && **a < NOW + 10_000)
            .count();
        assert!((245..=255).contains(&in_last_five_s), "{in_last_five_s}");
    }

    #[test]
    fn slow_rates_and_a_clock_far_behind() {
        let r = rate(0.5, 1);
        assert_eq!(r.interval_us(), 2_000_000);
        let g = r.take(0, NOW, 3);
        assert_eq!(g.waits_ms, vec![0]);
        assert_eq!(g.next_room_ms, NOW + 1_000);
        let later = r.take(g.tat, NOW + 1_000, 3);
        assert_eq!(later.waits_ms, vec![1_000]);
        // A clock left far in the past (an idle budget) gives the burst, not a backlog.
        assert_eq!(
            rate(10.0, 2).take(i64::MIN / 2, NOW, 100).waits_ms.len(),
            12
        );
    }

    #[test]
    fn garbage_written_with_sql_neither_panics_nor_stops_every_start() {
        // A clock a year ahead counts as an idle budget's: the burst goes.
        let r = rate(10.0, 2);
        let year_us = 365 * 86_400_000_000;
        assert_eq!(
            r.take((NOW * 1000) + year_us, NOW, 5).waits_ms,
            vec![0, 0, 100, 200, 300]
        );
        // Rates at the column's extremes.
        for per_second in [f64::MIN_POSITIVE, 1e-300, f64::INFINITY, f64::NAN, 1e300] {
            for burst in [1, u32::MAX] {
                let r = rate(per_second, burst);
                for tat in [i64::MIN, 0, i64::MAX] {
                    let g = r.take(tat, NOW, 10);
                    assert!(g.waits_ms.len() <= 10);
                    assert!(g.waits_ms.iter().all(|w| (0..=HORIZON_MS).contains(w)));
                    let _ = r.when_room(tat, NOW, 10);
                    assert!(r.batch() >= 1);
                }
            }
        }
    }
}
