//! Header files (`headers_file` of an HTTP job or a webhook): `Name: value` lines the daemon
//! reads at each request, so a token can live in a file on the node instead of in the
//! database, where every reader of `cron_table` would see it.
//!
//! Syntax: blank lines and lines starting with `#` are ignored; each other line is a header
//! name, a colon, and its value (surrounding spaces trimmed). The file must be one only root or
//! the daemon's user could have written (as an `env_file`, see `envfile.rs`).

use std::path::Path;

/// Parses the text of a header file; errors name the line, never its value.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |m: &str| format!("line {}: {m}", i + 1);
        let (name, value) = line.split_once(':').ok_or_else(|| at("not Name: value"))?;
        let (name, value) = (name.trim(), value.trim());
        reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| at("the text before : is not a header name"))?;
        reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| at("the value is not a header value"))?;
        if crate::model::http_target::is_reserved(name) {
            return Err(at(&format!(
                "\"{name}\" is set by sqlcron on every request"
            )));
        }
        headers.push((name.to_string(), value.to_string()));
    }
    Ok(headers)
}

/// Reads and parses the header file at `path`, with the checks of `envfile::read_trusted`.
pub fn read(path: &Path) -> Result<Vec<(String, String)>, String> {
    let err = |m: String| format!("headers_file {}: {m}", path.display());
    let text = crate::exec::envfile::read_trusted(path).map_err(err)?;
    parse(&text).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_name_value_lines_and_names_bad_lines_without_their_value() {
        let h = parse("# token\nAuthorization: Bearer s3cret\n\nX-Team:  ops \n").unwrap();
        assert_eq!(
            h,
            vec![
                ("Authorization".to_string(), "Bearer s3cret".to_string()),
                ("X-Team".to_string(), "ops".to_string())
            ]
        );
        let e = parse("Authorization Bearer s3cret\n").unwrap_err();
        assert_eq!(e, "line 1: not Name: value");
        assert!(!e.contains("s3cret"));
        assert!(parse("Bad Name: x\n").unwrap_err().starts_with("line 1:"));
        assert!(parse("Idempotency-Key: x\n").is_err());
    }
}
