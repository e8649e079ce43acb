//! `[web]`: the dashboard's listener, sub-path, connections, users and switches
//! (docs/dashboard.md). Off unless `listen` is set; beyond this host it needs a users file.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::model::access::{Role, WebUser, parse_users};

use super::validate::Collector;
use super::{ConfigError, Problem, secrets};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeb {
    /// `host:port`; the dashboard is off without it.
    pub listen: Option<String>,
    /// The path prefix behind a reverse proxy, e.g. `/cron`.
    pub base_path: Option<String>,
    /// The prefix the browser sees, when a proxy strips it before passing a request on
    /// (`base_path` is then what reaches the node, usually none). Default: `base_path`.
    pub public_path: Option<String>,
    /// Database connections the dashboard may hold (its own pool).
    pub pool_size: Option<u32>,
    /// `name:role:$argon2id$...` lines (`sqlcron web-user` prints one).
    pub users_file: Option<String>,
    /// What a request without a session may do, on a loopback listener without a users file.
    pub anonymous_role: Option<String>,
    /// Nobody acts, whatever their role.
    pub read_only: Option<bool>,
    /// Host names (as the browser writes them, with the port if not 80/443) under which
    /// anonymous visitors are served, besides localhost, 127.0.0.1 and [::1].
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a sign-in lasts.
    pub session_lifetime: Option<String>,
    /// Addresses of the reverse proxies whose `X-Forwarded-Proto` (and `sso_header`) are
    /// believed; from any other peer those headers are removed. Default: 127.0.0.1 and ::1.
    pub trusted_proxies: Option<Vec<String>>,
    /// A header set by a trusted proxy that has authenticated the user (single sign-on), e.g.
    /// `X-Remote-User`: it names a user of `users_file`, whose role applies.
    pub sso_header: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WebConfig {
    pub listen: Option<SocketAddr>,
    /// Empty, or `/a/b` (no trailing slash): where the routes are served.
    pub base_path: String,
    /// Empty, or `/a/b`: the prefix of every link, redirect and cookie (the browser's view).
    pub public_path: String,
    pub pool_size: u32,
    pub users_file: Option<String>,
    /// After [`read_users`]: the users of `users_file`.
    pub users: Vec<WebUser>,
    /// `None`: a request must sign in.
    pub anonymous_role: Option<Role>,
    pub read_only: bool,
    pub session_lifetime: Duration,
    /// See [`RawWeb::allowed_hosts`].
    pub allowed_hosts: Vec<String>,
    /// See [`RawWeb::trusted_proxies`].
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// See [`RawWeb::sso_header`]; lower case.
    pub sso_header: Option<String>,
}

pub const POOL_SIZE_DEFAULT: u32 = 2;
pub const SESSION_LIFETIME_DEFAULT: Duration = Duration::from_secs(12 * 3600);

pub(super) fn validate(raw: &RawWeb, c: &mut Collector) -> WebConfig {
    let listen = raw
        .listen
        .as_deref()
        .and_then(|l| match l.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                c.push(
                    "[web] listen",
                    format!("\"{l}\" is not an address and port (e.g. \"127.0.0.1:8080\")"),
                );
                None
            }
        });
    let base_path = sub_path(raw.base_path.as_deref(), "[web] base_path", c);
    let public_path = match raw.public_path.as_deref() {
        None => base_path.clone(),
        p => sub_path(p, "[web] public_path", c),
    };
    let pool_size = match raw.pool_size {
        None => POOL_SIZE_DEFAULT,
        Some(n) if (1..=32).contains(&n) => n,
        Some(n) => {
            c.push("[web] pool_size", format!("{n} must be 1 to 32"));
            POOL_SIZE_DEFAULT
        }
    };
    let anonymous_role = match raw.anonymous_role.as_deref() {
        None => None,
        Some("none") => None,
        Some(r) => match Role::parse(r) {
            Some(role) => Some(role),
            None => {
                c.push(
                    "[web] anonymous_role",
                    format!("\"{r}\" must be none, viewer, operator or admin"),
                );
                None
            }
        },
    };
    // Without a users file, on a loopback listener, requests are anonymous viewers unless said.
    let anonymous_role = match (&raw.users_file, raw.anonymous_role.as_deref()) {
        (None, None) => Some(Role::Viewer),
        _ => anonymous_role,
    };
    // An anonymous visitor is every account on this host, every job running on it included:
    // one that may act could create a job that runs as any account of allowed_users.
    if let Some(role) = anonymous_role.filter(|r| *r > Role::Viewer) {
        c.push(
            "[web] anonymous_role",
            format!(
                "\"{}\" would let every account on this host, and every job running on it, act \
                 on the cluster (create a job that runs as any account of [daemon] \
                 allowed_users): set users_file and sign in, or anonymous_role = \"viewer\"",
                role.name()
            ),
        );
    }
    if let Some(addr) = listen
        && !addr.ip().is_loopback()
    {
        if raw.users_file.is_none() {
            c.push(
                "[web] listen",
                format!(
                    "\"{addr}\" is reachable beyond this host: set [web] users_file (sqlcron web-user makes its lines), or listen on 127.0.0.1"
                ),
            );
        } else if anonymous_role.is_some() {
            c.push(
                "[web] anonymous_role",
                format!(
                    "anonymous access on \"{addr}\", reachable beyond this host: remove anonymous_role"
                ),
            );
        }
    }
    let session_lifetime = match raw.session_lifetime.as_deref() {
        None => SESSION_LIFETIME_DEFAULT,
        Some(text) => match crate::model::duration::parse_duration(text) {
            Ok(d) if d >= Duration::from_secs(60) && d <= Duration::from_secs(30 * 86_400) => d,
            _ => {
                c.push(
                    "[web] session_lifetime",
                    format!("\"{text}\" must be a duration from 1m to 30d"),
                );
                SESSION_LIFETIME_DEFAULT
            }
        },
    };
    let trusted_proxies = match &raw.trusted_proxies {
        None => vec![
            std::net::IpAddr::from([127, 0, 0, 1]),
            std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ],
        Some(list) => list
            .iter()
            .filter_map(|a| match a.parse::<std::net::IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => {
                    c.push(
                        "[web] trusted_proxies",
                        format!("\"{a}\" is not an IP address (e.g. \"127.0.0.1\")"),
                    );
                    None
                }
            })
            .collect(),
    };
    let sso_header = match raw.sso_header.as_deref() {
        None => None,
        Some(h)
            if !h.is_empty()
                && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !["host", "cookie", "origin", "referer", "x-forwarded-proto"]
                    .contains(&h.to_ascii_lowercase().as_str()) =>
        {
            if raw.users_file.is_none() {
                c.push(
                    "[web] sso_header",
                    "names users of [web] users_file: set users_file too".to_string(),
                );
            }
            if raw.trusted_proxies.is_none() {
                c.push(
                    "[web] sso_header",
                    "whoever may send it is signed in as anyone: set [web] trusted_proxies to the proxy's address explicitly (every process on a listed address counts as the proxy)".to_string(),
                );
            }
            Some(h.to_ascii_lowercase())
        }
        Some(h) => {
            c.push(
                "[web] sso_header",
                format!("\"{h}\" must be a header name of letters, digits and - (e.g. \"X-Remote-User\")"),
            );
            None
        }
    };
    WebConfig {
        listen,
        base_path,
        public_path,
        pool_size,
        users_file: raw.users_file.clone(),
        users: vec![],
        anonymous_role,
        read_only: raw.read_only.unwrap_or(false),
        session_lifetime,
        allowed_hosts: raw.allowed_hosts.clone().unwrap_or_default(),
        trusted_proxies,
        sso_header,
    }
}

