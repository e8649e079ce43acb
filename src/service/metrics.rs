//! `/metrics` and `/healthz` over HTTP on `[metrics] listen`: what the node counts
//! (`daemon/metrics.rs`) in the OpenMetrics text format, and its health verdict. A scrape never
//! touches the database.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};

use crate::daemon::metrics::Metrics;

/// The most connections served at once: more are closed as soon as they are accepted, so a
/// flood of idle connections cannot use up the daemon's file descriptors.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections one client address may hold at once: one client cannot take every place.
pub const MAX_PER_CLIENT: usize = 8;
/// Places of [`MAX_CONNECTIONS`] kept for clients on a loopback address (the host's own
/// probes: systemd, a local agent), whatever other clients hold.
pub const LOOPBACK_RESERVED: usize = 2;

/// How long a client has to send its request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest one connection is kept, whatever it does.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Binds `addr` and serves the node's metrics there until the task is aborted. An address that
/// cannot be bound is logged and the node runs on without it: metrics are not worth a missed
/// run. With `token`, `/metrics` needs `Authorization: Bearer <token>`.
pub async fn start(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    token: Option<String>,
) -> Option<tokio::task::JoinHandle<()>> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            tracing::info!(listen = %addr, token = token.is_some(), "serving /metrics and /healthz");
            Some(tokio::spawn(serve(listener, metrics, token.map(Arc::from))))
        }
        Err(e) => {
            tracing::error!(listen = %addr, error = %e, "cannot serve metrics; running without");
            None
        }
    }
}

/// Answers `/metrics` and `/healthz` on `listener` until the task is dropped. One task per
/// connection, at most [`MAX_CONNECTIONS`], each bounded by [`HEADER_TIMEOUT`] and
/// [`CONNECTION_LIFETIME`]; a broken connection only ends its own task.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    token: Option<Arc<str>>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(
        MAX_CONNECTIONS - LOOPBACK_RESERVED,
    ));
    let reserved = Arc::new(tokio::sync::Semaphore::new(LOOPBACK_RESERVED));
    let per_peer = crate::service::peers::PerPeer::new(MAX_PER_CLIENT);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok((stream, peer)) => (stream, peer.ip()),
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Full, or this client holds its share: closed at once (dropped), never queued.
        let Some(share) = per_peer.take(peer) else {
            continue;
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) if peer.is_loopback() => match reserved.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => continue,
            },
            Err(_) => continue,
        };
        let metrics = metrics.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let (_slot, _share) = (slot, share);
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let response = if token
                    .as_deref()
                    .is_some_and(|t| req.uri().path() == "/metrics" && !authorized(&req, t))
                {
                    unauthorized()
                } else {
                    respond(&metrics, req.uri().path())
                };
                async move { Ok::<_, Infallible>(response) }
            });
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

/// Whether the request carries `Authorization: Bearer <token>`, compared in constant time.
fn authorized(req: &Request<hyper::body::Incoming>, token: &str) -> bool {
    let Some(given) = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    same_secret(given.as_bytes(), token.as_bytes())
}

/// Equality that takes as long whatever the first difference.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn unauthorized() -> Response<http_body_util::Full<Bytes>> {
    let mut response = Response::new(http_body_util::Full::new(Bytes::from(
        "a bearer token is required ([metrics] token_file)\n",
    )));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    response
}

fn respond(metrics: &Metrics, path: &str) -> Response<http_body_util::Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        "/healthz" => match metrics.unhealthy(Instant::now()) {
            None => (StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            Some(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!("{why}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "try /metrics or /healthz\n".into(),
        ),
    };
    let mut response = Response::new(http_body_util::Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}
