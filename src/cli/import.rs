//! `sqlcron import crontab FILE...`: crontab files as `[[job]]` TOML on stdout, notes on stderr
//! (see [`crate::model::crontab`]).

use std::path::PathBuf;

use crate::model::crontab::{Source, import, to_toml};

use super::Failure;

/// Whether `path` is in the system format (a user column): `/etc/crontab` and `/etc/cron.d/*`.
fn system_path(path: &std::path::Path) -> bool {
    path == std::path::Path::new("/etc/crontab")
        || path.parent() == Some(std::path::Path::new("/etc/cron.d"))
}

pub fn crontab(files: &[PathBuf], user: Option<&str>, system: bool) -> Result<u8, Failure> {
    let texts: Vec<(String, String, bool)> = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .map(|t| (f.display().to_string(), t, system || system_path(f)))
                .map_err(|e| Failure::usage(format!("{}: {e}", f.display())))
        })
        .collect::<Result<_, _>>()?;
    let sources: Vec<Source<'_>> = texts
        .iter()
        .map(|(path, text, system)| Source {
            path,
            text,
            system: *system,
            user: if *system { None } else { user },
        })
        .collect();
    let imported = import(&sources);
    for note in &imported.notes {
        eprintln!("{note}");
    }
    print!("{}", to_toml(&imported));
    eprintln!(
        "{} job(s) imported, {} line(s) left out",
        imported.jobs.len(),
        imported
            .notes
            .iter()
            .filter(|n| n.contains("left out"))
            .count()
    );
    Ok(0)
}
