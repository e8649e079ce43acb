//! The schedule parser and the next-fire search: any text, in a few zones, never panics, and a
//! fire time found is strictly after the instant asked about.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for zone in ["UTC", "Europe/Berlin", "America/St_Johns"] {
        let Ok(schedule) = sqlcron::schedule::Schedule::parse(text, zone) else {
            return;
        };
        // 2026-03-29T00:30:00Z, just before a DST change in Berlin.
        let after = chrono::DateTime::from_timestamp(1_774_744_200, 0).unwrap();
        if let Some(next) = schedule.next_after(after) {
            assert!(next > after, "{text:?} in {zone}: {next} is not after {after}");
        }
    }
});
