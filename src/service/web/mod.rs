//! The web dashboard and its JSON API on `[web] listen` (docs/dashboard.md): server-rendered
//! pages that work without script (one small script of ours adds live updates), every link
//! under `[web] base_path`. It reads the shared database through
//! its own small pool with a statement timeout, so every node shows the whole cluster and the
//! run path never waits for it; actions go through the same store calls as the CLI and are
//! audited with the web user's name.

mod actions;
mod api;
mod auth;
mod backfill;
mod bulk;
mod calendar;
mod cluster;
mod confirm;
mod editor;
mod history;
mod job;
mod jobs;
mod live;
mod pages;
mod runs;
mod zone;

pub use actions::reason_allowed;
pub use auth::{hash_password, new_token};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::config::Config;
use crate::config::web::WebConfig;
use crate::store::Store;

/// Every dashboard statement ends within this, whatever the database does.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Outcome counts of the last day and when they were read.
type DayCounts = (std::time::Instant, Vec<(String, i64)>);

/// Holders and waiters, and idle lock names, a page or the API shows at most.
const LOCKS_SHOWN: i64 = 500;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Web {
    store: Arc<Store>,
    config: Arc<WebConfig>,
    /// The daemon's configuration: `[defaults]` to read rows as the daemon does.
    node: Arc<Config>,
    logins: Arc<auth::LoginLimiter>,
    /// `[web] users_file`, read again when it changes.
    users: Arc<auth::UsersFile>,
    live: Arc<live::Feed>,
    /// The overview's count of the last day's outcomes, kept [`pages::COUNTS_FRESH`].
    counts: Arc<std::sync::Mutex<Option<DayCounts>>>,
    /// The density view, kept [`calendar::DENSITY_FRESH_MS`] (it reads every job).
    density: Arc<std::sync::Mutex<Option<calendar::Density>>>,
    /// Held while the density is computed, so that one request computes it at a time.
    density_lock: Arc<tokio::sync::Mutex<()>>,
    /// Held while the counts are read, so that one request reads them at a time.
    counting: Arc<tokio::sync::Mutex<()>>,
}

impl Web {
    /// A path as the browser addresses it, under the public path (`[web] public_path`, by
    /// default the base path): `/jobs` → `/cron/jobs`; `/` → `/cron` (the overview).
    fn href(&self, path: &str) -> String {
        match (self.config.public_path.as_str(), path) {
            ("", _) => path.to_string(),
            (base, "/") => base.to_string(),
            (base, _) => format!("{base}{path}"),
        }
    }
}

/// Connects the dashboard's own pool, binds `[web] listen` and serves until the task is
/// aborted. Errors (an address in use, a database URL that cannot be used) are logged and the
/// node runs on without the dashboard.
pub async fn start(config: &Config) -> Option<tokio::task::JoinHandle<()>> {
    let addr: SocketAddr = config.web.listen?;
    let store = match Store::connect_with(
        &config.database_url,
        config.web.pool_size,
        Some(STATEMENT_TIMEOUT),
    ) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "web: cannot connect; running without the dashboard");
            return None;
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listen = %addr, error = %e, "web: cannot listen; running without the dashboard");
            return None;
        }
    };
    tracing::info!(listen = %addr, base_path = %config.web.base_path, public_path = %config.web.public_path, "serving the web dashboard");
    let store = Arc::new(store);
    let app = router(Web {
        live: live::Feed::start(store.clone()),
        counts: Arc::default(),
        density: Arc::default(),
        density_lock: Arc::default(),
        counting: Arc::default(),
        store,
        config: Arc::new(config.web.clone()),
        node: Arc::new(config.clone()),
        logins: Arc::default(),
        users: Arc::new(auth::UsersFile::new(
            config.web.users_file.clone(),
            config.web.users.clone(),
        )),
    });
    let proxies = config.web.trusted_proxies.clone();
    Some(tokio::spawn(serve(listener, app, proxies)))
}

/// The header the dashboard sets to the client's address (any a client sends is removed).
pub(crate) const PEER_HEADER: &str = "x-sqlcron-peer";

/// The address a request came from (`None` if the socket could not say).
#[derive(Clone, Copy)]
struct Peer(Option<std::net::IpAddr>);

/// Removes the headers only a trusted reverse proxy may set (`X-Forwarded-Proto`, the
/// single-sign-on header) from a request of any other peer, so no handler can believe them.
async fn untrusted_headers(
    axum::extract::State(web): axum::extract::State<Web>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<Peer>().and_then(|p| p.0);
    // The client's address, for the handlers (the audit of a refused action): set here only,
    // whatever a client sent under that name.
    request.headers_mut().remove(PEER_HEADER);
    if let Some(value) = peer.and_then(|ip| HeaderValue::from_str(&ip.to_string()).ok()) {
        request.headers_mut().insert(PEER_HEADER, value);
    }
    if !peer.is_some_and(|ip| web.config.trusted_proxies.contains(&ip)) {
        let headers = request.headers_mut();
        headers.remove("x-forwarded-proto");
        if let Some(h) = &web.config.sso_header {
            headers.remove(h.as_str());
        }
    }
    next.run(request).await
}

