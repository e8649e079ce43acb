//! Who is asking: a session cookie (made by signing in with a `[web] users_file` account, kept
//! in the database so that every node knows it), or the anonymous role of a loopback listener
//! without users. Cross-site requests that would act are refused (`Sec-Fetch-Site`, `Origin`),
//! and sign-ins are limited per user name.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use serde::Deserialize;
use sha2::Digest;

use crate::model::access::{Role, WebUser};

use super::Web;
use super::pages::page;
use super::zone::Shown;

const COOKIE: &str = "sqlcron_session";
/// Failed sign-ins of one user name allowed within [`LOGIN_WINDOW`].
const LOGIN_FAILURES: u32 = 5;
const LOGIN_WINDOW: Duration = Duration::from_secs(300);
/// The limiter's key for every name the users file does not hold.
const UNKNOWN_USER: &str = "\0unknown";
/// Password checks running at once, node-wide.
static VERIFYING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// The users of `[web] users_file`, read again when the file changes (its modification time
/// or size, looked at once a second at most), so that a removed user, a new role or a new
/// password takes effect without a restart: sessions carry a fingerprint of the password hash
/// they were made with. A file that became invalid is logged and the users read before stay.
pub(crate) struct UsersFile {
    file: Option<String>,
    state: Mutex<UsersState>,
}

struct UsersState {
    users: std::sync::Arc<Vec<WebUser>>,
    stamp: Option<(std::time::SystemTime, u64)>,
    looked: Instant,
}

fn stamp(file: &str) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(file).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl UsersFile {
    pub(crate) fn new(file: Option<String>, users: Vec<WebUser>) -> UsersFile {
        let stamp = file.as_deref().and_then(stamp);
        UsersFile {
            file,
            state: Mutex::new(UsersState {
                users: std::sync::Arc::new(users),
                stamp,
                looked: Instant::now(),
            }),
        }
    }

    /// The users as the file says now.
    pub(crate) fn current(&self) -> std::sync::Arc<Vec<WebUser>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = &self.file else {
            return state.users.clone();
        };
        if state.looked.elapsed() < Duration::from_secs(1) {
            return state.users.clone();
        }
        state.looked = Instant::now();
        let now = stamp(file);
        if now != state.stamp {
            state.stamp = now;
            match crate::config::web::load_users(file) {
                Ok(users) => {
                    tracing::info!(file, users = users.len(), "web: users file read again");
                    state.users = std::sync::Arc::new(users);
                }
                Err(e) => tracing::error!("web: users file not read again, keeping its users: {e}"),
            }
        }
        state.users.clone()
    }
}

/// The one asking, as the handlers see them.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The user name; `None` for the anonymous role.
    pub user: Option<String>,
    pub role: Role,
    /// The session's id (hash), to end it; `None` for anonymous and single-sign-on callers.
    pub session: Option<String>,
    /// Signed in by an API token (`Authorization: Bearer`): exempt from the origin check, as a
    /// browser never sends that header on its own.
    pub token: bool,
    /// The zone the pages show times in (the reader's choice, `zone.rs`).
    pub shown: Shown,
}

impl Caller {
    /// The name the audit trail records.
    pub fn who(&self) -> String {
        match &self.user {
            Some(u) => format!("web:{u}"),
            None => "web:anonymous".into(),
        }
    }
}

/// The caller of a request: its session if the cookie names a live one, else the anonymous
/// role if there is one. `None`: the request must sign in.
pub(crate) async fn caller(web: &Web, headers: &HeaderMap) -> Result<Option<Caller>, String> {
    // Single sign-on: the header survives only from a trusted proxy (`untrusted_headers`).
    if let Some(name) = web
        .config
        .sso_header
        .as_deref()
        .and_then(|h| headers.get(h))
        .and_then(|v| v.to_str().ok())
    {
        return Ok(web
            .users
            .current()
            .iter()
            .find(|u| u.name == name)
            .map(|u| Caller {
                user: Some(u.name.clone()),
                role: u.role,
                session: None,
                token: false,
                shown: Shown::Utc,
            }));
    }
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return token_caller(web, bearer).await;
    }
    if let Some(value) = cookie(headers, COOKIE) {
        // `<secret>.<fingerprint of the user's password hash>`: a new password (or a new
        // hash of the same one) ends every session made with the old.
        let (secret, print) = value.split_once('.').unwrap_or((&value, ""));
        let id = session_id(secret);
        if let Some(s) = web
            .store
            .web_session(&id)
            .await
            .map_err(|e| e.to_string())?
        {
            // A user removed from the file, or given another role, is what the file says now.
            if let Some(u) = web
                .users
                .current()
                .iter()
                .find(|u| u.name == s.user && same(&fingerprint(&u.hash), print))
            {
                return Ok(Some(Caller {
                    user: Some(u.name.clone()),
                    role: u.role,
                    session: Some(id),
                    token: false,
                    shown: Shown::Utc,
                }));
            }
        }
    }
    if !anonymous_host(headers, &web.config.allowed_hosts) || proxied(headers) {
        return Ok(None);
    }
    Ok(web.config.anonymous_role.map(|role| Caller {
        user: None,
        role,
        session: None,
        token: false,
        shown: Shown::Utc,
    }))
}

