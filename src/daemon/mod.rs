//! The daemon: poll, claim, run, extend, release — and stop cleanly.
//!
//! One loop does the polling: each pass is one [`Daemon::tick`] (a peek at the table, preparing
//! new rows, a claim of up to the free capacity) and then a sleep until the earliest known due
//! time, bounded by `poll_interval`, or until a run ends. Each claimed row is handled by its own
//! task; a second loop extends the leases of all live runs in one statement per pass.
//!
//! Shutdown takes its trigger as an argument ([`Control`]): a soft stop ends claiming and waits
//! up to `shutdown_grace` for running jobs; then (or on a second stop) they are stopped and their
//! rows released for takeover on a fresh, short timeout that the shutdown does not cancel.

pub mod lease;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::config::Config;
use crate::job::{OnLeaseLost, Policy, PolicyOverrides};
use crate::policy::{self, ClaimAction, ClaimedState, Finished, after_run, jitter_ms, plan_claim};
use crate::runner::{self, Program, RunSpec, StopRequest};
use crate::schedule::{Schedule, parse_zone};
use crate::store::{Fenced, JobRow, Release, RunKey, RunResult, Store, StoreError};

/// How often the node refreshes `cron_nodes.last_seen`.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// How many new or changed rows one tick prepares.
const PREPARE_BATCH: i64 = 500;
/// Longest pause after database errors.
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// What the daemon is told from outside (signals in `main`, channels in tests).
#[derive(Debug)]
pub enum Control {
    /// Stop claiming, let running jobs finish up to `shutdown_grace`, then stop them.
    Stop,
    /// Stop running jobs now.
    StopNow,
    /// A new, already validated configuration (SIGHUP).
    Reload(Box<Config>),
}

/// What one tick did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Database clock at the peek.
    pub now: i64,
    pub next_due: Option<i64>,
    /// The job of `next_due`.
    pub next_job: Option<String>,
    pub prepared: usize,
    pub invalid: usize,
    pub claimed: usize,
    /// Capacity was full when the tick ended (more may be due).
    pub saturated: bool,
}

/// Why a run's supervision ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interrupt {
    LeaseLost,
    Shutdown,
}

/// A run this node supervises.
struct Running {
    token: i64,
    job: String,
    /// Until when the claim may be trusted (see `lease.rs`).
    trusted_until: Instant,
    stop: watch::Sender<StopRequest>,
    interrupted: Option<Interrupt>,
    on_lease_lost: OnLeaseLost,
}

/// A claimed row that is to run one (slot, attempt), with what the run needs.
struct Run<'a> {
    row: &'a JobRow,
    key: RunKey,
    manual: bool,
    /// Database clock at the claim.
    claim_now: i64,
    /// When the claim was made (the lease's trust window starts here).
    claimed_at: Instant,
    policy: &'a Policy,
    schedule: &'a Schedule,
    config: &'a Config,
}

/// The decision for a claimed row that simply runs its slot.
struct Planned {
    schedule: Schedule,
    policy: Policy,
    key: RunKey,
    manual: bool,
}

/// What a claimed row's history says before planning: its slot, attempts and how it came.
fn claimed_state(row: &JobRow) -> ClaimedState {
    ClaimedState {
        slot: row.slot,
        attempts: row.attempt.max(0) as u32,
        // Deferred for its pool while owing a rerun of a lost run (see `defer_for_pool`).
        taken_over: row.pool_wait == 2,
        run_now: row.run_now,
        pool_wait: row.pool_wait > 0,
    }
}

/// The run of a claimed row when it is the common case: no previous holder to account for, no
/// pool, nothing missed or abandoned, just a run of `(key, manual)`. `None` for everything else.
fn plain_run(
    row: &JobRow,
    now: i64,
    schedule: &Schedule,
    policy: &Policy,
) -> Option<(RunKey, bool)> {
    if row.prev_exec_by.is_some() || row.pool.is_some() || row.pool_wait != 0 {
        return None;
    }
    let plan = plan_claim(&claimed_state(row), now, policy, schedule);
    if plan.lost.is_some() || plan.abandoned.is_some() || plan.skipped.is_some() {
        return None;
    }
    let ClaimAction::Run {
        slot,
        attempt,
        manual,
    } = plan.action
    else {
        return None;
    };
    tracing::debug!(job = %row.name, token = row.token, ?plan, "claimed");
    let key = RunKey {
        job: row.name.clone(),
        slot,
        attempt,
    };
    Some((key, manual))
}

