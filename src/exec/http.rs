//! Sending an HTTP job's request ([`HttpCall`]) and the HTTP clients every part of the daemon
//! shares (HTTP jobs, webhooks, pings): TLS roots, redirects, timeouts, the status range. No
//! database.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::exec::outcome::{RunOutcome, StopRequest};
use crate::model::http_target::{HttpCall, default_body, redact};

/// What every HTTP client of the daemon shares (HTTP jobs, webhooks, pings): sqlcron's user
/// agent, a 10 s connect timeout, and up to `redirects` redirects followed (0: none), each
/// only within the first request's origin ([`redirect_allowed`]).
pub fn client_builder(redirects: u64) -> reqwest::ClientBuilder {
    let policy = if redirects == 0 {
        reqwest::redirect::Policy::none()
    } else {
        let limit = redirects as usize;
        reqwest::redirect::Policy::custom(move |attempt| {
            let first = attempt.previous().first().cloned();
            match first
                .map(|f| redirect_allowed(&f, attempt.url(), attempt.previous().len(), limit))
            {
                Some(Err(why)) => attempt.error(why),
                _ => attempt.follow(),
            }
        })
    };
    reqwest::Client::builder()
        .redirect(policy)
        .user_agent(concat!("sqlcron/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
}

/// Whether a redirect from a request first sent to `first` may be followed to `to`, after
/// `followed` requests: only to the same scheme, host and port (a job's headers, credentials
/// included, go only where its definition sends them), never from https to http, and at most
/// `limit` times. The refusal names the origins only, never a path or a query.
pub fn redirect_allowed(
    first: &reqwest::Url,
    to: &reqwest::Url,
    followed: usize,
    limit: usize,
) -> Result<(), String> {
    let origin = |u: &reqwest::Url| {
        format!(
            "{}://{}:{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port_or_known_default().unwrap_or(0)
        )
    };
    if followed > limit {
        return Err(format!("more than {limit} redirect(s)"));
    }
    if first.scheme() == "https" && to.scheme() != "https" {
        return Err(format!(
            "redirect from {} to {} refused: no downgrade from https",
            origin(first),
            origin(to)
        ));
    }
    if origin(first) != origin(to) {
        return Err(format!(
            "redirect from {} to {} refused: only redirects within the same origin are followed",
            origin(first),
            origin(to)
        ));
    }
    Ok(())
}

type Clients = HashMap<(Option<String>, u64), reqwest::Client>;

/// The shared clients (see [`client`]).
fn clients() -> &'static Mutex<Clients> {
    static CLIENTS: OnceLock<Mutex<Clients>> = OnceLock::new();
    CLIENTS.get_or_init(Default::default)
}

/// The most HTTP clients kept (see [`client`]).
const MAX_CLIENTS: usize = 32;

/// Clients by (CA file, redirects): each holds its connection pool and its root store, so a
/// burst of requests to one service reuses connections and reads no certificate twice.
fn client(ca_file: Option<&str>, redirects: u64) -> Result<reqwest::Client, String> {
    // One client per file, however its path is spelt (rows written with SQL may spell it in
    // endless ways), and never more than MAX_CLIENTS: beyond, the cache starts again.
    let canonical = ca_file.map(|f| {
        std::fs::canonicalize(f).map_or_else(|_| f.to_string(), |p| p.display().to_string())
    });
    let key = (canonical, redirects);
    if let Some(c) = clients()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok(c.clone());
    }
    // Read and built outside the lock: another request's client is not kept waiting on a file.
    let mut builder = client_builder(redirects).tcp_keepalive(Duration::from_secs(30));
    if let Some(f) = ca_file {
        let pem =
            read_ca_file(std::path::Path::new(f)).map_err(|e| format!("ca_file \"{f}\": {e}"))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("ca_file \"{f}\": {e}"))?;
        if certs.is_empty() {
            return Err(format!("ca_file \"{f}\": no certificate in it"));
        }
        builder = builder.tls_built_in_root_certs(false);
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
    }
    let c = builder
        .build()
        .map_err(|e| format!("HTTP client: {}", error_chain(&e)))?;
    let mut clients = clients().lock().unwrap_or_else(|e| e.into_inner());
    if clients.len() >= MAX_CLIENTS {
        clients.clear();
    }
    clients.insert(key, c.clone());
    Ok(c)
}

/// Reads a CA file with the checks of an `env_file` (`envfile::read_trusted`: a regular file,
/// not a symbolic link, opened without waiting, that only root or the daemon's user could have
/// written, in directories the same holds for, of at most `envfile::READ_MAX` bytes): a row
/// written with SQL names it, and the daemon reads it with its own rights.
pub fn read_ca_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    Ok(crate::exec::envfile::read_trusted(path)?.into_bytes())
}

/// A request's error with its causes, without the URL: reqwest's text names the URL in full
/// (`for url (https://user:secret@host/...?token=...)`), and a webhook's or a ping's URL is
/// often the secret itself. The caller names the target, redacted, where it helps.
pub fn request_error(e: reqwest::Error) -> String {
    error_chain(&e.without_url())
}

