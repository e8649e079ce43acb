//! The configuration: any TOML text is parsed and validated into a configuration or a list of
//! problems, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = sqlcron::config::Environment::default();
    let _ = sqlcron::config::parse(text, std::path::Path::new("fuzz.toml"), &env);
});