/// State shared by the poll loop, the lease loop and the run tasks.
struct Shared {
    store: Store,
    node: String,
    config: RwLock<Arc<Config>>,
    running: Mutex<HashMap<i64, Running>>,
    /// Bounds local concurrent runs (`max_parallel`).
    permits: Arc<Semaphore>,
    /// Woken when a run ends (capacity freed) or on a control message.
    wake: Notify,
    /// Set once the shutdown has begun: stops claiming.
    stopping: std::sync::atomic::AtomicBool,
}

pub struct Daemon {
    shared: Arc<Shared>,
}

impl Daemon {
    pub fn new(store: Store, config: Config) -> Daemon {
        let permits = Arc::new(Semaphore::new(config.daemon.max_parallel));
        Daemon {
            shared: Arc::new(Shared {
                store,
                node: config.node_name.clone(),
                config: RwLock::new(Arc::new(config)),
                running: Mutex::new(HashMap::new()),
                permits,
                wake: Notify::new(),
                stopping: false.into(),
            }),
        }
    }

    fn config(&self) -> Arc<Config> {
        self.shared.config()
    }

    /// Applies the configuration's jobs and registers the node (daemon start and reload).
    pub async fn apply_config(&self) -> Result<(), StoreError> {
        let config = self.config();
        self.shared.store.apply_pools(&config.pools).await?;
        let report = self.shared.store.apply_toml(&config.jobs, false).await?;
        for name in &report.created {
            tracing::info!(job = %name, "job created from TOML");
        }
        for name in &report.updated {
            tracing::info!(job = %name, "job updated from TOML");
        }
        for name in &report.removed {
            tracing::info!(job = %name, "job removed (no longer in TOML)");
        }
        for name in &report.conflicts {
            tracing::warn!(job = %name, "TOML job has the name of a job created with SQL; left alone");
        }
        let fingerprint: std::collections::BTreeMap<&str, String> = config
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), crate::store::job_hash(j)))
            .collect();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let registered = self
            .shared
            .store
            .register_node(
                &self.shared.node,
                &host,
                std::process::id(),
                &serde_json::to_string(&fingerprint).unwrap_or_default(),
            )
            .await;
        drop(fingerprint);
        drop(config);
        // Parsing and applying a large TOML leaves freed heap behind; give it back to the system
        // so a long-running node's footprint reflects what it really holds.
        // SAFETY: malloc_trim only releases free memory of glibc's allocator.
        unsafe {
            libc::malloc_trim(0);
        }
        registered
    }

    /// One claim-and-dispatch pass. Tests call it directly.
    pub async fn tick(&self, tasks: &mut JoinSet<()>) -> Result<TickReport, StoreError> {
        let shared = &self.shared;
        let config = self.config();
        let peek = shared.store.peek().await?;
        let mut report = TickReport {
            now: peek.now,
            next_due: peek.next_due,
            next_job: peek.next_name.clone(),
            ..TickReport::default()
        };
        if peek.pending_prepare {
            let (ok, bad) = shared.prepare(peek.now, &config).await?;
            report.prepared = ok;
            report.invalid = bad;
            if ok > 0 {
                // Newly prepared rows may be due sooner than what the peek saw.
                report.next_due = Some(peek.now);
            }
        }
        if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(report);
        }
        let free = shared.permits.available_permits();
        if free == 0 {
            report.saturated = true;
            return Ok(report);
        }
        if peek.next_due.is_none_or(|d| d > peek.now) {
            return Ok(report);
        }
        let (now, rows) = shared
            .store
            .claim(&shared.node, free, config.daemon.lease)
            .await?;
        let claim_started = Instant::now();
        report.claimed = rows.len();
        report.saturated = rows.len() == free;
        let now = now.unwrap_or(peek.now);
        // Rows that simply run their slot have their run starts recorded in one statement;
        // the others (takeovers, pools, missed slots, invalid rows) go one by one.
        let mut ready = Vec::new();
        for row in rows {
            let Ok(permit) = shared.permits.clone().try_acquire_owned() else {
                // Cannot happen (we claimed at most the free permits); the lease will expire.
                tracing::error!(job = %row.name, "claimed beyond capacity; leaving it to expire");
                continue;
            };
            let resolved = resolve(&row, &config.defaults);
            let plain = resolved
                .as_ref()
                .ok()
                .and_then(|(schedule, policy)| plain_run(&row, now, schedule, policy));
            let resolved = match (plain, resolved) {
                (Some((key, manual)), Ok((schedule, policy))) => {
                    let plan = Planned {
                        schedule,
                        policy,
                        key,
                        manual,
                    };
                    ready.push((row, plan, permit));
                    continue;
                }
                (_, resolved) => resolved,
            };
            let shared = self.shared.clone();
            let config = config.clone();
            tasks.spawn(async move {
                shared
                    .handle_claimed(row, resolved, now, claim_started, &config)
                    .await;
                drop(permit);
                shared.wake.notify_one();
            });
        }
        if ready.is_empty() {
            return Ok(report);
        }
        let starts: Vec<(i64, i64, &RunKey)> = ready
            .iter()
            .map(|(row, plan, _)| (row.id, row.token, &plan.key))
            .collect();
        let started = match shared.store.start_runs(&shared.node, &starts).await {
            Ok(started) => Some(started),
            Err(e) => {
                tracing::debug!(error = %e, "recording the run starts together failed; one by one");
                None
            }
        };
        for (i, (row, plan, permit)) in ready.into_iter().enumerate() {
            let started = started.as_ref().map(|s| s[i]);
            let shared = self.shared.clone();
            let config = config.clone();
            tasks.spawn(async move {
                let Planned {
                    schedule,
                    policy,
                    key,
                    manual,
                } = plan;
                let run = Run {
                    row: &row,
                    key,
                    manual,
                    claim_now: now,
                    claimed_at: claim_started,
                    policy: &policy,
                    schedule: &schedule,
                    config: &config,
                };
                match started {
                    Some(true) => shared.supervise(run).await,
                    Some(false) => {
                        tracing::warn!(job = %row.name, "claim lost before the run started; not running");
                    }
                    None => shared.execute(run).await,
                }
                drop(permit);
                shared.wake.notify_one();
            });
        }
        Ok(report)
    }

    /// Runs until stopped through `control`. Returns after every run was finished or stopped
    /// and released.
    pub async fn run(self, mut control: mpsc::UnboundedReceiver<Control>) {
        let mut tasks = JoinSet::new();
        let lease_loop = tokio::spawn(lease_loop(self.shared.clone()));
        let mut errors = 0u32;
        let mut outage_since: Option<Instant> = None;
        let mut last_heartbeat = Instant::now();
        let mut stop_now = false;
        loop {
            while let Some(done) = tasks.try_join_next() {
                if let Err(e) = done {
                    tracing::error!(error = %e, "a run task failed");
                }
            }
            let config = self.config();
            let poll = config.daemon.poll_interval;
            let sleep_for = match self.tick(&mut tasks).await {
                Ok(report) => {
                    if let Some(since) = outage_since.take() {
                        tracing::info!(after = %humantime::format_duration(Duration::from_secs(since.elapsed().as_secs())), "database reachable again");
                    }
                    errors = 0;
                    if report.claimed > 0 || report.prepared > 0 || report.invalid > 0 {
                        tracing::debug!(?report, "tick");
                    }
                    if last_heartbeat.elapsed() >= HEARTBEAT_INTERVAL {
                        last_heartbeat = Instant::now();
                        if let Err(e) = self.shared.store.node_seen(&self.shared.node).await {
                            tracing::warn!(error = %e, "node heartbeat failed");
                        }
                    }
                    let running = self.running_count();
                    crate::systemd::status(&status_line(running, &report));
                    if report.saturated && report.claimed > 0 {
                        Duration::ZERO
                    } else {
                        match report.next_due {
                            Some(due) if due > report.now => {
                                poll.min(Duration::from_millis((due - report.now) as u64))
                            }
                            Some(_) if !report.saturated && report.claimed == 0 => {
                                // Due but nothing claimed: another node got it, or it is
                                // held; look again soon but do not spin.
                                poll.min(Duration::from_millis(50))
                            }
                            _ => poll,
                        }
                    }
                }
                Err(e) => {
                    errors += 1;
                    if outage_since.is_none() {
                        outage_since = Some(Instant::now());
                        tracing::error!(error = %e, "database unreachable; retrying with backoff");
                    }
                    let down = outage_since.map(|s| s.elapsed().as_secs()).unwrap_or(0);
                    crate::systemd::status(&format!(
                        "database unreachable for {down}s, retrying; {} running",
                        self.running_count()
                    ));
                    let backoff = Duration::from_millis(200)
                        .saturating_mul(1 << errors.min(8))
                        .min(ERROR_BACKOFF_MAX);
                    backoff.max(poll.min(ERROR_BACKOFF_MAX))
                }
            };
            // The loop completed a pass: tell the watchdog (never from a timer of its own).
            crate::systemd::watchdog();
            tokio::select! {
                _ = tokio::time::sleep(sleep_for) => {}
                _ = self.shared.wake.notified() => {}
                msg = control.recv() => match msg {
                    Some(Control::Reload(config)) => {
                        self.reload(*config).await;
                    }
                    Some(Control::Stop) | None => break,
                    Some(Control::StopNow) => { stop_now = true; break; }
                },
            }
        }
        self.shutdown(tasks, control, stop_now).await;
        lease_loop.abort();
    }

    fn running_count(&self) -> usize {
        self.shared.running.lock().map(|r| r.len()).unwrap_or(0)
    }

    async fn reload(&self, config: Config) {
        crate::systemd::reloading();
        let old = self.config();
        if config.database_url != old.database_url || config.node_name != old.node_name {
            tracing::warn!(
                "reload: [database] url and [node] name changes need a restart; keeping the old ones"
            );
        }
        if config.daemon.max_parallel != old.daemon.max_parallel {
            tracing::warn!("reload: [daemon] max_parallel changes need a restart");
        }
        *self
            .shared
            .config
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        match self.apply_config().await {
            Ok(()) => tracing::info!("configuration reloaded"),
            Err(e) => tracing::error!(error = %e, "reload: applying the TOML jobs failed"),
        }
        crate::systemd::ready();
    }

    async fn shutdown(
        &self,
        mut tasks: JoinSet<()>,
        mut control: mpsc::UnboundedReceiver<Control>,
        mut stop_now: bool,
    ) {
        let shared = &self.shared;
        crate::systemd::stopping();
        shared
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let grace = self.config().daemon.shutdown_grace;
        let running = shared.running.lock().map(|r| r.len()).unwrap_or(0);
        tracing::info!(running, grace = %humantime::format_duration(grace), "stopping: no more claims");
        if !stop_now && !tasks.is_empty() {
            let deadline = tokio::time::sleep(grace);
            tokio::pin!(deadline);
            let mut ping = tokio::time::interval(Duration::from_secs(1));
            loop {
                crate::systemd::status(&format!(
                    "stopping: waiting for {} running job(s)",
                    self.running_count()
                ));
                tokio::select! {
                    next = tasks.join_next() => if next.is_none() { break },
                    // Still making progress: keep the watchdog fed while jobs finish.
                    _ = ping.tick() => crate::systemd::watchdog(),
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
            if let Ok(mut running) = shared.running.lock() {
                for r in running.values_mut() {
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

impl Shared {
    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Computes the first slot of rows inserted or changed with SQL, and parks invalid ones.
    async fn prepare(&self, now: i64, config: &Config) -> Result<(usize, usize), StoreError> {
        let rows = self.store.rows_to_prepare(PREPARE_BATCH).await?;
        let (mut ok, mut bad) = (0, 0);
        for row in rows {
            match resolve(&row, &config.defaults) {
                Ok((schedule, policy)) => {
                    let slot = policy::next_slot(&schedule, now);
                    let next_exec = slot.saturating_add(jitter_ms(&row.name, slot, policy.jitter));
                    if self.store.set_prepared(row.id, slot, next_exec).await? {
                        ok += 1;
                        tracing::info!(job = %row.name, next = %fmt_ms(slot), "job scheduled");
                    }
                }
                Err(message) => {
                    if self.store.set_invalid(row.id, &message).await? {
                        bad += 1;
                        tracing::error!(job = %row.name, error = %message, "job row is invalid; skipped until fixed");
                    }
                }
            }
        }
        Ok((ok, bad))
    }

    /// Decides and does what a claimed row needs, given its schedule and policy as resolved at
    /// the claim (or why it cannot run).
    async fn handle_claimed(
        self: &Arc<Self>,
        row: JobRow,
        resolved: Result<(Schedule, Policy), String>,
        now: i64,
        claimed_at: Instant,
        config: &Config,
    ) {
        let (schedule, policy) = match resolved {
            Ok(v) => v,
            Err(message) => {
                self.park_claimed(&row, now, &message).await;
                return;
            }
        };
        let mut state = claimed_state(&row);
        if row.prev_exec_by.is_some() {
            // The previous claim was never released: find the run it started, if any.
            match self.store.run_by_token(&row.name, row.token - 1).await {
                Ok(Some((slot, attempt, outcome))) if outcome == "running" || outcome == "lost" => {
                    state.slot = Some(slot);
                    state.attempts = attempt;
                    state.taken_over = true;
                }
                Ok(Some((slot, attempt, outcome))) => {
                    // It ended and was recorded, but the release did not happen: continue from
                    // that run as if it had been released.
                    tracing::info!(job = %row.name, slot = %fmt_ms(slot), attempt, outcome = %outcome, "taking over a finished but unreleased run");
                    state.slot = Some(slot);
                    state.attempts = attempt;
                    if outcome == "ok" {
                        let next = policy::next_slot(&schedule, slot);
                        let release = Release {
                            slot: next,
                            attempts: 0,
                            next_exec: next.saturating_add(jitter_ms(
                                &row.name,
                                next,
                                policy.jitter,
                            )),
                            clear_run_now: false,
                            outcome: None,
                        };
                        self.release_with_retry(&row, &release, None, config).await;
                        return;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(job = %row.name, error = %e, "could not look up the previous holder's run; leaving the claim to expire");
                    return;
                }
            }
        }
        let plan = plan_claim(&state, now, &policy, &schedule);
        tracing::debug!(job = %row.name, token = row.token, ?plan, "claimed");
        if let (ClaimAction::Run { .. }, Some(pool)) = (&plan.action, &row.pool) {
            match self
                .store
                .pool_admit(row.id, pool, row.claimed_at.unwrap_or(now))
                .await
            {
                Ok(Some(true)) => {}
                Ok(Some(false)) => {
                    // The pool is full cluster-wide: wait without spinning, keep the slot.
                    tracing::debug!(job = %row.name, pool = %pool, "pool full; waiting");
                    let delay = config.daemon.poll_interval;
                    if let Some((slot, attempt)) = plan.lost {
                        // Owed a rerun: record the loss now, keep the debt in the row.
                        let key = RunKey {
                            job: row.name.clone(),
                            slot,
                            attempt,
                        };
                        let _ = self
                            .store
                            .record_lost(&key, "its node stopped renewing the lease")
                            .await;
                    }
                    if let Err(e) = self
                        .store
                        .defer_for_pool(row.id, &self.node, row.token, delay, plan.lost)
                        .await
                    {
                        tracing::warn!(job = %row.name, error = %e, "could not release a job waiting for its pool; its lease will expire");
                    }
                    return;
                }
                Ok(None) => {
                    let message = format!(
                        "pool: \"{pool}\" is not defined (add it under [pools] or to cron_pools)"
                    );
                    self.park_claimed(&row, now, &message).await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(job = %row.name, error = %e, "could not check the pool; leaving the claim to expire");
                    return;
                }
            }
        }
        if let Some((slot, attempt)) = plan.lost {
            let by = row.prev_exec_by.clone().unwrap_or_default();
            tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, previous_node = %by, "run lost: its node stopped renewing the lease");
            let key = RunKey {
                job: row.name.clone(),
                slot,
                attempt,
            };
            let message = format!("lease of node {by} expired while the run was in progress");
            if let Err(e) = self.store.record_lost(&key, &message).await {
                tracing::warn!(job = %row.name, error = %e, "could not record the lost run");
            }
        }
        if let Some((slot, attempt)) = plan.abandoned {
            self.record_abandoned(
                &row.name,
                slot,
                attempt,
                "pending retries abandoned: the next regular slot has come",
            )
            .await;
        }
        if let Some(skipped) = plan.skipped {
            tracing::warn!(job = %row.name, count = skipped.count, first = %fmt_ms(skipped.first), last = %fmt_ms(skipped.last), misfire = policy.misfire.as_str(), "missed slots skipped");
            let _ = self
                .store
                .record_summary(
                    &row.name,
                    skipped.first,
                    0,
                    &self.node,
                    "skipped",
                    Some(skipped.count as i64),
                    Some(skipped.last),
                    &format!(
                        "{} missed slot(s) not run (misfire = {})",
                        skipped.count,
                        policy.misfire.as_str()
                    ),
                )
                .await;
        }
        match plan.action {
            ClaimAction::Wait { slot } => {
                let release = Release {
                    slot,
                    attempts: 0,
                    next_exec: slot.saturating_add(jitter_ms(&row.name, slot, policy.jitter)),
                    clear_run_now: false,
                    outcome: None,
                };
                self.release_with_retry(&row, &release, None, config).await;
            }
            ClaimAction::Run {
                slot,
                attempt,
                manual,
            } => {
                self.execute(Run {
                    row: &row,
                    key: RunKey {
                        job: row.name.clone(),
                        slot,
                        attempt,
                    },
                    manual,
                    claim_now: now,
                    claimed_at,
                    policy: &policy,
                    schedule: &schedule,
                    config,
                })
                .await;
            }
        }
    }

    /// Records the run's start (fenced by the claim), then supervises it.
    async fn execute(self: &Arc<Self>, run: Run<'_>) {
        let Run {
            row,
            key,
            manual,
            schedule,
            config,
            ..
        } = &run;
        match self
            .store
            .start_run(row.id, &self.node, row.token, key)
            .await
        {
            Ok(Fenced::Done) => {}
            Ok(Fenced::Lost) => {
                tracing::warn!(job = %row.name, "claim lost before the run started; not running");
                return;
            }
            Err(e) if e.is_unique_violation() => {
                tracing::error!(job = %row.name, slot = %fmt_ms(key.slot), attempt = key.attempt, "this run is already recorded; not running it twice");
                let next = policy::next_slot(schedule, key.slot);
                let release = Release {
                    slot: next,
                    attempts: 0,
                    next_exec: next,
                    clear_run_now: *manual,
                    outcome: None,
                };
                self.release_with_retry(row, &release, None, config).await;
                return;
            }
            Err(e) => {
                tracing::error!(job = %row.name, error = %e, "could not record the run start; the lease will expire and the slot be retried");
                return;
            }
        }
        self.supervise(run).await;
    }

    /// Runs a started run's process, keeps its lease, and releases the row by policy.
    async fn supervise(self: &Arc<Self>, run: Run<'_>) {
        let Run {
            row,
            key,
            manual,
            claim_now,
            claimed_at,
            policy,
            schedule,
            config,
        } = run;
        let (slot, attempt) = (key.slot, key.attempt);
        let (stop_tx, stop_rx) = watch::channel(StopRequest::None);
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                row.id,
                Running {
                    token: row.token,
                    job: row.name.clone(),
                    trusted_until: lease::trusted_until(claimed_at, config.daemon.lease),
                    stop: stop_tx,
                    interrupted: None,
                    on_lease_lost: policy.on_lease_lost,
                },
            );
        let spec = match run_spec(row, slot, attempt, &self.node, policy, config) {
            Ok(s) => s,
            Err(message) => {
                self.running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&row.id);
                self.finish(
                    row,
                    &key,
                    manual,
                    claim_now,
                    policy,
                    schedule,
                    config,
                    RunResult {
                        outcome: "failed",
                        exit_code: None,
                        signal: None,
                        started: claim_now,
                        output: String::new(),
                        message: Some(message),
                    },
                )
                .await;
                return;
            }
        };
        tracing::info!(job = %row.name, slot = %fmt_ms(slot), attempt, token = row.token, node = %self.node, "started");
        let started = chrono::Utc::now().timestamp_millis();
        let result = runner::run(&spec, stop_rx).await;
        let interrupted = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&row.id)
            .and_then(|r| r.interrupted);
        let result = match result {
            Ok(out) => {
                let outcome = if out.timed_out {
                    "timeout"
                } else if out.success() {
                    "ok"
                } else {
                    "failed"
                };
                RunResult {
                    outcome,
                    exit_code: out.exit_code.map(i64::from),
                    signal: out.signal.map(i64::from),
                    started,
                    output: out.output,
                    message: None,
                }
            }
            Err(e) => RunResult {
                outcome: "failed",
                exit_code: None,
                signal: None,
                started,
                output: String::new(),
                message: Some(e.to_string()),
            },
        };
        match interrupted {
            Some(Interrupt::LeaseLost) => {
                tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, outcome = result.outcome, "run ended after its lease was lost; nothing written");
            }
            Some(Interrupt::Shutdown) => {
                tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, "run stopped by shutdown; released for takeover");
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    let _ = self
                        .store
                        .record_lost(
                            &key,
                            &format!("stopped by the shutdown of node {}", self.node),
                        )
                        .await;
                    let _ = self
                        .store
                        .release_for_takeover(row.id, &self.node, row.token)
                        .await;
                })
                .await;
            }
            None => {
                tracing::info!(job = %row.name, slot = %fmt_ms(slot), attempt, outcome = result.outcome, exit_code = ?result.exit_code, signal = ?result.signal, "finished");
                self.finish(
                    row, &key, manual, claim_now, policy, schedule, config, result,
                )
                .await;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        row: &JobRow,
        key: &RunKey,
        manual: bool,
        claim_now: i64,
        policy: &Policy,
        schedule: &Schedule,
        config: &Config,
        result: RunResult,
    ) {
        let failed = result.outcome != "ok";
        let now_guess = claim_now + (Utc::now().timestamp_millis() - result.started).max(0);
        let waiting = row.slot.unwrap_or(key.slot);
        let next = after_run(
            &row.name,
            &Finished {
                slot: key.slot,
                attempt: key.attempt,
                manual,
                failed,
                now: now_guess,
                waiting_slot: waiting,
            },
            policy,
            schedule,
        );
        if failed && next.slot == key.slot {
            tracing::warn!(job = %row.name, slot = %fmt_ms(key.slot), attempt = key.attempt, retry_at = %fmt_ms(next.next_exec), "will retry");
        }
        if let Some((slot, attempt)) = next.abandoned {
            self.record_abandoned(
                &row.name,
                slot,
                attempt,
                "retry abandoned: it would pass the next regular slot",
            )
            .await;
        }
        let release = Release {
            slot: next.slot,
            attempts: next.attempts,
            next_exec: next.next_exec,
            clear_run_now: manual,
            outcome: Some(result),
        };
        self.release_with_retry(row, &release, Some(key), config)
            .await;
    }

    /// Releases a claimed row that cannot run and parks it with the reason in `error`, until a
    /// change to the row clears it. Its slot and attempts are kept.
    async fn park_claimed(&self, row: &JobRow, now: i64, message: &str) {
        tracing::error!(job = %row.name, error = %message, "claimed job row is invalid; parked until fixed");
        let release = Release {
            slot: row.slot.unwrap_or(now),
            attempts: row.attempt.max(0) as u32,
            next_exec: crate::store::PARKED,
            clear_run_now: false,
            outcome: None,
        };
        if let Err(e) = self
            .store
            .release(row.id, &self.node, row.token, &release, None)
            .await
        {
            tracing::warn!(job = %row.name, error = %e, "could not release the invalid row; its lease will expire");
        }
        if let Err(e) = self.store.park(row.id, message).await {
            tracing::warn!(job = %row.name, error = %e, "could not record why the row is invalid");
        }
    }

    /// Logs and records retries given up: the history line `abandoned` for `(slot, attempt)`.
    async fn record_abandoned(&self, job: &str, slot: i64, attempt: u32, why: &str) {
        tracing::warn!(job = %job, slot = %fmt_ms(slot), attempt, "{why}");
        if let Err(e) = self
            .store
            .record_summary(job, slot, attempt, &self.node, "abandoned", None, None, why)
            .await
        {
            tracing::warn!(job = %job, error = %e, "could not record abandoned retries");
        }
    }

    /// Releases a row, retrying through short database outages for up to one lease.
    async fn release_with_retry(
        &self,
        row: &JobRow,
        release: &Release,
        key: Option<&RunKey>,
        config: &Config,
    ) {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            match self
                .store
                .release(row.id, &self.node, row.token, release, key)
                .await
            {
                Ok(Fenced::Done) => return,
                Ok(Fenced::Lost) => {
                    tracing::warn!(job = %row.name, "release found the row taken over; recorded as lost");
                    return;
                }
                Err(e) if started.elapsed() < config.daemon.lease => {
                    tracing::warn!(job = %row.name, error = %e, "release failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::error!(job = %row.name, error = %e, "release failed for a whole lease; another node will take the row over");
                    return;
                }
            }
        }
    }
}

/// Extends the leases of live runs every third of the lease; enforces the trust window.
async fn lease_loop(shared: Arc<Shared>) {
    let mut failing = false;
    loop {
        let lease = shared.config().daemon.lease;
        tokio::time::sleep(lease::extend_interval(lease)).await;
        let held: Vec<(i64, i64)> = shared
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, r)| r.interrupted.is_none())
            .map(|(id, r)| (*id, r.token))
            .collect();
        if held.is_empty() {
            continue;
        }
        let attempt = Instant::now();
        let result = shared.store.extend(&shared.node, &held, lease).await;
        let mut running = shared.running.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(lost) => {
                if failing {
                    tracing::info!("lease extension works again");
                    failing = false;
                }
                for (id, _) in &held {
                    if let Some(r) = running.get_mut(id) {
                        if lost.contains(id) {
                            lose(r, "another node holds the row now");
                        } else {
                            r.trusted_until = lease::trusted_until(attempt, lease);
                        }
                    }
                }
            }
            Err(e) => {
                if !failing {
                    tracing::error!(error = %e, "lease extension failed; runs continue until their trust window ends");
                    failing = true;
                }
                let now = Instant::now();
                for r in running.values_mut() {
                    if r.interrupted.is_none() && r.trusted_until <= now {
                        lose(r, "the database was unreachable for longer than the lease");
                    }
                }
            }
        }
    }
}

