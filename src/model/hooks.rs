//! The settings of alerts: the hooks a job's events fire (`on_failure`, `on_success`,
//! `on_missed`, `on_recovery`: a command or a webhook), the dead-man's switch (`alert_after`),
//! the ping URL and how deliveries are timed. Read from TOML and rows; the rules that decide
//! which event a record raises are in `alerts.rs`. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

/// Where an event goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// `/bin/sh -c TEXT`, run like the job itself (same user, environment, working directory).
    Command(String),
    /// A `POST` of the event's JSON body.
    Webhook {
        url: String,
        headers: BTreeMap<String, String>,
        /// A file of `Name: value` lines read at each delivery (secrets kept out of the
        /// database), after `headers`.
        headers_file: Option<String>,
    },
}

impl Hook {
    /// Reads `"text"` (a command), `{ command = "..." }` or `{ url = "...", headers = {...} }`.
    fn from_json(v: &Value) -> Result<Hook, String> {
        match v {
            Value::String(s) if !s.trim().is_empty() => Ok(Hook::Command(s.clone())),
            Value::Object(m) => {
                let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
                if let Some(k) = m
                    .keys()
                    .find(|k| !["command", "url", "headers", "headers_file"].contains(&k.as_str()))
                {
                    return Err(format!(
                        "unknown key \"{k}\" (command, url, headers, headers_file)"
                    ));
                }
                match (text("command"), text("url")) {
                    (Some(c), None) if !c.trim().is_empty() => Ok(Hook::Command(c)),
                    (None, Some(url)) => {
                        if !(url.starts_with("http://") || url.starts_with("https://")) {
                            return Err(format!(
                                "url \"{url}\" must start with http:// or https://"
                            ));
                        }
                        let headers = match m.get("headers") {
                            None => BTreeMap::new(),
                            Some(h) => serde_json::from_value(h.clone())
                                .map_err(|_| "headers must be a table of strings".to_string())?,
                        };
                        let headers_file = text("headers_file");
                        if let Some(f) = &headers_file
                            && !std::path::Path::new(f).is_absolute()
                        {
                            return Err(format!("headers_file \"{f}\" must be an absolute path"));
                        }
                        Ok(Hook::Webhook {
                            url,
                            headers,
                            headers_file,
                        })
                    }
                    _ => Err("give either a non-empty command or a url".into()),
                }
            }
            _ => Err("must be a command (a string), a table with command or url, or false".into()),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Hook::Command(c) => json!({ "command": c }),
            Hook::Webhook {
                url,
                headers,
                headers_file,
            } => {
                let mut m = serde_json::Map::new();
                m.insert("url".into(), json!(url));
                if !headers.is_empty() {
                    m.insert("headers".into(), json!(headers));
                }
                if let Some(f) = headers_file {
                    m.insert("headers_file".into(), json!(f));
                }
                Value::Object(m)
            }
        }
    }

    /// The hook as stored with an event (`cron_events.hook`).
    pub fn encode(&self) -> String {
        self.to_json().to_string()
    }

    pub fn decode(text: &str) -> Result<Hook, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
        Hook::from_json(&v)
    }
}

/// A job's setting for one hook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Setting {
    /// Not set: `[defaults]` decides.
    #[default]
    Inherit,
    /// `false`: no hook, whatever `[defaults]` says.
    Off,
    On(Hook),
}

impl Setting {
    fn from_json(v: Option<&Value>) -> Result<Setting, String> {
        match v {
            None | Some(Value::Null) => Ok(Setting::Inherit),
            Some(Value::Bool(false)) => Ok(Setting::Off),
            Some(v) => Hook::from_json(v).map(Setting::On),
        }
    }

    fn to_json(&self) -> Option<Value> {
        match self {
            Setting::Inherit => None,
            Setting::Off => Some(Value::Bool(false)),
            Setting::On(h) => Some(h.to_json()),
        }
    }

    fn or<'a>(&'a self, default: &'a Setting) -> Option<&'a Hook> {
        match self {
            Setting::Inherit => match default {
                Setting::On(h) => Some(h),
                _ => None,
            },
            Setting::Off => None,
            Setting::On(h) => Some(h),
        }
    }
}

/// The kinds of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventKind {
    /// A slot failed for good: its last allowed attempt failed or timed out.
    Failure,
    /// A run succeeded.
    Success,
    /// A slot was skipped, abandoned or lost without a rerun, or the job was silent for longer
    /// than `alert_after`.
    Missed,
    /// The first success after a slot that ended badly.
    Recovery,
}

