//! Schedule engine throughput: `cargo bench --bench schedule`.
//!
//! Measures next-fire-time computations per second and the cost of parsing (which includes the
//! "never fires" validation). Each case walks a chain of fire times, feeding every result back as
//! the next `after`, so the figures include the real mix of in-hour, day and month roll-overs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use sqlcron::schedule::{CronExpr, Schedule};

/// Runs `step` repeatedly for about `budget`, returns (iterations, elapsed).
fn measure(budget: Duration, mut step: impl FnMut()) -> (u64, Duration) {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..1000 {
            step();
        }
        n += 1000;
    }
    (n, start.elapsed())
}

fn chain(expr: &str, zone: &str, start: DateTime<Utc>) {
    let schedule = Schedule::parse(expr, zone).expect("valid");
    let mut after = start;
    let (n, elapsed) = measure(Duration::from_millis(700), || {
        after = match schedule.next_after(black_box(after)) {
            Some(t) => t,
            None => start,
        };
    });
    let per_sec = n as f64 / elapsed.as_secs_f64();
    let micros = elapsed.as_secs_f64() * 1e6 / n as f64;
    println!("next_after  {expr:<22} {zone:<20} {per_sec:>12.0}/s  {micros:>8.3} us/call");
}

/// The same far-away computation repeated: the worst case of a rare expression.
fn single(expr: &str, zone: &str, after: DateTime<Utc>) {
    let schedule = Schedule::parse(expr, zone).expect("valid");
    let (n, elapsed) = measure(Duration::from_millis(400), || {
        let _ = black_box(schedule.next_after(black_box(after)));
    });
    let micros = elapsed.as_secs_f64() * 1e6 / n as f64;
    let next = schedule.next_after(after).expect("fires");
    println!("worst-case  {expr:<22} {zone:<20} from {after} -> {next}  {micros:>8.3} us/call");
}

fn parse(expr: &str) {
    let (n, elapsed) = measure(Duration::from_millis(400), || {
        let _ = black_box(CronExpr::parse(black_box(expr)));
    });
    let micros = elapsed.as_secs_f64() * 1e6 / n as f64;
    println!("parse+validate  {expr:<30} {micros:>8.3} us/call");
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful either way.
    let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let leap_edge = Utc.with_ymd_and_hms(2096, 3, 1, 0, 0, 0).unwrap();
    chain("*/5 * * * *", "UTC", start);
    chain("*/5 * * * *", "Europe/Berlin", start);
    chain("0 4 * * *", "Europe/Berlin", start);
    chain("30 2 * * *", "Europe/Berlin", start);
    chain("*/15 * * * * *", "Australia/Lord_Howe", start);
    chain("0 0 29 2 1", "UTC", start);
    chain("0 0 L 2 *", "Europe/Berlin", start);
    chain("0 0 29 2 *", "UTC", leap_edge);
    chain("0 0 29 2 *", "America/New_York", start);
    chain("0 0 * 2 5#5", "UTC", start);
    chain("0 0 */30 2 1#1", "UTC", start);
    chain("* * 29 2 *", "Europe/Berlin", start);
    let y2029 = Utc.with_ymd_and_hms(2029, 3, 1, 0, 0, 0).unwrap();
    let y2100 = Utc.with_ymd_and_hms(2100, 3, 1, 0, 0, 0).unwrap();
    single("* * 29 2 *", "Europe/Berlin", y2029);
    single("0 0 29 2 *", "Europe/Berlin", y2100);
    single("0 0 29 2 1", "America/New_York", y2029);
    single("0 0 L 2 *", "Europe/Berlin", y2029);
    single("0 0 * 2 5#5", "Australia/Lord_Howe", y2029);
    single("0 0 */30 2 1#1", "UTC", y2029);
    parse("*/5 * * * *");
    parse("0 0 31 4 *");
    parse("0 0 */31 2 5L");
    parse("0 0 * 2 5#5");
}
