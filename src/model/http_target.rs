//! HTTP jobs: a job whose target is a request instead of a process (`http = { url = ... }`).
//!
//! The definition ([`HttpTarget`]) is stored as a JSON object in `cron_table.http` with the keys
//! of the TOML table, so that TOML and SQL write the same thing. A run sends one request
//! ([`HttpCall`]): the job's body or a JSON body naming the run, an `Idempotency-Key` and the
//! fencing token in headers. The status decides the outcome; the status line and the first
//! bytes of the body are the run's output. This file is the definition; sending it is
//! `exec/http.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

/// Redirects followed at most when a job asks for them.
pub const MAX_REDIRECTS: u64 = 10;

/// Keys of an `http` table, in documentation order.
pub const HTTP_KEYS: [&str; 9] = [
    "url",
    "method",
    "headers",
    "headers_file",
    "body",
    "timeout",
    "success",
    "ca_file",
    "redirects",
];

/// Methods a job may use.
const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// A job's request, validated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HttpTarget {
    pub url: String,
    pub method: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A file of `Name: value` lines the daemon reads at each run (secrets kept out of the
    /// database); its headers come after `headers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers_file: Option<String>,
    /// `None`: the JSON body naming the run (see [`default_body`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Bounds the request (with the job's `timeout`: the smaller wins).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_duration"
    )]
    pub timeout: Option<Duration>,
    /// Statuses that count as success, inclusive.
    pub success: [u16; 2],
    /// A PEM file of CA certificates trusted instead of the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Redirects followed (0: none, the default: a 3xx is the answer).
    #[serde(skip_serializing_if = "is_zero")]
    pub redirects: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn ser_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::model::duration::format_duration(
        d.unwrap_or_default(),
    ))
}

impl HttpTarget {
    /// Parses an `http` table (TOML, or the JSON of `cron_table.http`).
    pub fn from_json(value: &serde_json::Value) -> Result<HttpTarget, String> {
        let map = value
            .as_object()
            .ok_or_else(|| format!("{value} is not a table (url, method, ...)"))?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match map.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(format!("{key}: {v} is not a string")),
            }
        };
        if let Some(k) = map.keys().find(|k| !HTTP_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown key \"{k}\" (known: {})",
                HTTP_KEYS.join(", ")
            ));
        }
        let url = text("url")?.ok_or("url: is missing")?;
        let parsed = reqwest::Url::parse(&url).map_err(|e| format!("url: \"{url}\": {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!("url: \"{url}\" must be an http:// or https:// URL"));
        }
        let method = text("method")?
            .unwrap_or_else(|| "POST".into())
            .to_ascii_uppercase();
        if !METHODS.contains(&method.as_str()) {
            return Err(format!(
                "method: \"{method}\" is not one of {}",
                METHODS.join(", ")
            ));
        }
        let mut headers = BTreeMap::new();
        if let Some(h) = map.get("headers") {
            let h = h
                .as_object()
                .ok_or_else(|| format!("headers: {h} is not a table of strings"))?;
            for (name, v) in h {
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("headers: {name}: {v} is not a string"))?;
                reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("headers: \"{name}\" is not a header name"))?;
                reqwest::header::HeaderValue::from_str(v)
                    .map_err(|_| format!("headers: {name}: the value is not a header value"))?;
                if is_reserved(name) {
                    return Err(format!(
                        "headers: \"{name}\" is set by sqlcron on every request"
                    ));
                }
                headers.insert(name.clone(), v.to_string());
            }
        }
        let timeout = match text("timeout")? {
            None => None,
            Some(t) => Some(
                humantime::parse_duration(t.trim())
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| format!("timeout: \"{t}\" is not a duration such as 30s"))?,
            ),
        };
        let success = match map.get("success") {
            None => [200, 299],
            Some(v) => {
                let pair: Option<Vec<u16>> = v.as_array().and_then(|a| {
                    a.iter()
                        .map(|n| n.as_u64().and_then(|n| u16::try_from(n).ok()))
                        .collect()
                });
                match pair.as_deref() {
                    Some(&[lo, hi]) if (100..=599).contains(&lo) && (lo..=599).contains(&hi) => {
                        [lo, hi]
                    }
                    Some(&[only]) if (100..=599).contains(&only) => [only, only],
                    _ => {
                        return Err(format!(
                            "success: {v} must be [first, last], statuses 100-599 (e.g. [200, 299])"
                        ));
                    }
                }
            }
        };
        let redirects = match map.get("redirects") {
            None => 0,
            Some(v) => v.as_u64().filter(|n| *n <= MAX_REDIRECTS).ok_or_else(|| {
                format!("redirects: {v} must be a whole number 0-{MAX_REDIRECTS}")
            })?,
        };
        let ca_file = text("ca_file")?;
        let headers_file = text("headers_file")?;
        for (key, file) in [("ca_file", &ca_file), ("headers_file", &headers_file)] {
            if let Some(f) = file
                && !std::path::Path::new(f).is_absolute()
            {
                return Err(format!("{key}: \"{f}\" must be an absolute path"));
            }
        }
        Ok(HttpTarget {
            url,
            method,
            headers,
            headers_file,
            body: text("body")?,
            timeout,
            success,
            ca_file,
            redirects,
        })
    }

    /// The canonical JSON stored in `cron_table.http`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Headers every request carries, set by sqlcron and not by a job.
pub fn is_reserved(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "idempotency-key" || n.starts_with("sqlcron-")
}