impl EventKind {
    pub const ALL: [EventKind; 4] = [
        EventKind::Failure,
        EventKind::Success,
        EventKind::Missed,
        EventKind::Recovery,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Failure => "failure",
            EventKind::Success => "success",
            EventKind::Missed => "missed",
            EventKind::Recovery => "recovery",
        }
    }

    /// The TOML key of its hook.
    pub fn key(self) -> &'static str {
        match self {
            EventKind::Failure => "on_failure",
            EventKind::Success => "on_success",
            EventKind::Missed => "on_missed",
            EventKind::Recovery => "on_recovery",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The alert keys of `[defaults]`, a `[[job]]` or a row's `alerts` column (a JSON object with
/// the same keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlertSettings {
    pub on_failure: Setting,
    pub on_success: Setting,
    pub on_missed: Setting,
    pub on_recovery: Setting,
    /// The dead-man's switch: alert when the job has not succeeded for this long.
    pub alert_after: Option<Duration>,
    /// Healthchecks-style pings: `URL/start`, `URL` on success, `URL/fail` on failure.
    pub ping_url: Option<String>,
}

impl AlertSettings {
    /// Reads the keys from a JSON object; unknown keys are an error.
    pub fn from_json(v: &Value) -> Result<AlertSettings, String> {
        let Value::Object(m) = v else {
            return Err("must be a JSON object".into());
        };
        let mut s = AlertSettings::default();
        for (k, v) in m {
            let field = |r: Result<Setting, String>| r.map_err(|e| format!("{k}: {e}"));
            match k.as_str() {
                "on_failure" => s.on_failure = field(Setting::from_json(Some(v)))?,
                "on_success" => s.on_success = field(Setting::from_json(Some(v)))?,
                "on_missed" => s.on_missed = field(Setting::from_json(Some(v)))?,
                "on_recovery" => s.on_recovery = field(Setting::from_json(Some(v)))?,
                "alert_after" => {
                    let text = v
                        .as_str()
                        .ok_or("alert_after: must be a duration such as \"26h\"")?;
                    let d = crate::model::duration::parse_duration(text)
                        .map_err(|e| format!("alert_after: {e}"))?;
                    if d.is_zero() {
                        return Err("alert_after: must be more than zero".into());
                    }
                    s.alert_after = Some(d);
                }
                "ping_url" => {
                    let url = v.as_str().ok_or("ping_url: must be a string")?;
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(format!(
                            "ping_url: \"{url}\" must start with http:// or https://"
                        ));
                    }
                    s.ping_url = Some(url.trim_end_matches('/').to_string());
                }
                other => return Err(format!("unknown key \"{other}\"")),
            }
        }
        Ok(s)
    }

    /// The stored form (`cron_table.alerts`); `None` when nothing is set.
    pub fn to_json(&self) -> Option<String> {
        let mut m = serde_json::Map::new();
        for k in EventKind::ALL {
            if let Some(v) = self.setting(k).to_json() {
                m.insert(k.key().into(), v);
            }
        }
        if let Some(d) = self.alert_after {
            m.insert(
                "alert_after".into(),
                crate::model::duration::format_duration(d).into(),
            );
        }
        if let Some(u) = &self.ping_url {
            m.insert("ping_url".into(), u.clone().into());
        }
        (!m.is_empty()).then(|| Value::Object(m).to_string())
    }

    pub fn is_empty(&self) -> bool {
        *self == AlertSettings::default()
    }

    fn setting(&self, kind: EventKind) -> &Setting {
        match kind {
            EventKind::Failure => &self.on_failure,
            EventKind::Success => &self.on_success,
            EventKind::Missed => &self.on_missed,
            EventKind::Recovery => &self.on_recovery,
        }
    }

    /// The job's settings laid over `defaults`.
    pub fn resolve(&self, defaults: &AlertSettings) -> Alerts {
        let hook = |k: EventKind| self.setting(k).or(defaults.setting(k)).cloned();
        Alerts {
            on_failure: hook(EventKind::Failure),
            on_success: hook(EventKind::Success),
            on_missed: hook(EventKind::Missed),
            on_recovery: hook(EventKind::Recovery),
            alert_after: self.alert_after.or(defaults.alert_after),
            ping_url: self.ping_url.clone().or(defaults.ping_url.clone()),
        }
    }
}

/// A job's alerts after defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Alerts {
    pub on_failure: Option<Hook>,
    pub on_success: Option<Hook>,
    pub on_missed: Option<Hook>,
    pub on_recovery: Option<Hook>,
    pub alert_after: Option<Duration>,
    pub ping_url: Option<String>,
}

impl Alerts {
    pub fn hook(&self, kind: EventKind) -> Option<&Hook> {
        match kind {
            EventKind::Failure => self.on_failure.as_ref(),
            EventKind::Success => self.on_success.as_ref(),
            EventKind::Missed => self.on_missed.as_ref(),
            EventKind::Recovery => self.on_recovery.as_ref(),
        }
    }

    /// Whether any hook is set (the history is then watched for events).
    pub fn any_hook(&self) -> bool {
        EventKind::ALL.iter().any(|k| self.hook(*k).is_some())
    }
}

/// `[alerts]`: how hooks are delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// The longest one delivery (a command or a request) may take.
    pub timeout: Duration,
    /// An event not delivered within this time of its creation is given up (state `failed`).
    pub give_up_after: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            timeout: Duration::from_secs(30),
            give_up_after: Duration::from_secs(3600),
        }
    }
}