/// A path prefix as written (`/cron`, `/ops/cron/`): empty, or `/a/b` without the trailing
/// slash; anything else is a problem of `key`.
fn sub_path(raw: Option<&str>, key: &str, c: &mut Collector) -> String {
    match raw.map(|p| p.trim_end_matches('/')) {
        None | Some("") => String::new(),
        Some(p)
            if p.starts_with('/')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/-_.~".contains(c))
                && !p.contains("//")
                && !p.split('/').any(|seg| seg == "." || seg == "..") =>
        {
            p.to_string()
        }
        Some(p) => {
            c.push(
                key,
                format!(
                    "\"{p}\" must start with / and hold letters, digits and / - _ . ~ (e.g. \"/cron\")"
                ),
            );
            String::new()
        }
    }
}

/// The users of a users file, with the checks of its mode: refused when every user may read it
/// (it holds password hashes) or its group may write it, and when it names nobody. The
/// dashboard calls it again when the file changes.
///
/// # Errors
/// A sentence naming the file and the fix.
pub fn load_users(file: &str) -> Result<Vec<WebUser>, String> {
    secrets::refuse_open_file(Path::new(file))?;
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(file)
            && meta.permissions().mode() & 0o020 != 0
        {
            return Err(format!(
                "{file} is writable by its group: anyone in it could add an admin; chmod 0640 {file}"
            ));
        }
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let users = parse_users(&text).map_err(|e| format!("{file}: {e}"))?;
    if users.is_empty() {
        return Err(format!("{file} names no user"));
    }
    Ok(users)
}

/// Reads `[web] users_file` (refused when every user may read it: it holds password hashes).
pub(super) fn read_users(web: &mut WebConfig, path: &Path) -> Result<(), ConfigError> {
    let Some(file) = web.users_file.clone() else {
        return Ok(());
    };
    let problem = |message: String| ConfigError {
        path: path.to_path_buf(),
        problems: vec![Problem {
            location: "[web] users_file".into(),
            message,
        }],
    };
    web.users = load_users(&file).map_err(problem)?;
    Ok(())
}