fn lose(r: &mut Running, why: &str) {
    r.interrupted = Some(Interrupt::LeaseLost);
    match r.on_lease_lost {
        OnLeaseLost::Kill => {
            tracing::error!(job = %r.job, token = r.token, reason = why, "lease lost; stopping the job");
            let _ = r.stop.send(StopRequest::Kill);
        }
        OnLeaseLost::Ignore => {
            tracing::error!(job = %r.job, token = r.token, reason = why, "lease lost; letting the job finish (on_lease_lost = ignore)");
        }
    }
}

/// The schedule and the policy of a row, or why it cannot run.
pub fn resolve(row: &JobRow, defaults: &Policy) -> Result<(Schedule, Policy), String> {
    let overrides = row_overrides(row)?;
    let policy = overrides.apply_to(defaults);
    let tz = parse_zone(&policy.timezone).map_err(|e| format!("timezone: {e}"))?;
    let expr =
        crate::schedule::CronExpr::parse(&row.schedule).map_err(|e| format!("schedule: {e}"))?;
    match (&row.command, &row.argv) {
        (_, Some(argv)) => {
            let v: Vec<String> = serde_json::from_str(argv)
                .map_err(|e| format!("argv: not a JSON array of strings ({e})"))?;
            if v.first().is_none_or(|p| p.is_empty()) {
                return Err("argv: must name a program first".into());
            }
        }
        (Some(c), None) if !c.trim().is_empty() => {}
        _ => return Err("command: is empty".into()),
    }
    if let Some(env) = &row.env {
        serde_json::from_str::<HashMap<String, String>>(env)
            .map_err(|e| format!("env: not a JSON object of strings ({e})"))?;
    }
    Ok((Schedule::new(expr, tz), policy))
}

