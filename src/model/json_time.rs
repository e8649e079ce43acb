//! One spelling of an instant in every JSON the project prints (`status`, `history`, `explain`,
//! `events`, `audit`, `locks`, `doctor --json` and the dashboard's API): RFC 3339 in UTC, with
//! the milliseconds only when there are any (`2026-03-29T01:00:00Z`,
//! `2026-03-29T01:00:00.250Z`). It is the spelling of `SQLCRON_SLOT` and the journal, so a
//! script compares a history record's slot with its run's environment as text. Durations stay
//! numbers, with their unit in their name (`held_ms`). docs/json.md says why.
//!
//! Used as `#[serde(serialize_with = "json_time::instant")]` (or `opt_instant`) on a field of
//! milliseconds since the epoch.

use chrono::{DateTime, SecondsFormat};

/// Milliseconds since the epoch as RFC 3339 UTC; the number itself if out of chrono's range.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| ms.to_string())
}

/// Serializes milliseconds since the epoch as [`rfc3339`].
pub fn instant<S: serde::Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*ms))
}

/// [`instant`] of an optional field (`null` when absent).
pub fn opt_instant<S: serde::Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => instant(ms, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Row {
        #[serde(serialize_with = "instant")]
        at: i64,
        #[serde(serialize_with = "opt_instant")]
        until: Option<i64>,
        #[serde(serialize_with = "opt_instant")]
        never: Option<i64>,
    }

    #[test]
    fn instants_are_rfc3339_utc_with_milliseconds_only_when_there_are_any() {
        let row = Row {
            at: 1_774_746_000_000,
            until: Some(1_774_746_000_250),
            never: None,
        };
        assert_eq!(
            serde_json::to_string(&row).unwrap(),
            r#"{"at":"2026-03-29T01:00:00Z","until":"2026-03-29T01:00:00.250Z","never":null}"#
        );
        // Out of chrono's range: the number, never a panic.
        assert_eq!(rfc3339(i64::MAX), i64::MAX.to_string());
    }
}