/// Who a request is for: the run it belongs to.
#[derive(Debug, Clone)]
pub struct RunIdentity {
    pub job: String,
    /// RFC 3339, as in `SQLCRON_SLOT`.
    pub slot: String,
    pub attempt: u32,
    /// The attempt the `Idempotency-Key` names: the same as `attempt`, except for a rerun of a
    /// run lost with its node, which keeps the lost run's key (the receiver may have seen it).
    pub key_attempt: u32,
    pub node: String,
    pub token: i64,
}

/// A slot as the requests name it: RFC 3339 in UTC, with milliseconds when it has any (a manual
/// run's slot), so that two slots never share a key.
pub fn slot_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The JSON body of a job without a `body`.
pub fn default_body(id: &RunIdentity) -> String {
    serde_json::json!({
        "job": id.job,
        "slot": id.slot,
        "attempt": id.attempt,
        "node": id.node,
        "fencing_token": id.token,
    })
    .to_string()
}

/// One request of one run.
#[derive(Debug, Clone)]
pub struct HttpCall {
    pub target: HttpTarget,
    /// The headers of the target's `headers_file`, read by the daemon for this run.
    pub file_headers: Vec<(String, String)>,
    pub id: RunIdentity,
}

impl HttpCall {
    /// `job/slot/attempt`: the same for every delivery of one attempt.
    pub fn idempotency_key(&self) -> String {
        format!("{}/{}/{}", self.id.job, self.id.slot, self.id.key_attempt)
    }

    /// The headers sqlcron adds, after the job's own.
    pub fn run_headers(&self) -> Vec<(&'static str, String)> {
        vec![
            ("Idempotency-Key", self.idempotency_key()),
            ("Sqlcron-Fencing-Token", self.id.token.to_string()),
            ("Sqlcron-Job", self.id.job.clone()),
            ("Sqlcron-Slot", self.id.slot.clone()),
            ("Sqlcron-Attempt", self.id.attempt.to_string()),
            ("Sqlcron-Node", self.id.node.clone()),
        ]
    }
}

/// A URL without its userinfo and query, for messages.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        Err(_) => "(invalid URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_table_round_trips_through_its_json() {
        let t = HttpTarget::from_json(&json!({
            "url": "https://example.test/hook",
            "method": "put",
            "headers": {"Authorization": "Bearer x"},
            "timeout": "30s",
            "success": [200, 204],
            "redirects": 2
        }))
        .unwrap();
        assert_eq!(t.method, "PUT");
        assert_eq!(t.timeout, Some(Duration::from_secs(30)));
        let again = HttpTarget::from_json(&serde_json::from_str(&t.to_json()).unwrap()).unwrap();
        assert_eq!(again, t);
        let plain = HttpTarget::from_json(&json!({"url": "http://h/x"})).unwrap();
        assert_eq!(plain.method, "POST");
        assert_eq!(plain.success, [200, 299]);
        assert_eq!(
            plain.to_json(),
            r#"{"url":"http://h/x","method":"POST","success":[200,299]}"#
        );
    }

    #[test]
    fn bad_tables_are_refused_with_the_key() {
        for (v, says) in [
            (json!({"method": "GET"}), "url: is missing"),
            (
                json!({"url": "ftp://h/x"}),
                "must be an http:// or https://",
            ),
            (json!({"url": "http://h", "method": "FETCH"}), "method:"),
            (
                json!({"url": "http://h", "success": [300, 200]}),
                "success:",
            ),
            (json!({"url": "http://h", "timeout": "soon"}), "timeout:"),
            (json!({"url": "http://h", "redirects": 99}), "redirects:"),
            (json!({"url": "http://h", "ca_file": "ca.pem"}), "absolute"),
            (
                json!({"url": "http://h", "verb": "GET"}),
                "unknown key \"verb\"",
            ),
            (
                json!({"url": "http://h", "headers": {"Idempotency-Key": "x"}}),
                "set by sqlcron",
            ),
            (
                json!({"url": "http://h", "headers": {"X": "a\nb"}}),
                "not a header value",
            ),
            (json!("http://h"), "not a table"),
        ] {
            let e = HttpTarget::from_json(&v).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
    }

    #[test]
    fn the_key_names_the_slot_and_the_attempt_it_delivers() {
        let call = HttpCall {
            file_headers: vec![],
            target: HttpTarget::from_json(&json!({"url": "http://h/x"})).unwrap(),
            id: RunIdentity {
                job: "bill".into(),
                slot: "2026-11-24T10:00:00Z".into(),
                attempt: 3,
                key_attempt: 2,
                node: "a".into(),
                token: 17,
            },
        };
        assert_eq!(call.idempotency_key(), "bill/2026-11-24T10:00:00Z/2");
        let body: serde_json::Value = serde_json::from_str(&default_body(&call.id)).unwrap();
        assert_eq!(body["fencing_token"], 17);
        assert_eq!(body["attempt"], 3);
        assert!(
            call.run_headers()
                .contains(&("Sqlcron-Fencing-Token", "17".into()))
        );
    }

    #[test]
    fn slots_keep_their_milliseconds_only_when_they_have_some() {
        assert_eq!(slot_text(1_795_492_185_000), "2026-11-24T03:49:45Z");
        assert_eq!(slot_text(1_795_492_185_930), "2026-11-24T03:49:45.930Z");
    }

    #[test]
    fn messages_never_show_credentials() {
        assert_eq!(
            redact("https://user:pw@h.test/x?token=s"),
            "https://h.test/x"
        );
    }
}
