//! The `sqlcron` binary: parses the command line, runs one subcommand and maps the outcome to an
//! exit code (0 success, 1 runtime failure, 2 bad usage or invalid configuration).

use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Parser, Subcommand};
use sqlcron::schedule::Schedule;

#[derive(Debug, Parser)]
#[command(
    name = "sqlcron",
    version,
    about = "Cluster-safe cron with its state in SQL"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the next fire times of a cron expression.
    Next {
        /// A 5-field (minute hour day-of-month month day-of-week) or 6-field (second first)
        /// expression, or a macro such as @daily.
        expr: String,
        /// IANA time zone the fields are read in.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// List fire times strictly after this RFC 3339 instant (default: now).
        #[arg(long)]
        after: Option<String>,
        /// How many fire times to print.
        #[arg(long, default_value_t = 5)]
        count: usize,
    },
}

/// An error the binary reports: its message and the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("sqlcron: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Next {
            expr,
            tz,
            after,
            count,
        } => next(&expr, &tz, after.as_deref(), count),
    }
}

fn next(expr: &str, tz: &str, after: Option<&str>, count: usize) -> Result<(), Failure> {
    let schedule = Schedule::parse(expr, tz).map_err(|e| Failure::usage(e.to_string()))?;
    let after = match after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                Failure::usage(format!(
                    "--after: \"{text}\" is not an RFC 3339 timestamp ({e}), e.g. 2026-03-29T01:00:00+01:00"
                ))
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let mut out = String::new();
    for t in schedule.iter_after(after).take(count) {
        out.push_str(
            &t.with_timezone(&schedule.tz())
                .to_rfc3339_opts(SecondsFormat::Secs, false),
        );
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