/// The caller an API token names, if it is a live token: `sqlcron_<prefix>_<secret>`, the
/// row found by its prefix, the secret's SHA-256 compared in constant time.
async fn token_caller(web: &Web, token: &str) -> Result<Option<Caller>, String> {
    let Some((prefix, secret)) = split_token(token) else {
        return Ok(None);
    };
    let Some(row) = web
        .store
        .web_token(prefix)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    Ok(same(&session_id(secret), &row.hash)
        .then_some(())
        .and_then(|()| Role::parse(&row.role))
        .map(|role| Caller {
            user: Some(format!("token:{}", row.name)),
            role,
            session: None,
            token: true,
            shown: Shown::Utc,
        }))
}

/// `sqlcron_<12 hex>_<64 hex>` → (prefix, secret).
fn split_token(token: &str) -> Option<(&str, &str)> {
    let (prefix, secret) = token.strip_prefix("sqlcron_")?.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(prefix, 12) && hex(secret, 64)).then_some((prefix, secret))
}

/// A new API token: what to give its user once (`sqlcron_<prefix>_<secret>`), and the row that
/// keeps it (the prefix and the secret's SHA-256).
pub fn new_token(name: &str, role: Role) -> (String, crate::store::web::WebToken) {
    let hex = |n: usize| -> String {
        (0..n)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect()
    };
    let (prefix, secret) = (hex(6), hex(32));
    let row = crate::store::web::WebToken {
        name: name.to_string(),
        prefix: prefix.clone(),
        hash: session_id(&secret),
        role: role.name().to_string(),
    };
    (format!("sqlcron_{prefix}_{secret}"), row)
}

/// Whether the request says it came through a reverse proxy: anonymous access is for a
/// browser on this host, and a proxy in front (which may pass `Host: 127.0.0.1:8080` on)
/// would give it to everyone the proxy serves.
fn proxied(headers: &HeaderMap) -> bool {
    [
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
        "forwarded",
        "via",
    ]
    .iter()
    .any(|h| headers.contains_key(*h))
}

/// Whether the request's `Host` is this host's own name for a loopback listener (localhost,
/// 127.0.0.1, [::1]) or one of `[web] allowed_hosts`. Anonymous visitors are served only then:
/// a hostile page whose name was re-pointed at 127.0.0.1 (DNS rebinding) would otherwise read
/// the dashboard as a same-origin page.
pub(crate) fn anonymous_host(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    let name = name.to_ascii_lowercase();
    matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1")
        || allowed
            .iter()
            .any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(&name))
}

/// Whether a request that acts comes from the dashboard's own pages: browsers send
/// `Sec-Fetch-Site` (it must be `same-origin`) or at least `Origin` (its host must be the
/// request's `Host`). A request with neither is refused.
pub(crate) fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return if site == "same-origin" {
            Ok(())
        } else {
            Err(format!("a cross-site request (Sec-Fetch-Site: {site})"))
        };
    }
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .ok_or("neither Sec-Fetch-Site nor Origin: refused as possibly cross-site")?;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin.split_once("://").map_or("", |(_, h)| h);
    if !host.is_empty() && origin_host == host {
        Ok(())
    } else {
        Err(format!("a cross-origin request (Origin: {origin})"))
    }
}

/// The value of cookie `name`.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// What the database keeps of a session secret: its SHA-256, in hex.
/// What a session cookie carries of its user's password hash: 16 hex digits of a SHA-256 over
/// it, enough to notice a change and nothing to guess the hash by.
fn fingerprint(hash: &str) -> String {
    session_id(&format!("sqlcron session of {hash}"))[..16].to_string()
}

/// Equal, compared in constant time.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn session_id(secret: &str) -> String {
    sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Failed sign-ins per known user name (and one count for all unknown names), so at most one
/// entry per line of the users file and one more.
#[derive(Debug, Default)]
pub(crate) struct LoginLimiter(Mutex<HashMap<String, (u32, Instant)>>);

impl LoginLimiter {
    fn blocked(&self, user: &str, now: Instant) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(user).is_some_and(|(n, first)| {
            *n >= LOGIN_FAILURES && now.duration_since(*first) < LOGIN_WINDOW
        })
    }

    fn failed(&self, user: &str, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, first)| now.duration_since(*first) < LOGIN_WINDOW);
        let entry = map.entry(user.to_string()).or_insert((0, now));
        entry.0 += 1;
    }

    fn succeeded(&self, user: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(user);
    }
}