/// The longest address served (the dashboard's own links are far shorter).
pub const MAX_URI: usize = 8 * 1024;
/// The most header bytes a request may carry (a session cookie is under 100).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The largest request body read (forms are a few hundred bytes; a bulk action's 500 names
/// fit many times).
const BODY_LIMIT: usize = 256 * 1024;

/// Reads a request's body within [`HEADER_TIMEOUT`] and [`BODY_LIMIT`] before any handler
/// runs: a client that promises a body and sends it slowly cannot hold a connection for the
/// connection's whole lifetime (the header timeout does not cover the body).
async fn bounded_body(request: Request, next: Next) -> Response {
    // Too long an address or too many header bytes: answered at once, before anything reads
    // them (an 8 KB address with a session cookie used to get no reply at all).
    if request.uri().to_string().len() > MAX_URI {
        return (
            StatusCode::URI_TOO_LONG,
            format!("the address is longer than {MAX_URI} bytes\n"),
        )
            .into_response();
    }
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("the request's headers are longer than {MAX_HEADER_BYTES} bytes\n"),
        )
            .into_response();
    }
    let (parts, body) = request.into_parts();
    let bytes =
        match tokio::time::timeout(HEADER_TIMEOUT, axum::body::to_bytes(body, BODY_LIMIT)).await {
            Ok(Ok(b)) => b,
            Ok(Err(_)) => {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the request body is too large\n",
                )
                    .into_response();
            }
            Err(_) => {
                return (
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body came too slowly\n",
                )
                    .into_response();
            }
        };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// The longest a request's handler may take before it answers: past it, the work is dropped
/// and the client gets 503. Each statement ends within [`STATEMENT_TIMEOUT`] and each
/// computation is bounded (`model::explain::MAX_SLOTS`, the density's steps); this bounds what
/// they add up to. A stream's answer is its first byte: the stream itself goes on.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(15);

/// Answers 503 to a request whose handler has not answered within [`REQUEST_DEADLINE`].
async fn deadline(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_DEADLINE, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            "this request took too long and was stopped\n",
        )
            .into_response(),
    }
}

/// The most connections served at once: more are closed as soon as they are accepted, so a
/// flood of idle connections cannot use up the daemon's file descriptors.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a client has to send a request's headers (a slow client cannot hold a connection).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest one connection is kept, whatever it does (an event stream ends before).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(600);

/// Serves `app` on `listener`: one task per connection, at most [`MAX_CONNECTIONS`], each
/// bounded by [`HEADER_TIMEOUT`] and [`CONNECTION_LIFETIME`], as the metrics listener is.
async fn serve(listener: tokio::net::TcpListener, app: Router, proxies: Vec<std::net::IpAddr>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_peer = crate::service::peers::PerPeer::new(MAX_PER_CLIENT);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "web: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // full: closed at once, never queued
        };
        let peer = stream.peer_addr().map(|a| a.ip()).ok();
        // One address may hold a share of the places, except a trusted proxy (all its
        // clients come from its address).
        let share = match peer.filter(|p| !proxies.contains(p)) {
            Some(p) => match per_peer.take(p) {
                Some(share) => Some(share),
                None => continue, // this client holds its share: closed at once
            },
            None => None,
        };
        let service = hyper_util::service::TowerToHyperService::new(
            app.clone().layer(axum::Extension(Peer(peer))),
        );
        tokio::spawn(async move {
            let (_slot, _share) = (slot, share);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
        });
    }
}

/// Connections one client address may hold at once (a trusted proxy is not limited).
pub const MAX_PER_CLIENT: usize = 32;