fn row_overrides(row: &JobRow) -> Result<PolicyOverrides, String> {
    let get = |k: &str| row.policy.get(k).cloned().flatten();
    let int = |k: &str| -> Result<Option<i64>, String> {
        get(k)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| format!("{k}: \"{v}\" is not a whole number"))
            })
            .transpose()
    };
    let raw = crate::config::RawPolicy {
        timezone: row.timezone.clone(),
        misfire: get("misfire"),
        starting_deadline: get("starting_deadline"),
        max_catch_up: int("max_catch_up")?,
        retries: int("retries")?,
        retry_backoff: get("retry_backoff"),
        retry_backoff_max: get("retry_backoff_max"),
        timeout: get("timeout"),
        kill_grace: get("kill_grace"),
        jitter: get("jitter"),
        on_lease_lost: get("on_lease_lost"),
        rerun_lost: int("rerun_lost")?.map(|n| n != 0),
    };
    PolicyOverrides::from_raw(&raw).map_err(|(k, m)| format!("{k}: {m}"))
}

fn run_spec(
    row: &JobRow,
    slot: i64,
    attempt: u32,
    node: &str,
    policy: &Policy,
    config: &Config,
) -> Result<RunSpec, String> {
    let program = match (&row.argv, &row.command) {
        (Some(argv), _) => {
            Program::Argv(serde_json::from_str(argv).map_err(|e| format!("argv: {e}"))?)
        }
        (None, Some(c)) => Program::Shell(c.clone()),
        (None, None) => return Err("command: is empty".into()),
    };
    let mut env: Vec<(String, String)> = match &row.env {
        Some(e) => serde_json::from_str::<std::collections::BTreeMap<String, String>>(e)
            .map_err(|e| format!("env: {e}"))?
            .into_iter()
            .collect(),
        None => vec![],
    };
    env.push(("SQLCRON_JOB".into(), row.name.clone()));
    env.push(("SQLCRON_SLOT".into(), fmt_ms(slot)));
    env.push(("SQLCRON_ATTEMPT".into(), attempt.to_string()));
    env.push(("SQLCRON_NODE".into(), node.to_string()));
    env.push(("SQLCRON_FENCING_TOKEN".into(), row.token.to_string()));
    Ok(RunSpec {
        job: row.name.clone(),
        program,
        env,
        workdir: row.workdir.clone().map(Into::into),
        timeout: policy.timeout,
        kill_grace: policy.kill_grace,
        output_tail: config.daemon.output_tail,
    })
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

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-03-29T01:00:00Z`).
pub fn fmt_ms(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}
