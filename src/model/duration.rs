//! Durations as the configuration, the rows and the messages write them: `"500ms"`, `"30s"`,
//! `"5m"`, `"1h 30m"`. One parser and one formatter, so that what sqlcron prints reads back.

use std::time::Duration;

/// Parses a duration as the configuration accepts it (`"500ms"`, `"30s"`, `"5m"`, `"1h"`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("\"{text}\" is not a duration ({e}); use e.g. \"500ms\", \"30s\", \"5m\", \"1h\"")
    })
}

/// Formats a duration the way the configuration accepts it back (`"1h 30m"`).
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_duration_parses_back() {
        for d in [
            Duration::from_millis(500),
            Duration::from_secs(90),
            Duration::from_secs(26 * 3600),
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[test]
    fn a_bad_duration_says_what_to_write() {
        let e = parse_duration("soon").unwrap_err();
        assert!(e.contains("\"soon\" is not a duration"), "{e}");
        assert!(e.contains("\"30s\""), "{e}");
    }
}