/// The routes, under the base path.
pub(crate) fn router(web: Web) -> Router {
    let base = web.config.base_path.clone();
    let app = Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(jobs::jobs))
        .route("/jobs/bulk", post(bulk::bulk))
        .route("/jobs/{name}", get(job::job))
        .route("/new-job", get(editor::new_form).post(editor::create))
        .route(
            "/jobs/{name}/edit",
            get(editor::edit_form).post(editor::save),
        )
        .route(
            "/jobs/{name}/delete",
            get(editor::confirm_delete).post(editor::delete),
        )
        .route(
            "/jobs/{name}/run",
            get(confirm::confirm_run).post(actions::run_now),
        )
        .route("/jobs/{name}/pause", post(actions::pause))
        .route(
            "/jobs/{name}/resume",
            get(confirm::confirm_resume).post(confirm::resume),
        )
        .route(
            "/jobs/{name}/stop",
            get(actions::confirm_stop).post(actions::stop),
        )
        .route(
            "/jobs/{name}/backfill",
            get(backfill::form).post(backfill::queue),
        )
        .route("/jobs/{name}/calendar", get(calendar::job_calendar))
        .route("/density", get(calendar::density))
        .route("/runs", get(history::runs_view))
        .route("/runs/{id}", get(runs::run))
        .route("/runs/{id}/output", get(runs::output))
        .route("/timeline", get(runs::timeline))
        .route("/locks", get(cluster::locks))
        .route(
            "/locks/{name}/break",
            get(cluster::confirm_break).post(actions::break_lock),
        )
        .route("/events", get(cluster::events))
        .route("/events/{id}/retry", post(actions::retry_event))
        .route("/audit", get(cluster::audit))
        .route("/nodes", get(pages::nodes))
        .route("/nodes/{name}/drain", post(actions::drain))
        .route("/nodes/{name}/undrain", post(actions::undrain))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/zone", post(zone::choose))
        .route("/api/v1/jobs", get(api::jobs))
        .route("/api/v1/jobs/{name}", get(api::job))
        .route("/api/v1/jobs/{name}/slots", get(api::slots))
        .route("/api/v1/runs", get(api::runs))
        .route("/api/v1/runs/{id}", get(api::run))
        .route("/api/v1/nodes", get(api::nodes))
        .route("/api/v1/locks", get(api::locks))
        .route("/api/v1/events", get(api::events))
        .route("/api/v1/audit", get(api::audit))
        .route("/api/v1/stream", get(live::stream))
        .route("/static/style.css", get(style))
        .route("/static/live.js", get(live::script))
        .fallback(not_found)
        .with_state(web.clone())
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            untrusted_headers,
        ))
        .layer(axum::middleware::from_fn(deadline))
        .layer(axum::middleware::from_fn(bounded_body))
        .layer(axum::middleware::from_fn(security_headers));
    let whole = if base.is_empty() {
        app
    } else {
        // `/cron/` is the overview too, by its one address.
        let to = web.href("/");
        Router::new()
            .nest(&base, app)
            .route(
                &format!("{base}/"),
                get(move || async move { axum::response::Redirect::permanent(&to) }),
            )
            .fallback(not_found)
    };
    // Outside the nesting: it sees the whole address asked for, the base path included.
    whole.layer(axum::middleware::from_fn_with_state(web, sign_in_returns))
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("style.css"),
    )
        .into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

/// A page asked for before signing in is where the sign-in lands: a redirect to the sign-in
/// page answering a GET names the page asked for (`/login?next=...`), which the sign-in form
/// carries and the sign-in follows (auth.rs, `next_after_sign_in`).
async fn sign_in_returns(
    axum::extract::State(web): axum::extract::State<Web>,
    request: Request,
    next: Next,
) -> Response {
    let asked = (request.method() == axum::http::Method::GET).then(|| request.uri().clone());
    let mut response = next.run(request).await;
    let login = web.href("/login");
    if let Some(uri) = asked
        && response.status().is_redirection()
        && response
            .headers()
            .get(header::LOCATION)
            .is_some_and(|l| l.as_bytes() == login.as_bytes())
    {
        let asked = uri.path_and_query().map_or("/", |p| p.as_str());
        // As the browser asked for it: behind a proxy that strips the prefix, the node saw
        // the address without it.
        let asked = match asked.strip_prefix(web.config.base_path.as_str()) {
            Some(rest) if web.config.public_path != web.config.base_path => {
                format!("{}{rest}", web.config.public_path)
            }
            _ => asked.to_string(),
        };
        if let Ok(v) = HeaderValue::from_str(&format!("{login}?next={}", pages::encode(&asked))) {
            response.headers_mut().insert(header::LOCATION, v);
        }
    }
    response
}

/// No inline script or style, no framing, no sniffing, no referrer beyond the origin.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    /// docs/openapi.json describes exactly the API routes the router serves (the integration
    /// test checks each answer against its schema).
    #[test]
    fn the_api_description_names_every_route() {
        let spec: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/openapi.json")).unwrap();
        let described: std::collections::BTreeSet<&str> = spec["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let served: std::collections::BTreeSet<&str> = include_str!("mod.rs")
            .split("route(\"")
            .skip(1)
            .filter_map(|r| r.split('"').next())
            .filter(|p| p.starts_with("/api/"))
            .collect();
        assert!(!served.is_empty());
        assert_eq!(described, served);
    }
}
