//! Environment files (`env_file` of a job): `KEY=VALUE` lines as systemd's `EnvironmentFile=`
//! reads them. The daemon reads the file at each run, so a job's secret can live in a file only
//! root (or the daemon's user) can read, outside the TOML and the database.
//!
//! Syntax: blank lines and lines starting with `#` or `;` are ignored; an optional `export `
//! prefix; `KEY` is letters, digits and `_`, not starting with a digit; `VALUE` is taken as is
//! (surrounding spaces trimmed), or quoted: `'...'` literally, `"..."` with `\"`, `\\`, `\n`
//! and `\t` escapes.

use std::path::Path;

/// Parses the text of an environment file; errors name the line.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let at = |m: &str| format!("line {}: {m}", i + 1);
        let (key, value) = line.split_once('=').ok_or_else(|| at("not KEY=VALUE"))?;
        let key = key.trim();
        let valid_key = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key {
            return Err(at(&format!("\"{key}\" is not a variable name")));
        }
        let value = value.trim();
        let value = if let Some(inner) = value.strip_prefix('\'') {
            inner
                .strip_suffix('\'')
                .ok_or_else(|| at("unterminated '"))?
                .to_string()
        } else if let Some(inner) = value.strip_prefix('"') {
            let inner = inner
                .strip_suffix('"')
                .filter(|s| !s.ends_with('\\') || s.ends_with("\\\\"))
                .ok_or_else(|| at("unterminated \""))?;
            unescape(inner)
        } else {
            value.to_string()
        };
        vars.push((key.to_string(), value));
    }
    Ok(vars)
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Reads and parses an environment file. Errors name the file (never a value from it).
pub fn read(path: &Path) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("env_file {}: cannot read: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("env_file {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemd_style_lines() {
        let text = "# comment\n\nexport TOKEN=abc=def\n  PLAIN = spaced value \nQ='it''s'\n\
                    D=\"a \\\"b\\\"\\nc\"\n; also a comment\nEMPTY=\n";
        let v = parse(text).unwrap();
        assert_eq!(
            v,
            vec![
                ("TOKEN".into(), "abc=def".into()),
                ("PLAIN".into(), "spaced value".into()),
                ("Q".into(), "it''s".into()),
                ("D".into(), "a \"b\"\nc".into()),
                ("EMPTY".into(), "".into()),
            ]
        );
    }

    #[test]
    fn errors_name_the_line_not_the_value() {
        assert_eq!(
            parse("A=1\nnonsense\n").unwrap_err(),
            "line 2: not KEY=VALUE"
        );
        assert_eq!(
            parse("1A=x").unwrap_err(),
            "line 1: \"1A\" is not a variable name"
        );
        assert_eq!(parse("A=\"open").unwrap_err(), "line 1: unterminated \"");
        let e = read(Path::new("/nonexistent/env")).unwrap_err();
        assert!(
            e.starts_with("env_file /nonexistent/env: cannot read"),
            "{e}"
        );
    }
}
