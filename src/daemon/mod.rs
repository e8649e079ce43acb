//! The daemon: poll, claim, run, extend, release — and stop cleanly.
//!
//! One loop does the polling: each pass is one [`Daemon::tick`] (a peek at the table, preparing
//! new rows, a claim of up to the free capacity) and then a sleep until the earliest known due
//! time, bounded by `poll_interval`, or until a run ends. Each claimed row is handled by its own
//! task; a second loop, on a thread of its own (`lease_thread.rs`), extends the leases of all
//! live runs in one statement per pass.
//!
//! Shutdown takes its trigger as an argument ([`Control`]): a soft stop ends claiming and waits
//! up to `shutdown_grace` for running jobs; then (or on a second stop) they are stopped and
//! their rows released for takeover on a fresh timeout that the shutdown does not cancel.

mod alerting;
mod chains;
mod claimed;
pub mod decode;
mod delivery;
mod every_node;
pub mod generations;
pub mod guard;
pub mod heap;
mod heartbeat;
mod housekeeping;
pub mod lease;
mod lease_connection;
mod lease_thread;
pub(crate) mod live_output;
pub mod metrics;
pub mod node_name;
pub mod notify;
mod placing;
mod pool_trim;
mod recorded;
mod release;
mod release_batch;
mod reload;
mod shutdown;
mod slot_gate;
mod start_rate;
mod tick;
mod wakeups;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinSet;

use lease::{Interrupt, Supervision};

use crate::config::Config;
use crate::exec::runner::StopRequest;
use crate::store::{Store, StoreError};

/// How often the node refreshes `cron_nodes.last_seen`.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// While wake-ups are live, the longest sleep between two looks at the table: the safety net
/// for a lost wake-up and for the few changes that send none (docs/wakeups.md). Lease ends and
/// event retries need no look: the peek saw when they come, and the loop wakes then.
pub const WAKEUP_SAFETY_LOOK: Duration = Duration::from_secs(30);
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(10); // longest pause after errors

/// What the daemon is told from outside (signals in `main`, channels in tests).
#[derive(Debug)]
pub enum Control {
    /// Stop claiming, let running jobs finish up to `shutdown_grace`, then stop them.
    Stop,
    /// Stop running jobs now.
    StopNow,
    /// A new, already validated configuration (SIGHUP).
    Reload(Box<Config>),
    /// Drain (SIGUSR2) or undrain (SIGUSR1) this node, as `sqlcron drain` / `undrain` do.
    Drain(bool),
}

/// What one tick did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Database clock at the peek.
    pub now: i64,
    pub next_due: Option<i64>,
    /// The job of `next_due`.
    pub next_job: Option<String>,
    /// The earliest event delivery (a retry, or the end of another node's delivery lease).
    pub next_event: Option<i64>,
    pub prepared: usize,
    pub invalid: usize,
    pub claimed: usize,
    /// Capacity was full when the tick ended (more may be due).
    pub saturated: bool,
    /// The node is drained: it claimed nothing.
    pub drained: bool,
}

