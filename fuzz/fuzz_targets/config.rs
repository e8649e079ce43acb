//! The configuration: any TOML text is parsed and validated into a configuration or a list of
//! problems, never a panic.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::config(data));
