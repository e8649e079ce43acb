//! A real HTTP(S) server on 127.0.0.1 for the HTTP jobs' tests. It records every request and
//! answers by path:
//! - `/ok`: 200 "fine";
//! - `/flaky`: 503 "busy" to the first two requests, then 200;
//! - `/slow`: answers after 60 s (timeouts);
//! - `/slow-once`: the first request waits 60 s, later ones get 200 at once (a takeover);
//! - `/moved`: 302 to `/ok`;
//! - `/away?to=URL`: 302 to URL (another origin).
//!
//! A request whose connection is dropped before its answer is recorded as cancelled.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub method: String,
    /// Lower-case names.
    pub headers: HashMap<String, String>,
    pub body: String,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    cancelled: Vec<String>,
    counts: HashMap<String, u32>,
}

pub struct TestServer {
    pub port: u16,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Records the request as cancelled unless disarmed (the answer was returned).
struct CancelGuard {
    state: Arc<Mutex<State>>,
    key: Option<String>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.state.lock().unwrap().cancelled.push(k);
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let method = req.method().to_string();
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                v.to_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let key = headers.get("idempotency-key").cloned().unwrap_or_default();
    let n = {
        let mut s = state.lock().unwrap();
        s.seen.push(Seen {
            path: path.clone(),
            method,
            headers,
            body,
        });
        let n = s.counts.entry(path.clone()).or_default();
        *n += 1;
        *n
    };
    let mut guard = CancelGuard {
        state: state.clone(),
        key: Some(format!("{path} {key}")),
    };
    let (status, text) = match path.as_str() {
        "/ok" => (200, "fine"),
        "/flaky" if n <= 2 => (503, "busy"),
        "/flaky" => (200, "fine at last"),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            (200, "late")
        }
        "/slow-once" if n == 1 => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            (200, "late")
        }
        "/slow-once" => (200, "fine"),
        "/moved" => {
            guard.key = None;
            let mut r = Response::new(Full::new(Bytes::from("moved")));
            *r.status_mut() = hyper::StatusCode::FOUND;
            r.headers_mut()
                .insert("location", hyper::header::HeaderValue::from_static("/ok"));
            return Ok(r);
        }
        "/away" => {
            guard.key = None;
            let to = query
                .as_deref()
                .and_then(|q| q.strip_prefix("to="))
                .unwrap_or("/ok")
                .to_string();
            let mut r = Response::new(Full::new(Bytes::from("away")));
            *r.status_mut() = hyper::StatusCode::FOUND;
            r.headers_mut().insert(
                "location",
                hyper::header::HeaderValue::from_str(&to).unwrap(),
            );
            return Ok(r);
        }
        _ => (404, "no such path"),
    };
    guard.key = None;
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    Ok(r)
}

impl TestServer {
    /// Serves plain HTTP, or HTTPS with `tls`.
    pub async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(req, st.clone()));
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        None => {
                            let _ = http
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                        }
                        Some(a) => {
                            if let Ok(s) = a.accept(stream).await {
                                let _ = http
                                    .serve_connection(hyper_util::rt::TokioIo::new(s), service)
                                    .await;
                            }
                        }
                    }
                });
            }
        });
        TestServer { port, state, task }
    }

    /// HTTPS with the certificate `server.crt` / `server.key` in `dir` (see `tls::make_certs`).
    pub async fn start_tls(dir: &std::path::Path) -> TestServer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("server.crt"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        Self::start(Some(Arc::new(config))).await
    }

    /// The requests to `path` so far, in arrival order.
    pub fn requests(&self, path: &str) -> Vec<Seen> {
        let s = self.state.lock().unwrap();
        s.seen.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// `"PATH KEY"` of the requests whose connection closed before their answer.
    pub fn cancelled(&self) -> Vec<String> {
        self.state.lock().unwrap().cancelled.clone()
    }
}
