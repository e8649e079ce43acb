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

/// Binds `addr` and serves the node's metrics there until the task is aborted. An address that
/// cannot be bound is logged and the node runs on without it: metrics are not worth a missed
/// run.
pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Option<tokio::task::JoinHandle<()>> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            tracing::info!(listen = %addr, "serving /metrics and /healthz");
            Some(tokio::spawn(serve(listener, metrics)))
        }
        Err(e) => {
            tracing::error!(listen = %addr, error = %e, "cannot serve metrics; running without");
            None
        }
    }
}

/// Answers `/metrics` and `/healthz` on `listener` until the task is dropped. One task per
/// connection; a broken connection only ends its own task.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let response = respond(&metrics, req.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
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
