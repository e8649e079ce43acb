//! The stop sequence after SIGTERM: no more claims, running jobs get `shutdown_grace` to
//! finish, then their process groups are stopped and their leases ended at once, on a fresh
//! timeout the shutdown does not cancel.

use super::*;

impl Daemon {
    pub(super) async fn shutdown(
        &self,
        mut tasks: JoinSet<()>,
        mut control: mpsc::UnboundedReceiver<Control>,
        mut stop_now: bool,
    ) {
        let shared = &self.shared;
        shared.manager.stopping();
        shared
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        shared.events.notify_one();
        shared.stop_holds.notify_waiters();
        let grace = self.config().daemon.shutdown_grace;
        let running = self.running_count();
        tracing::info!(running, grace = %humantime::format_duration(grace), "stopping: no more claims");
        if !stop_now && !tasks.is_empty() {
            let deadline = tokio::time::sleep(grace);
            tokio::pin!(deadline);
            let mut ping = tokio::time::interval(Duration::from_secs(1));
            loop {
                shared.manager.status(&format!(
                    "stopping: waiting for {} running job(s)",
                    self.running_count()
                ));
                tokio::select! {
                    next = tasks.join_next() => if next.is_none() { break },
                    // Still making progress: keep the watchdog fed while jobs finish.
                    _ = ping.tick() => shared.manager.watchdog(),
                    _ = &mut deadline => { stop_now = true; break }
                    msg = control.recv() => if matches!(msg, Some(Control::Stop | Control::StopNow)) {
                        stop_now = true;
                        break;
                    },
                }
            }
        }
        if stop_now && !tasks.is_empty() {
            tracing::warn!("stopping the jobs still running; their rows are released for takeover");
            for r in shared.supervision().values_mut() {
                if r.running && r.interrupted.is_none() {
                    r.interrupted = Some(Interrupt::Shutdown);
                    let _ = r.stop.send(StopRequest::Kill);
                }
            }
        }
        // The run tasks release their rows themselves; bound the wait so a hung database cannot
        // hold the process forever.
        let _ = tokio::time::timeout(Duration::from_secs(60), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if let Err(e) = tokio::time::timeout(
            Duration::from_secs(5),
            shared.store.node_stopped(&shared.node),
        )
        .await
        .unwrap_or(Ok(()))
        {
            tracing::warn!(error = %e, "could not record the node's stop");
        }
        tracing::info!("stopped");
    }
}
