//! Live updates: a server-sent event for each run that starts or ends anywhere in the cluster,
//! read from the database (runs happen on other nodes). One task per node polls the run
//! records while someone watches and fans each change out to every open stream; a stream that
//! reconnects with `Last-Event-ID` is first sent what it missed, so no change is lost across a
//! reconnect. The pages load `live.js`, which re-reads the page's `main` on each event.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use tokio::sync::{Semaphore, broadcast};

use crate::model::access::Action;
use crate::model::json_time::rfc3339;
use crate::store::web::RunCursor;
use crate::store::{HistoryRow, Store};

use super::Web;
use super::pages::allowed;

/// How often the feed reads the run records while a stream is open.
const POLL: Duration = Duration::from_secs(2);
/// Changes read per poll (and per catch-up); more wait for the next poll.
const BATCH: i64 = 200;
/// Open streams per node; more are answered 503 (each holds a connection open).
const STREAMS: usize = 64;
/// A stream ends after this and the browser reconnects, so the session is checked again.
const STREAM_LIFE: Duration = Duration::from_secs(300);
/// How often an open stream asks again whether its caller may still read: a sign-out, a
/// revoked token or a changed password ends the stream within about this (one read of the
/// session per open stream, at most 64 streams).
const RECHECK: Duration = Duration::from_secs(2);

/// The node's feed of run changes.
pub(crate) struct Feed {
    changes: broadcast::Sender<Arc<Vec<HistoryRow>>>,
    streams: Arc<Semaphore>,
}

impl Feed {
    /// Starts the polling task. It reads the database only while a stream is open.
    pub(crate) fn start(store: Arc<Store>) -> Arc<Feed> {
        let (changes, _) = broadcast::channel(64);
        let feed = Arc::new(Feed {
            changes: changes.clone(),
            streams: Arc::new(Semaphore::new(STREAMS)),
        });
        tokio::spawn(async move {
            let mut cursor: Option<RunCursor> = None;
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if changes.receiver_count() == 0 {
                    cursor = None;
                    continue;
                }
                let Some(mut at) = cursor else {
                    match store.run_cursor().await {
                        Ok(c) => cursor = Some(c),
                        Err(e) => tracing::debug!(error = %e, "web: the live feed cannot read"),
                    }
                    continue;
                };
                match store.runs_changed(&at, BATCH).await {
                    Ok(runs) if !runs.is_empty() => {
                        runs.iter().for_each(|r| at.advance(r));
                        cursor = Some(at);
                        let _ = changes.send(Arc::new(runs));
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "web: the live feed cannot read"),
                }
            }
        });
        feed
    }
}

/// Whether `run` is past `cursor` (a change the stream has not sent yet).
fn is_new(run: &HistoryRow, cursor: &RunCursor) -> bool {
    run.id > cursor.started_id
        || run
            .ended
            .is_some_and(|e| (e, run.id) > (cursor.ended, cursor.ended_id))
}

fn event(run: &HistoryRow, cursor: &RunCursor) -> Event {
    let data = serde_json::json!({
        "id": run.id, "job": run.job, "slot": rfc3339(run.slot), "attempt": run.attempt,
        "node": run.node, "outcome": run.outcome, "started": run.started.map(rfc3339),
        "ended": run.ended.map(rfc3339),
    });
    Event::default()
        .event("run")
        .id(cursor.to_string())
        .data(data.to_string())
}

