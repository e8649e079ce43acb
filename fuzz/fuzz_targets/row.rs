//! Decoding a `cron_table` row written with SQL: any values in the user's columns give a
//! schedule and policy or a message, never a panic. The input is split on NUL bytes into the
//! columns' values; an empty value is NULL.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::row(data));
