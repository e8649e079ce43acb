//! Listens for wake-ups (see `store/wake.rs`) and wakes the poll loop at each. While a source
//! is live the loop's idle sleep is `[daemon] wake_poll_interval` instead of `poll_interval`;
//! when it is lost the node goes back to polling, wakes once (changes may have been missed) and
//! reconnects with a jittered backoff.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Shared;
use crate::store::wake::Wake;

const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

pub(super) async fn wake_loop(shared: Arc<Shared>) {
    if !shared.config().daemon.wakeups {
        return;
    }
    let mut backoff = BACKOFF_START;
    loop {
        match shared.store.wakeups(&shared.node).await {
            Ok(None) => return,
            Ok(Some(mut source)) => {
                tracing::info!(via = source.describe(), "wake-ups on");
                shared.wakeups_live.store(true, Ordering::SeqCst);
                // Anything that changed before the listening began is seen by this look.
                shared.wake.notify_one();
                backoff = BACKOFF_START;
                loop {
                    match source.next().await {
                        Ok(Wake::Changed) => shared.changed.notify_one(),
                        Ok(Wake::Lost) => {
                            tracing::warn!("wake-up connection lost; polling until it is back");
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "wake-ups failed; polling until they are back");
                            break;
                        }
                    }
                }
                shared.wakeups_live.store(false, Ordering::SeqCst);
                shared.wake.notify_one();
            }
            Err(e) => {
                tracing::debug!(error = %e, "wake-ups not available yet");
            }
        }
        let jitter = rand::random_range(0..=backoff.as_millis() as u64 / 2);
        tokio::time::sleep(backoff + Duration::from_millis(jitter)).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