/// State shared by the poll loop, the lease loop and the run tasks.
struct Shared {
    store: Store,
    node: String,
    config: RwLock<Arc<Config>>,
    /// Claims this node supervises, from claim to release (see `lease.rs`).
    supervision: Supervision,
    /// Runs taken into supervision since the start: a run that began and ended between two
    /// heartbeats still counts as the node being busy (`pool_trim.rs`).
    supervised_total: std::sync::atomic::AtomicU64,
    /// Bounds local concurrent runs (`max_parallel`).
    permits: Arc<Semaphore>,
    /// Woken when a run ends (capacity freed), on a control message or a wake-up.
    wake: Notify,
    /// Woken by a wake-up (the table changed; see `wakeups.rs`). Kept apart from `wake`: a
    /// node with no free place skips the look (a run ending wakes it through `wake`).
    changed: Notify,
    /// An event may be due for delivery (the peek saw one, this node's alert scan recorded one,
    /// or the node is stopping): wakes the delivery loop, which has no idle looks of its own.
    events: Notify,
    /// A wake-up source is listening (see `wakeups.rs`): the idle loop may sleep longer.
    wakeups_live: std::sync::atomic::AtomicBool,
    /// Set once the shutdown has begun: stops claiming.
    stopping: std::sync::atomic::AtomicBool,
    /// The daemon's own account and environment, read at start: what a job's process is built
    /// from (see `decode::run_spec`).
    host: decode::Host,
    /// What the node decided, for `/metrics`, and the loop's health, for `/healthz`.
    metrics: Arc<metrics::Metrics>,
    /// The service manager running this daemon (systemd), told of its life.
    manager: Arc<dyn notify::ServiceManager>,
    /// The HTTP client of webhooks and pings.
    http: reqwest::Client,
    /// The placement values this node matches; the last peek, for a burst (see `placing.rs`).
    placement: Mutex<placing::PlacementView>,
    last_peek: Mutex<Option<placing::LastPeek>>,
    /// When a peek last counted the live nodes (`placing::alive_due`).
    alive_counted: Mutex<Option<Instant>>,
    /// The node is drained (`cron_nodes.drain`, seen at each peek).
    drained: std::sync::atomic::AtomicBool,
    /// Host-local templates in the table (seen at each peek), and whether the last sync found
    /// any template or copy (true at start): a node syncs its copies only while either is so.
    templates: std::sync::atomic::AtomicI64,
    copies_seen: std::sync::atomic::AtomicBool,
    /// The templates' names at the last look for orphaned copies, and when (`every_node.rs`).
    copies_swept: Mutex<Option<(Vec<String>, Instant)>>,
    /// The audit trail's newest row at the last sync of this node's copies, and when (see
    /// `every_node.rs`).
    copies_synced: Mutex<Option<(i64, Instant)>>,
    /// MySQL: the audit trail's newest row as the last peek saw it (0: not seen), which the
    /// heartbeat's UPDATE cannot return there (see `heartbeat.rs`).
    peeked_audit_mark: std::sync::atomic::AtomicI64,
    /// The runs this node recorded lately, read back after an outage (see `recorded.rs`).
    recent_runs: recorded::RecentRuns,
    /// Jobs some row names in `after`, as of the last look (see `chains.rs`), and the wake of
    /// that look when a run of one of them ends here.
    upstreams: Mutex<std::collections::HashSet<String>>,
    chains_wake: Notify,
    /// What this node knows of the start-rate budgets (see `start_rate.rs`).
    rates: start_rate::Rates,
    /// Woken when the node begins to stop: rows waiting for their turn from the start rate
    /// are handed over unrun.
    stop_holds: Notify,
    /// Releases waiting to be written together (see `release_batch.rs`).
    releases: release_batch::Releases,
    /// The lease extension's connection, given back when the node has long been quiet (see
    /// `lease_connection.rs`).
    lease_connection: lease_connection::LeaseConnection,
}

pub struct Daemon {
    shared: Arc<Shared>,
}

impl Daemon {
    pub fn new(store: Store, config: Config) -> Daemon {
        let permits = Arc::new(Semaphore::new(config.daemon.max_parallel));
        // A healthy loop passes at least every poll interval (the safety look while wake-ups
        // can be live); a tick itself is bounded by the statement timeouts (a fraction of the
        // lease).
        let wakeups = config.daemon.wakeups && store.dialect() != crate::store::Dialect::Mysql;
        let window = idle_poll(config.daemon.poll_interval, wakeups)
            + config.daemon.poll_interval * 2
            + config.daemon.lease;
        let metrics = Arc::new(metrics::Metrics::new(&config.node_name, window));
        Daemon {
            shared: Arc::new(Shared {
                store,
                node: config.node_name.clone(),
                config: RwLock::new(Arc::new(config)),
                supervision: Mutex::new(HashMap::new()),
                supervised_total: 0.into(),
                permits,
                wake: Notify::new(),
                changed: Notify::new(),
                events: Notify::new(),
                wakeups_live: false.into(),
                stopping: false.into(),
                host: decode::Host::from_process(),
                metrics,
                manager: Arc::new(notify::Silent),
                http: delivery::http_client(),
                placement: Mutex::new(placing::PlacementView::default()),
                last_peek: Mutex::new(None),
                alive_counted: Mutex::new(None),
                drained: false.into(),
                templates: 0.into(),
                copies_seen: true.into(),
                copies_swept: Mutex::new(None),
                copies_synced: Mutex::new(None),
                peeked_audit_mark: std::sync::atomic::AtomicI64::new(0),
                recent_runs: recorded::RecentRuns::default(),
                upstreams: Mutex::new(Default::default()),
                chains_wake: Notify::new(),
                rates: Default::default(),
                stop_holds: Notify::new(),
                releases: Default::default(),
                lease_connection: Default::default(),
            }),
        }
    }