/// `GET /api/v1/stream`: `run` events, each with the cursor as its id.
pub(crate) async fn stream(State(web): State<Web>, headers: HeaderMap) -> Response {
    if let Err(r) = allowed(&web, &headers, Action::Read).await {
        return if r.status().is_redirection() {
            (StatusCode::UNAUTHORIZED, "sign in first\n").into_response()
        } else {
            r
        };
    }
    let Ok(permit) = web.live.streams.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many live streams\n").into_response();
    };
    // Subscribe before reading where the client stands, so nothing falls in between.
    let mut changes = web.live.changes.subscribe();
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<RunCursor>().ok());
    let store = web.store.clone();
    let (web, asked) = (web.clone(), headers.clone());
    let stream = async_stream(move |tx| async move {
        let _permit = permit;
        let mut cursor = match resumed {
            Some(c) => c,
            None => match store.run_cursor().await {
                Ok(c) => c,
                Err(_) => return,
            },
        };
        let ends = tokio::time::Instant::now() + STREAM_LIFE;
        // A sign-out, a revoked token or a changed password ends the stream within this.
        let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + RECHECK, RECHECK);
        let mut catch_up = resumed.is_some();
        loop {
            if catch_up {
                catch_up = false;
                let Ok(runs) = store.runs_changed(&cursor, BATCH).await else {
                    return;
                };
                for r in &runs {
                    cursor.advance(r);
                    if tx.send(event(r, &cursor)).await.is_err() {
                        return;
                    }
                }
            }
            let batch = tokio::select! {
                b = changes.recv() => b,
                () = tokio::time::sleep_until(ends) => return,
                _ = recheck.tick() => {
                    if allowed(&web, &asked, Action::Read).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            match batch {
                Ok(runs) => {
                    for r in runs.iter() {
                        if !is_new(r, &cursor) {
                            continue;
                        }
                        cursor.advance(r);
                        if tx.send(event(r, &cursor)).await.is_err() {
                            return;
                        }
                    }
                }
                // Fell behind the feed: read what was missed from the database.
                Err(broadcast::error::RecvError::Lagged(_)) => catch_up = true,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    // nginx passes the events on as they come instead of buffering them.
    response.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    response
}

/// A stream fed by a task through a small channel.
fn async_stream<F, Fut>(body: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(body(tx));
    futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
    )
}

pub(crate) async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("live.js"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: i64, ended: Option<i64>) -> HistoryRow {
        HistoryRow {
            id,
            job: "j".into(),
            slot: 0,
            attempt: 1,
            node: None,
            token: None,
            started: Some(0),
            ended,
            outcome: "ok".into(),
            exit_code: None,
            signal: None,
            output: None,
            skipped_count: None,
            skipped_last: None,
            message: None,
            held_ms: None,
        }
    }

    #[test]
    fn a_change_is_sent_once_whether_it_is_a_start_or_an_end() {
        let mut c = RunCursor::default();
        let started = run(5, None);
        assert!(is_new(&started, &c));
        c.advance(&started);
        assert!(!is_new(&started, &c));
        // The same record, now ended: new again, once.
        let ended = run(5, Some(1_000));
        assert!(is_new(&ended, &c));
        c.advance(&ended);
        assert!(!is_new(&ended, &c));
        // Endings are ordered by (time, id): at the same millisecond, an older record sorts
        // before (the cursor has passed it), a newer one after.
        let older = run(3, Some(1_000));
        assert!(!is_new(&older, &c));
        let later = run(7, Some(1_000));
        assert!(is_new(&later, &c));
        assert_eq!(c.to_string(), "5.1000.5");
        assert_eq!("5.1000.5".parse::<RunCursor>(), Ok(c));
        assert!("5.x.1".parse::<RunCursor>().is_err());
        assert!("5.1".parse::<RunCursor>().is_err());
    }

    proptest::proptest! {
        /// Any `Last-Event-ID` parses to a cursor or is refused; a cursor reads back as itself.
        #[test]
        fn any_last_event_id_is_read_or_refused(text in "\\PC{0,40}", a: i64, b: i64, c: i64) {
            let _ = text.parse::<RunCursor>();
            let cursor = RunCursor { started_id: a, ended: b, ended_id: c };
            proptest::prop_assert_eq!(cursor.to_string().parse::<RunCursor>(), Ok(cursor));
        }
    }
}
