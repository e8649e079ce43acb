//! The `sqlcron` binary: parses the command line, runs one subcommand and maps the outcome to an
//! exit code (0 success, 1 runtime failure, 2 bad usage or invalid configuration). The only
//! place that prints errors, installs signal handlers and talks to systemd.

use sqlcron::cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli::run(args) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("sqlcron: {}", cli::printable(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}