/// The page asked for before signing in (`?next=`).
#[derive(Deserialize)]
pub(crate) struct NextPage {
    next: Option<String>,
}

pub(crate) async fn login_page(
    State(web): State<Web>,
    axum::extract::Query(asked): axum::extract::Query<NextPage>,
) -> Response {
    let next = asked.next.and_then(|n| next_after_sign_in(&web, &n));
    login_form(&web, None, StatusCode::OK, next.as_deref())
}

/// Where a sign-in may land: a page of this dashboard, under its base path, never another
/// site (`//host`, a scheme), the sign-in page itself, or an address with control characters.
pub(crate) fn next_after_sign_in(web: &Web, next: &str) -> Option<String> {
    let base = web.config.public_path.as_str();
    let under_base = if base.is_empty() {
        next.starts_with('/')
    } else {
        next == base
            || next.starts_with(&format!("{base}/"))
            || next.starts_with(&format!("{base}?"))
    };
    let login = web.href("/login");
    (under_base
        && !dot_segment(next)
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
        && next != login
        && !next.starts_with(&format!("{login}?"))
        && next.len() <= 2048)
        .then(|| next.to_string())
}

/// Whether the path of `address` holds a `.` or `..` segment, written plainly or percent-encoded
/// (`%2e`): a browser resolves `/cron/../other` to `/other`, outside the dashboard's prefix.
pub(crate) fn dot_segment(address: &str) -> bool {
    let path = address.split(['?', '#']).next().unwrap_or_default();
    path.split('/').any(|seg| {
        let plain = seg.to_ascii_lowercase().replace("%2e", ".");
        plain == "." || plain == ".."
    })
}

fn login_form(web: &Web, error: Option<&str>, status: StatusCode, next: Option<&str>) -> Response {
    let action = web.href("/login");
    let body = maud::html! {
        h1 { "Sign in" }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form method="post" action=(action) {
            @if let Some(n) = next { input type="hidden" name="next" value=(n); }
            label for="user" { "User" }
            input #user name="user" autocomplete="username" required autofocus;
            label for="password" { "Password" }
            input #password name="password" type="password" autocomplete="current-password" required;
            button type="submit" { "Sign in" }
        }
    };
    (status, page(web, None, "Sign in", body)).into_response()
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    user: String,
    password: String,
    #[serde(default)]
    next: Option<String>,
}