    /// Tells `manager` (systemd) of the daemon's life from now on. Call before sharing the
    /// daemon; without it the daemon tells nobody.
    pub fn with_service_manager(mut self, manager: Arc<dyn notify::ServiceManager>) -> Daemon {
        Arc::get_mut(&mut self.shared)
            .expect("with_service_manager is called before the daemon runs")
            .manager = manager;
        self
    }

    /// What the node counts, for a `/metrics` and `/healthz` listener (`service/metrics.rs`).
    pub fn metrics(&self) -> Arc<metrics::Metrics> {
        self.shared.metrics.clone()
    }

    fn config(&self) -> Arc<Config> {
        self.shared.config()
    }

    /// Applies the configuration's jobs and registers the node (daemon start and reload).
    pub async fn apply_config(&self) -> Result<(), StoreError> {
        let config = self.config();
        self.shared.store.apply_pools(&config.pools).await?;
        self.shared
            .store
            .apply_start_rates(&config.cluster.start_rates)
            .await?;
        self.shared.budgets_changed();
        let calendars: Vec<(String, String)> = config
            .calendars
            .iter()
            .map(|c| (c.name.clone(), c.entries.clone()))
            .collect();
        let actor =
            crate::exec::account::this_process(Some(&format!("daemon {}", config.node_name)));
        let written = self
            .shared
            .store
            .apply_calendars(&calendars, &actor)
            .await?;
        for name in &written.written {
            tracing::info!(calendar = %name, "calendar written from TOML");
        }
        for name in &written.removed {
            tracing::info!(calendar = %name, "calendar removed (no longer in TOML)");
        }
        let report = self
            .shared
            .store
            .apply_toml(&config.jobs, false, &actor)
            .await?;
        for name in &report.created {
            tracing::info!(job = %name, "job created from TOML");
        }
        for name in &report.updated {
            tracing::info!(job = %name, "job updated from TOML");
        }
        for (name, columns) in &report.restored {
            tracing::warn!(job = %name, %columns, "job changed outside the TOML; restored from the file");
        }
        for name in &report.removed {
            tracing::info!(job = %name, "job removed (no longer in TOML)");
        }
        for name in &report.conflicts {
            tracing::warn!(job = %name, "TOML job has the name of a job created with SQL; left alone");
        }
        for (name, twin) in &report.twins {
            tracing::warn!(job = %name, row = %twin, "TOML job's name is another row's to the database (MySQL and MariaDB compare names without case); left alone");
        }
        let fingerprint: std::collections::BTreeMap<&str, String> = config
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), crate::store::job_hash(j)))
            .collect();
        let host = crate::exec::account::hostname().unwrap_or_default();
        let registered = self
            .shared
            .store
            .register_node(
                &self.shared.node,
                &host,
                std::process::id(),
                &serde_json::to_string(&fingerprint).unwrap_or_default(),
                &config.node_tags,
            )
            .await;
        drop(fingerprint);
        if registered.is_ok()
            && let Err(e) = self.shared.sync_copies(&config).await
        {
            tracing::warn!(error = %e, "host-local jobs not synced");
        }
        // Before the first claim: the newest signed generations in the table.
        self.shared.learn_generations(&config).await;
        drop(config);
        // Parsing and applying a large TOML leaves freed heap behind; give it back to the system
        // so a long-running node's footprint reflects what it really holds.
        heap::trim();
        registered
    }

    /// Writes this node's drain flag (a signal asked for it); the next peek acts on it.
    async fn set_drain(&self, drain: bool) {
        let actor =
            crate::exec::account::this_process(Some(&format!("daemon {}", self.shared.node)));
        let what = if drain { "drain" } else { "undrain" };
        match self
            .shared
            .store
            .set_drain(&self.shared.node, drain, &actor)
            .await
        {
            Ok(_) => tracing::info!("signal: {what} recorded"),
            Err(e) => {
                tracing::error!(error = %e, "signal: {what} not recorded; try `sqlcron {what}`")
            }
        }
    }

    /// Runs until stopped through `control`. Returns after every run was finished or stopped
    /// and released.
    pub async fn run(self, mut control: mpsc::UnboundedReceiver<Control>) {
        let mut tasks = JoinSet::new();
        let lease = lease_thread::start(self.shared.clone());
        let housekeeping = tokio::spawn(housekeeping::housekeeping_loop(self.shared.clone()));
        let live_output = tokio::spawn(live_output::live_output_loop(self.shared.clone()));
        let chains = tokio::spawn(chains::chain_loop(self.shared.clone()));
        let alerting = tokio::spawn(alerting::alerting_loop(self.shared.clone()));
        let delivery = tokio::spawn(delivery::delivery_loop(self.shared.clone()));
        let wakeups = tokio::spawn(wakeups::wake_loop(self.shared.clone()));
        let mut errors = 0u32;
        let mut outage_since: Option<Instant> = None;
        let mut stop_now = false;
        // A pass looks at the table when woken (a run ended, a wake-up, a control message) or
        // when its sleep ran out; the heartbeat keeps its own cadence whatever the sleep.
        let mut woken = true;
        let mut next_tick = Instant::now();
        let mut next_beat = Instant::now() + HEARTBEAT_INTERVAL;
        let mut pool_trim = pool_trim::PoolTrim::new(Instant::now());
        loop {
            while let Some(done) = tasks.try_join_next() {
                if let Err(e) = done {
                    tracing::error!(error = %e, "a run task failed");
                }
            }
            let config = self.config();
            if errors == 0 && Instant::now() >= next_beat {
                next_beat = Instant::now() + HEARTBEAT_INTERVAL;
                self.heartbeat(&config).await;
                pool_trim
                    .after_heartbeat(&self.shared, Instant::now())
                    .await;
            }
            // No heartbeat while the database is unreachable: the sleep is the error backoff.
            let wake_at = |next_tick: Instant, errors: u32| {
                if errors == 0 {
                    next_tick.min(next_beat)
                } else {
                    next_tick
                }
            };
            if !woken && Instant::now() < next_tick {
                if self
                    .sleep(
                        wake_at(next_tick, errors),
                        &mut control,
                        &mut woken,
                        &mut stop_now,
                    )
                    .await
                {
                    break;
                }
                continue;
            }
            let poll = idle_poll(
                config.daemon.poll_interval,
                self.shared
                    .wakeups_live
                    .load(std::sync::atomic::Ordering::SeqCst),
            );
            // Runs recorded before an error that may mean a failover are read back first.
            let passed = self.pass_after_read_back(&mut tasks).await;
            let sleep_for = match passed {
                Ok(report) => {
                    if let Some(since) = outage_since.take() {
                        tracing::info!(after = %humantime::format_duration(Duration::from_secs(since.elapsed().as_secs())), "database reachable again");
                    }
                    errors = 0;
                    if report.claimed > 0 || report.prepared > 0 || report.invalid > 0 {
                        tracing::debug!(?report, "tick");
                    }
                    let running = self.running_count();
                    let offset = report.now - chrono::Utc::now().timestamp_millis();
                    self.shared.metrics.pass(true, running, Some(offset));
                    self.shared.manager.status(&status_line(running, &report));
                    sleep_after(&report, poll, config.daemon.poll_interval)
                }
                Err(e) => {
                    errors += 1;
                    self.shared.metrics.database_error(e.kind());
                    self.shared.metrics.pass(false, self.running_count(), None);
                    // Only a lost connection (or a server that takes no writes) is an
                    // unreachable database: a statement that ran into its timeout (a row held
                    // by a transaction left open in a console) or was refused says so by its
                    // kind.
                    let what = match e.kind() {
                        "unreachable" | "read-only" => "database unreachable".to_string(),
                        kind => format!("database statements failing ({kind})"),
                    };
                    if outage_since.is_none() {
                        outage_since = Some(Instant::now());
                        tracing::error!(error = %e, kind = e.kind(), "{what}; retrying with backoff");
                    }
                    let down = outage_since.map(|s| s.elapsed().as_secs()).unwrap_or(0);
                    self.shared.manager.status(&format!(
                        "{what} for {down}s, retrying; {} running",
                        self.running_count()
                    ));
                    let backoff = Duration::from_millis(200)
                        .saturating_mul(1 << errors.min(8))
                        .min(ERROR_BACKOFF_MAX);
                    // Up to half again, at random: nodes that lost the database together do
                    // not come back at the same instant.
                    let jitter = rand::random_range(0..=backoff.as_millis() as u64 / 2);
                    (backoff + Duration::from_millis(jitter))
                        .max(config.daemon.poll_interval.min(ERROR_BACKOFF_MAX))
                }
            };
            // Under a systemd watchdog the loop looks at the table at least every third of its
            // timeout: the ping below follows a pass that reached the database, so a wedged
            // loop or a database that stopped answering lets systemd restart the daemon.
            let sleep_for = self
                .shared
                .manager
                .watchdog_interval()
                .map_or(sleep_for, |w| sleep_for.min(w));
            next_tick = Instant::now() + sleep_for;
            woken = false;
            // The loop completed a pass: tell the watchdog (never from a timer of its own).
            self.shared.manager.watchdog();
            if self
                .sleep(
                    wake_at(next_tick, errors),
                    &mut control,
                    &mut woken,
                    &mut stop_now,
                )
                .await
            {
                break;
            }
        }
        wakeups.abort();
        housekeeping.abort();
        live_output.abort();
        chains.abort();
        alerting.abort();
        self.shutdown(tasks, control, stop_now).await;
        // Hook deliveries under way end within their own time limit (none starts once the
        // node stops); one cut short is delivered again by another node when its lease ends.
        let limit = self.config().delivery.timeout + Duration::from_secs(1);
        let mut delivery = delivery;
        if tokio::time::timeout(limit, &mut delivery).await.is_err() {
            delivery.abort();
        }
        lease.stop().await;
    }

    /// Sleeps until `until`, a wake-up or a control message. Returns whether to stop.
    async fn sleep(
        &self,
        until: Instant,
        control: &mut mpsc::UnboundedReceiver<Control>,
        woken: &mut bool,
        stop_now: &mut bool,
    ) -> bool {
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = self.shared.wake.notified() => *woken = true,
            // A change matters only to a node that could claim: one at capacity is woken by
            // the end of a run, and finds the change then.
            _ = self.shared.changed.notified() => {
                *woken = self.shared.permits.available_permits() > 0;
            }
            msg = control.recv() => {
                *woken = true;
                match msg {
                    Some(Control::Reload(config)) => self.reload(*config).await,
                    Some(Control::Drain(drain)) => self.set_drain(drain).await,
                    Some(Control::Stop) | None => return true,
                    Some(Control::StopNow) => {
                        *stop_now = true;
                        return true;
                    }
                }
            }
        }
        false
    }

    fn running_count(&self) -> usize {
        self.shared.supervision().len()
    }
}

