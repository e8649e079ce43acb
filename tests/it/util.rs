//! Helpers shared by the integration tests.

use std::process::{Command, Output};

/// Runs the built `sqlcron` binary with arguments and returns its output.
pub fn sqlcron(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .args(args)
        .env_remove("SQLCRON_CONFIG")
        .env_remove("SQLCRON_DATABASE_URL")
        .output()
        .expect("run sqlcron")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