pub(crate) async fn login(
    State(web): State<Web>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Err(why) = same_origin(&headers) {
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    let next = form
        .next
        .as_deref()
        .and_then(|n| next_after_sign_in(&web, n));
    let now = Instant::now();
    let user = web
        .users
        .current()
        .iter()
        .find(|u| u.name == form.user)
        .cloned();
    // Failures are counted per known name, and all unknown names together: the counter's size
    // is bounded by the users file, and made-up names cannot push a real one out.
    let key = user
        .as_ref()
        .map_or(UNKNOWN_USER, |u| u.name.as_str())
        .to_string();
    // A blocked name gets the answer of a wrong password, after the same work: a different
    // answer (or a faster one) would tell a known name from an unknown one, since unknown
    // names share one count.
    let blocked = web.logins.blocked(&key, now);
    // Each check costs 19 MiB and tens of milliseconds: a few at a time, the rest are told to
    // try again.
    let Ok(_permit) = VERIFYING.try_acquire() else {
        return login_form(
            &web,
            Some("Too many sign-ins at once: try again in a moment."),
            StatusCode::TOO_MANY_REQUESTS,
            next.as_deref(),
        );
    };
    // An unknown user costs the same hash as a known one.
    let hash = user
        .as_ref()
        .filter(|_| !blocked)
        .map_or_else(dummy_hash, |u| u.hash.clone());
    let password = form.password.clone();
    let matches = tokio::task::spawn_blocking(move || verify(&password, &hash))
        .await
        .unwrap_or(false);
    let Some(user) = user.filter(|_| matches && !blocked) else {
        if blocked {
            tracing::warn!(
                known_user = key != UNKNOWN_USER,
                "web: a sign-in refused: too many failures of this name in five minutes"
            );
            return login_form(
                &web,
                Some("Wrong user or password."),
                StatusCode::UNAUTHORIZED,
                next.as_deref(),
            );
        }
        web.logins.failed(&key, now);
        // The name as typed is not logged: it may be a password typed in the wrong box.
        tracing::warn!(known_user = key != UNKNOWN_USER, user = %if key == UNKNOWN_USER { "-" } else { key.as_str() }, "web: a sign-in failed");
        return login_form(
            &web,
            Some("Wrong user or password."),
            StatusCode::UNAUTHORIZED,
            next.as_deref(),
        );
    };
    web.logins.succeeded(&user.name);
    let secret =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
    let lifetime_ms = i64::try_from(web.config.session_lifetime.as_millis()).unwrap_or(i64::MAX);
    if let Err(e) = web
        .store
        .create_web_session(
            &session_id(&secret),
            &user.name,
            user.role.name(),
            lifetime_ms,
        )
        .await
    {
        return super::pages::unavailable(e);
    }
    tracing::info!(user = %user.name, role = %user.role, "web: signed in");
    let secure = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p == "https");
    let path = if web.config.public_path.is_empty() {
        "/".to_string()
    } else {
        web.config.public_path.clone()
    };
    let cookie = format!(
        "{COOKIE}={secret}.{}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={}{}",
        fingerprint(&user.hash),
        web.config.session_lifetime.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    let to = next.unwrap_or_else(|| web.href("/"));
    let mut response = Redirect::to(&to).into_response();
    if let Ok(v) = header::HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

pub(crate) async fn logout(State(web): State<Web>, headers: HeaderMap) -> Response {
    if let Err(why) = same_origin(&headers) {
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    if let Ok(Some(Caller {
        session: Some(id), ..
    })) = caller(&web, &headers).await
    {
        let _ = web.store.delete_web_session(&id).await;
    }
    let path = if web.config.public_path.is_empty() {
        "/".to_string()
    } else {
        web.config.public_path.clone()
    };
    let mut response = Redirect::to(&web.href("/login")).into_response();
    if let Ok(v) = header::HeaderValue::from_str(&format!(
        "{COOKIE}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0"
    )) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// Whether `password` matches the PHC string `hash`.
fn verify(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// A hash no password matches, computed once, for unknown user names.
fn dummy_hash() -> String {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY
        .get_or_init(|| {
            hash_password(
                &base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 24]>()),
            )
            .unwrap_or_default()
        })
        .clone()
}

/// An Argon2id PHC string for `password` with a fresh salt (`sqlcron web-user`).
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = argon2::password_hash::SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_through_a_proxy_is_never_anonymous() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(!proxied(&h));
        for name in ["x-forwarded-for", "forwarded", "x-real-ip", "via"] {
            let mut p = h.clone();
            p.insert(name, "203.0.113.9".parse().unwrap());
            assert!(proxied(&p), "{name}");
        }
    }

    use super::*;

    #[test]
    fn a_password_hash_verifies_only_its_password() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify("correct horse", &h));
        assert!(!verify("wrong", &h));
        assert!(!verify("correct horse", "not a hash"));
        assert!(!verify("x", &dummy_hash()));
    }

    #[test]
    fn acting_requests_must_come_from_the_same_origin() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m
        };
        assert!(same_origin(&h(&[("sec-fetch-site", "same-origin")])).is_ok());
        assert!(same_origin(&h(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_origin(&h(&[("sec-fetch-site", "same-site")])).is_err());
        assert!(same_origin(&h(&[("origin", "http://a:8080"), ("host", "a:8080")])).is_ok());
        assert!(same_origin(&h(&[("origin", "http://evil"), ("host", "a:8080")])).is_err());
        assert!(same_origin(&h(&[("host", "a:8080")])).is_err());
    }

    #[test]
    fn anonymous_visitors_only_under_this_hosts_own_names() {
        let h = |host: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, host.parse().unwrap());
            m
        };
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "LOCALHOST",
        ] {
            assert!(anonymous_host(&h(ok), &[]), "{ok}");
        }
        for bad in ["evil.example:8080", "127.0.0.1.evil.example", "[::2]:80"] {
            assert!(!anonymous_host(&h(bad), &[]), "{bad}");
        }
        assert!(anonymous_host(
            &h("cron.internal:8080"),
            &["cron.internal".into()]
        ));
        assert!(!anonymous_host(&HeaderMap::new(), &[]));
    }

    #[test]
    fn sign_ins_are_limited_per_user() {
        let l = LoginLimiter::default();
        let t = Instant::now();
        for _ in 0..LOGIN_FAILURES {
            assert!(!l.blocked("u", t));
            l.failed("u", t);
        }
        assert!(l.blocked("u", t));
        assert!(!l.blocked("other", t));
        assert!(!l.blocked("u", t + LOGIN_WINDOW));
        l.succeeded("u");
        assert!(!l.blocked("u", t));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut m = HeaderMap::new();
        m.insert(
            header::COOKIE,
            "a=1; sqlcron_session=xyz; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&m, COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&m, "c"), None);
    }
}