impl Shared {
    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn supervision(&self) -> MutexGuard<'_, HashMap<(i64, i64), lease::Supervised>> {
        self.supervision.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The one-line `STATUS=` for systemd: "3 running, next: backup in 4m12s".
pub fn status_line(running: usize, report: &TickReport) -> String {
    match (&report.next_job, report.next_due) {
        (Some(job), Some(due)) if due > report.now => {
            let secs = ((due - report.now) + 999) / 1000;
            let wait = humantime::format_duration(Duration::from_secs(secs as u64));
            format!(
                "{running} running, next: {job} in {}",
                wait.to_string().replace(' ', "")
            )
        }
        (Some(job), Some(_)) => format!("{running} running, next: {job} now"),
        _ => format!("{running} running, nothing scheduled"),
    }
}

/// How long the loop sleeps after a pass that reached the database (`poll`: the longest idle
/// sleep): until the earliest due time or event delivery the peek saw, at once when capacity
/// ran out with more due, briefly when a due row was not claimed (another node got it, or it is
/// held: look again soon but do not spin). An event due now is the delivery loop's (the peek
/// woke it); the loop looks again after `poll_interval` to learn when the claim that follows
/// ends, should its node die.
fn sleep_after(report: &TickReport, poll: Duration, poll_interval: Duration) -> Duration {
    let ahead = |at: i64| Duration::from_millis((at - report.now) as u64);
    if report.saturated && report.claimed > 0 {
        return Duration::ZERO;
    }
    let for_jobs = match report.next_due {
        Some(due) if due > report.now => poll.min(ahead(due)),
        Some(_) if !report.saturated && report.claimed == 0 => poll.min(Duration::from_millis(50)),
        _ => poll,
    };
    match report.next_event {
        Some(at) if at > report.now => for_jobs.min(ahead(at)),
        Some(_) => for_jobs.min(poll_interval),
        None => for_jobs,
    }
}

/// The longest idle sleep between looks at the table: `poll_interval`, or while wake-ups are
/// live at least [`WAKEUP_SAFETY_LOOK`] (a change wakes the node anyway).
fn idle_poll(poll_interval: Duration, wakeups_live: bool) -> Duration {
    if wakeups_live {
        poll_interval.max(WAKEUP_SAFETY_LOOK)
    } else {
        poll_interval
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-03-29T01:00:00Z`), with the
/// milliseconds when there are any (a manual run's slot is the moment it was served:
/// `2026-03-29T01:00:00.250Z`), so that `SQLCRON_SLOT` names the recorded slot exactly.
pub fn fmt_ms(ms: i64) -> String {
    crate::model::json_time::rfc3339(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_written_whole_or_with_their_milliseconds() {
        assert_eq!(fmt_ms(1_774_746_000_000), "2026-03-29T01:00:00Z");
        assert_eq!(fmt_ms(1_774_746_000_250), "2026-03-29T01:00:00.250Z");
    }

    fn report(next_due: Option<i64>, next_event: Option<i64>) -> TickReport {
        TickReport {
            now: 10_000,
            next_due,
            next_event,
            ..TickReport::default()
        }
    }

    #[test]
    fn the_loop_sleeps_until_the_earliest_job_or_event() {
        let poll = Duration::from_secs(30);
        let sleep_after = |r: &TickReport, poll| sleep_after(r, poll, Duration::from_secs(1));
        assert_eq!(sleep_after(&report(None, None), poll), poll);
        assert_eq!(
            sleep_after(&report(Some(12_000), None), poll),
            Duration::from_secs(2)
        );
        assert_eq!(
            sleep_after(&report(Some(12_000), Some(10_500)), poll),
            Duration::from_millis(500),
            "an event retry comes first"
        );
        assert_eq!(
            sleep_after(&report(None, Some(9_000)), poll),
            Duration::from_secs(1),
            "an event due now: look again after poll_interval to see its claim's end, no spin"
        );
        assert_eq!(
            sleep_after(&report(Some(9_000), None), poll),
            Duration::from_millis(50),
            "due but not claimed: soon, without spinning"
        );
        let full = TickReport {
            claimed: 4,
            saturated: true,
            ..report(Some(9_000), None)
        };
        assert_eq!(sleep_after(&full, poll), Duration::ZERO);
    }

    #[test]
    fn the_idle_look_is_longer_while_wakeups_are_live() {
        let poll = Duration::from_secs(1);
        assert_eq!(idle_poll(poll, false), poll);
        assert_eq!(idle_poll(poll, true), WAKEUP_SAFETY_LOOK);
        assert_eq!(
            idle_poll(Duration::from_secs(60), true),
            Duration::from_secs(60)
        );
    }
}