/// An error with its causes ("error sending request: connection refused").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Sends the request and reads its answer, within `timeout` (the smaller of the job's and the
/// target's), keeping the first `tail` bytes of the body. `stop` cancels it (a lost lease, or
/// the shutdown grace run out): the connection is dropped mid-request.
pub async fn call(
    req: &HttpCall,
    timeout: Duration,
    tail: usize,
    mut stop: watch::Receiver<StopRequest>,
) -> RunOutcome {
    let timeout = req.target.timeout.map_or(timeout, |t| t.min(timeout));
    let mut outcome = RunOutcome {
        exit_code: None,
        signal: None,
        timed_out: false,
        stopped: false,
        output: String::new(),
        note: None,
        http_ok: Some(false),
    };
    let send = send(req, tail);
    tokio::pin!(send);
    let stopped = async {
        loop {
            if *stop.borrow_and_update() == StopRequest::Kill {
                return;
            }
            if stop.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        r = &mut send => match r {
            Ok((status, text)) => {
                outcome.exit_code = Some(i32::from(status));
                outcome.http_ok =
                    Some((req.target.success[0]..=req.target.success[1]).contains(&status));
                outcome.output = text;
            }
            Err(message) => outcome.note = Some(message),
        },
        _ = tokio::time::sleep(timeout) => {
            outcome.timed_out = true;
            outcome.note = Some(format!(
                "no complete answer within {}; request cancelled",
                crate::model::duration::format_duration(timeout)
            ));
        }
        _ = stopped => {
            outcome.stopped = true;
            outcome.note = Some("request cancelled: the run was stopped".into());
        }
    }
    outcome
}

/// The request and its answer: the status and "HTTP status reason" followed by the first
/// `tail` bytes of the body.
async fn send(req: &HttpCall, tail: usize) -> Result<(u16, String), String> {
    let t = &req.target;
    let client = client(t.ca_file.as_deref(), t.redirects)?;
    let method = reqwest::Method::from_bytes(t.method.as_bytes()).map_err(|e| e.to_string())?;
    let mut builder = client.request(method, &t.url);
    for (name, value) in &t.headers {
        builder = builder.header(name, value);
    }
    for (name, value) in &req.file_headers {
        builder = builder.header(name, value);
    }
    for (name, value) in req.run_headers() {
        builder = builder.header(name, value);
    }
    builder = match &t.body {
        Some(b) => builder.body(b.clone()),
        None => builder
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(default_body(&req.id)),
    };
    let mut response = builder
        .send()
        .await
        .map_err(|e| format!("request to {} failed: {}", redact(&t.url), request_error(e)))?;
    let status = response.status();
    let mut text = format!(
        "HTTP {} {}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let (body, error) = read_bounded(&mut response, tail).await;
    if let Some(e) = error {
        text.push_str(&format!("(body cut short: {e})\n"));
    }
    text.push_str(&String::from_utf8_lossy(&body));
    Ok((status.as_u16(), text))
}

/// Reads at most `limit` bytes of a response's body, chunk by chunk, and stops there: whatever
/// the peer sends beyond is never buffered (the connection is dropped with the response). The
/// error that cut the body short, if one did.
pub async fn read_bounded(
    response: &mut reqwest::Response,
    limit: usize,
) -> (Vec<u8>, Option<String>) {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) => break,
            Err(e) => return (body, Some(request_error(e))),
        }
    }
    (body, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_stay_within_the_origin_and_never_downgrade() {
        let u = |t: &str| reqwest::Url::parse(t).unwrap();
        let first = u("https://api.example:8443/a?token=x");
        assert_eq!(
            redirect_allowed(&first, &u("https://api.example:8443/b"), 1, 5),
            Ok(())
        );
        let e = redirect_allowed(&first, &u("http://api.example:8443/b"), 1, 5).unwrap_err();
        assert!(
            e.contains("no downgrade from https") && !e.contains("token"),
            "{e}"
        );
        let e = redirect_allowed(&first, &u("https://evil.example/b"), 1, 5).unwrap_err();
        assert!(
            e.contains("same origin") && e.contains("evil.example:443"),
            "{e}"
        );
        assert!(redirect_allowed(&first, &u("https://api.example:9443/b"), 1, 5).is_err());
        assert!(redirect_allowed(&first, &u("https://api.example:8443/b"), 6, 5).is_err());
        let plain = u("http://h/a");
        assert_eq!(redirect_allowed(&plain, &u("http://h:80/b"), 1, 5), Ok(()));
    }

    /// Issue 25 (8): a URL's password and query never reach the error text.
    #[tokio::test]
    async fn request_errors_do_not_name_the_url() {
        let url = "http://hook:s3cret@127.0.0.1:1/x?token=abc";
        let e = client_builder(0)
            .build()
            .unwrap()
            .get(url)
            .send()
            .await
            .unwrap_err();
        let leaky = error_chain(&e);
        let text = request_error(e);
        assert!(
            leaky.contains("token=abc"),
            "the test does not see the leak: {leaky}"
        );
        assert!(!text.contains("s3cret") && !text.contains("abc"), "{text}");
    }

    /// Issue 25 (20): one client per CA file however its path is spelt, and a bounded cache.
    #[test]
    fn the_client_cache_is_bounded() {
        let file = "/etc/ssl/certs/ca-certificates.crt";
        if !std::path::Path::new(file).exists() {
            return;
        }
        for i in 0..(MAX_CLIENTS * 3) {
            let spelt = format!("/etc/ssl/{}certs/ca-certificates.crt", "./".repeat(i));
            client(Some(&spelt), 0).unwrap();
        }
        for r in 1..(MAX_CLIENTS as u64 * 3) {
            client(Some(file), r).unwrap();
        }
        assert!(clients().lock().unwrap().len() <= MAX_CLIENTS);
    }
}
