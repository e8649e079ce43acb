//! The schedule parser and the next-fire search: any text, in a few zones, never panics, and a
//! fire time found is strictly after the instant asked about.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::schedule(data));
