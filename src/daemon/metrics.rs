//! What this node counts: Prometheus metrics and the health verdict behind `/healthz`.
//!
//! The daemon records what it decides here (runs by outcome, lateness, missed slots, lease
//! losses, takeovers, retries, claim and release latency, database errors) at the same points
//! where it logs them; `service/metrics.rs` serves [`Metrics::encode`] as `GET /metrics` (the
//! OpenMetrics text format, which Prometheus reads) and [`Metrics::unhealthy`] as `GET /healthz`. Every series carries the node's name as the `node`
//! label, so the series of a cluster's nodes add up with `sum by (job, outcome)`.
//!
//! Deliberately not here: anything read from the database at scrape time. A scrape never
//! touches the database; the figures that come from it (nodes alive, clock offset) are taken
//! by the poll loop on its own schedule.

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    job: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabel {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

/// The node's metrics. Cheap to update from any task (atomics and a short lock per family).
pub struct Metrics {
    registry: Registry,
    /// Runs that ended and were recorded, by job and outcome (`ok`, `failed`, `timeout`).
    runs: Family<RunLabels, Counter>,
    /// From a run's scheduled time to its start, database clock.
    lateness: Histogram,
    /// Slots skipped as missed by the misfire policy.
    missed: Family<JobLabel, Counter>,
    /// Slots a job's calendars skipped or deferred (`skip_on`, `only_in`).
    calendar_skipped: Family<JobLabel, Counter>,
    /// How long a run waited for the start rate between its claim and its start.
    rate_hold: Histogram,
    /// Claimed rows handed back because the start rate had no start for them yet.
    rate_given_back: Counter,
    /// Runs whose lease this node lost while they ran.
    lease_losses: Family<JobLabel, Counter>,
    /// Rows this node took over from a node that stopped renewing (lost or unreleased runs).
    takeovers: Family<JobLabel, Counter>,
    /// Failed runs that will be retried.
    retries: Family<JobLabel, Counter>,
    /// Runs this node supervises now.
    running: Gauge,
    /// One claim statement (claim of all due rows in one tick).
    claim_seconds: Histogram,
    /// Claim statements that took nothing although a row looked due: another node took it
    /// first (a race lost), or it was not this node's to take.
    claims_empty: Counter,
    /// One release (history and row), retries included.
    release_seconds: Histogram,
    /// Database errors by kind (`timeout`, `deadlock`, `unreachable`, `refused`, `other`).
    db_errors: Family<KindLabel, Counter>,
    /// The `job` label values this node has series for (at most [`JOB_LABELS_MAX`]).
    job_labels: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Runs this node recorded that the database no longer held after an outage (see
    /// `daemon/recorded.rs`).
    lost_records: Counter,
    /// Database time of the last successful run's end, per job, in seconds since the epoch.
    last_success: Family<JobLabel, Gauge<f64, AtomicU64>>,
    /// Nodes whose heartbeat is recent, as this node last saw them.
    nodes_alive: Gauge,
    /// Database clock minus this node's clock, in seconds, at the last poll.
    clock_offset: Gauge<f64, AtomicU64>,
    /// The bytes SQLite's allocator holds in this process (its page caches, prepared
    /// statements and schemas; 0 on PostgreSQL and MySQL), read at each scrape.
    sqlite_heap: Gauge,
    malloc_in_use: Gauge,
    malloc_free: Gauge,
    /// History rows this node deleted under the retention limits, by table.
    pruned: Family<TableLabel, Counter>,
    /// Alert events this node recorded, by job and event (`missed` with `overdue` for the
    /// dead-man's switch).
    alerts: Family<AlertLabel, Counter>,
    /// Hook deliveries this node ended, by event and result (`sent`, `retry`, `failed`).
    deliveries: Family<DeliveryLabel, Counter>,
    /// What `/healthz` answers from.
    health: Mutex<Health>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabel {
    job: String,
    event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabel {
    event: String,
    result: String,
}

/// The poll loop's last pass, for the health check.
struct Health {
    /// When the loop last completed a pass.
    last_pass: Instant,
    /// Whether that pass reached the database.
    database_ok: bool,
    /// The last database error any loop of the node met.
    last_db_error: Option<Instant>,
    /// The first error since the runs were last read back that may mean a failover (a
    /// connection broke, or the server took no writes), met by any loop of the node.
    connection_lost: Option<Instant>,
    /// Longest time between two passes of a healthy loop.
    window: Duration,
}

impl Metrics {
    /// Metrics of node `node`; `/healthz` fails when no pass completes within `window`.
    pub fn new(node: &str, window: Duration) -> Metrics {
        let mut registry = Registry::with_prefix_and_labels(
            "sqlcron",
            [(Cow::Borrowed("node"), Cow::Owned(escape_label(node)))].into_iter(),
        );
        let m = Metrics {
            runs: Family::default(),
            lateness: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            missed: Family::default(),
            calendar_skipped: Family::default(),
            rate_hold: Histogram::new(exponential_buckets(0.01, 2.0, 12)),
            rate_given_back: Counter::default(),
            lease_losses: Family::default(),
            takeovers: Family::default(),
            retries: Family::default(),
            running: Gauge::default(),
            claim_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            claims_empty: Counter::default(),
            release_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            db_errors: Family::default(),
            job_labels: Default::default(),
            lost_records: Counter::default(),
            last_success: Family::default(),
            nodes_alive: Gauge::default(),
            clock_offset: Gauge::default(),
            sqlite_heap: Gauge::default(),
            malloc_in_use: Gauge::default(),
            malloc_free: Gauge::default(),
            pruned: Family::default(),
            alerts: Family::default(),
            deliveries: Family::default(),
            health: Mutex::new(Health {
                last_pass: Instant::now(),
                database_ok: false,
                last_db_error: None,
                connection_lost: None,
                window,
            }),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "runs",
            "Runs ended and recorded, by job and outcome",
            m.runs.clone(),
        );
        r.register_with_unit(
            "start_lateness",
            "Time from a run's scheduled slot to its start (database clock)",
            Unit::Seconds,
            m.lateness.clone(),
        );
        r.register(
            "missed_slots",
            "Slots skipped as missed by the misfire policy",
            m.missed.clone(),
        );
        r.register(
            "calendar_skipped_slots",
            "Slots a job's calendars skipped or deferred (skip_on, only_in)",
            m.calendar_skipped.clone(),
        );
        r.register_with_unit(
            "start_rate_hold",
            "Time a run waited for the start rate ([cluster] max_starts_per_second) after its claim",
            Unit::Seconds,
            m.rate_hold.clone(),
        );
        r.register(
            "start_rate_given_back",
            "Claimed rows handed back unrun because the start rate had no start for them yet",
            m.rate_given_back.clone(),
        );
        r.register(
            "lease_losses",
            "Runs whose lease this node lost while they ran",
            m.lease_losses.clone(),
        );
        r.register(
            "takeovers",
            "Rows taken over from a node that stopped renewing",
            m.takeovers.clone(),
        );
        r.register(
            "retries",
            "Failed runs scheduled for a retry",
            m.retries.clone(),
        );
        r.register(
            "running_jobs",
            "Runs this node supervises now",
            m.running.clone(),
        );
        r.register_with_unit(
            "claim_duration",
            "One claim statement",
            Unit::Seconds,
            m.claim_seconds.clone(),
        );
        r.register(
            "claims_empty",
            "Claim statements that took no row although one looked due (a race another node won)",
            m.claims_empty.clone(),
        );
        r.register_with_unit(
            "release_duration",
            "One run's release, retries included",
            Unit::Seconds,
            m.release_seconds.clone(),
        );
        r.register(
            "database_errors",
            "Database errors by kind",
            m.db_errors.clone(),
        );
        r.register(
            "lost_run_records",
            "Runs this node recorded that the database no longer held after an outage (a failover to an asynchronous standby)",
            m.lost_records.clone(),
        );
        r.register_with_unit(
            "last_success_timestamp",
            "Database time of the job's last successful run end, seconds since the epoch",
            Unit::Seconds,
            m.last_success.clone(),
        );
        r.register(
            "nodes_alive",
            "Nodes with a recent heartbeat (counted once a minute)",
            m.nodes_alive.clone(),
        );
        r.register_with_unit(
            "clock_offset",
            "Database clock minus this node's clock",
            Unit::Seconds,
            m.clock_offset.clone(),
        );
        r.register_with_unit(
            "sqlite_heap",
            "Memory SQLite's allocator holds in this process (page caches, statements)",
            Unit::Bytes,
            m.sqlite_heap.clone(),
        );
        r.register_with_unit(
            "malloc_in_use",
            "Heap this process's allocator has handed out and not had back",
            Unit::Bytes,
            m.malloc_in_use.clone(),
        );
        r.register_with_unit(
            "malloc_free",
            "Heap this process's allocator holds free without giving it back to the system",
            Unit::Bytes,
            m.malloc_free.clone(),
        );
        r.register(
            "history_pruned_rows",
            "History rows deleted under the retention limits, by table",
            m.pruned.clone(),
        );
        r.register(
            "alerts",
            "Alert events recorded by this node, by job and event (overdue: the dead-man's switch)",
            m.alerts.clone(),
        );
        r.register(
            "hook_deliveries",
            "Hook deliveries ended by this node, by event and result (sent, retry, failed)",
            m.deliveries.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn run_ended(&self, job: &str, outcome: &str, ended_ms: i64) {
        self.runs
            .get_or_create(&RunLabels {
                job: self.job_label(job).job,
                outcome: outcome.to_string(),
            })
            .inc();
        if outcome == "ok" {
            self.last_success
                .get_or_create(&self.job_label(job))
                .set(ended_ms as f64 / 1000.0);
        }
    }

    pub fn run_started(&self, lateness_ms: i64) {
        self.lateness.observe(lateness_ms.max(0) as f64 / 1000.0);
    }

    pub fn missed(&self, job: &str, slots: u64) {
        self.missed
            .get_or_create(&self.job_label(job))
            .inc_by(slots);
    }

    pub fn calendar_skipped(&self, job: &str, slots: u64) {
        self.calendar_skipped
            .get_or_create(&self.job_label(job))
            .inc_by(slots);
    }

    pub fn rate_held(&self, held: Duration) {
        self.rate_hold.observe(held.as_secs_f64());
    }

    pub fn rate_given_back(&self, rows: u64) {
        self.rate_given_back.inc_by(rows);
    }

    pub fn lease_lost(&self, job: &str) {
        self.lease_losses.get_or_create(&self.job_label(job)).inc();
    }

    pub fn takeover(&self, job: &str) {
        self.takeovers.get_or_create(&self.job_label(job)).inc();
    }

    pub fn retry(&self, job: &str) {
        self.retries.get_or_create(&self.job_label(job)).inc();
    }

    pub fn claim_took(&self, d: Duration, rows: usize) {
        self.claim_seconds.observe(d.as_secs_f64());
        if rows == 0 {
            self.claims_empty.inc();
        }
    }

    pub fn release_took(&self, d: Duration) {
        self.release_seconds.observe(d.as_secs_f64());
    }

    pub fn database_error(&self, kind: &str) {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_db_error = Some(Instant::now());
        self.failover_hint(kind);
        self.database_error_counted(kind);
    }

    /// Counts an error of `kind` that neither fails the pass nor hints at a failover (the lease
    /// extension's connection refused while the node's pool works, `lease_connection.rs`).
    pub fn database_error_counted(&self, kind: &str) {
        self.db_errors
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Notes an error of `kind` that is handled without being counted (a batch that fails is
    /// written again row by row): a broken connection or a server that took no writes may mean
    /// a failover (see [`Metrics::take_connection_lost`]).
    pub fn failover_hint(&self, kind: &str) {
        if matches!(kind, "unreachable" | "read-only") {
            self.health
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .connection_lost
                .get_or_insert_with(Instant::now);
        }
    }

    /// When the first error that may mean a failover (a broken connection, a server that
    /// took no writes) happened since the last call, if one did: the runs recorded before it
    /// are then read back (`daemon/recorded.rs`).
    pub fn take_connection_lost(&self) -> Option<Instant> {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .connection_lost
            .take()
    }

    /// Whether an error that may mean a failover waits for its read-back.
    pub fn connection_lost_pending(&self) -> bool {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .connection_lost
            .is_some()
    }

    /// Puts back what [`Metrics::take_connection_lost`] took, when the read-back failed.
    pub fn keep_connection_lost(&self, since: Instant) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        health.connection_lost = Some(health.connection_lost.map_or(since, |t| t.min(since)));
    }

    pub fn lost_records(&self, n: u64) {
        self.lost_records.inc_by(n);
    }

    pub fn pruned(&self, table: &str, rows: u64) {
        self.pruned
            .get_or_create(&TableLabel {
                table: table.to_string(),
            })
            .inc_by(rows);
    }

    pub fn alert(&self, job: &str, event: &str) {
        self.alerts
            .get_or_create(&AlertLabel {
                job: escape_label(job),
                event: event.to_string(),
            })
            .inc();
    }

    pub fn delivery(&self, event: &str, result: &str) {
        self.deliveries
            .get_or_create(&DeliveryLabel {
                event: event.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    pub fn nodes_alive(&self, n: usize) {
        self.nodes_alive.set(n as i64);
    }

    /// One pass of the poll loop ended: whether it reached the database, the runs it
    /// supervises, and (when it did) the database clock minus this node's, in milliseconds.
    pub fn pass(&self, database_ok: bool, running: usize, clock_offset_ms: Option<i64>) {
        self.running.set(running as i64);
        if let Some(ms) = clock_offset_ms {
            self.clock_offset.set(ms as f64 / 1000.0);
        }
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        h.last_pass = Instant::now();
        h.database_ok = database_ok;
    }

    /// `None` when healthy at `now`, else why not.
    pub fn unhealthy(&self, now: Instant) -> Option<String> {
        let h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        let since = now.saturating_duration_since(h.last_pass);
        // A pass waiting on a database that does not answer is late because of the database:
        // say so when a database error was met since the last pass.
        let db_failing = !h.database_ok || h.last_db_error.is_some_and(|t| t > h.last_pass);
        if since > h.window && db_failing {
            Some(format!(
                "the database is unreachable (the poll loop has not completed a pass for {}s)",
                since.as_secs()
            ))
        } else if since > h.window {
            Some(format!(
                "the poll loop has not completed a pass for {}s",
                since.as_secs()
            ))
        } else if !h.database_ok {
            Some("the database is unreachable".into())
        } else {
            None
        }
    }

    /// The registry in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        // A counter of this process's, not a database read.
        self.sqlite_heap.set(crate::store::sqlite_heap_bytes());
        let (in_use, free) = super::heap::malloc_bytes();
        self.malloc_in_use.set(in_use as i64);
        self.malloc_free.set(free as i64);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The most `job` label values one node keeps series for; the runs of jobs beyond are counted
/// under [`OTHER_JOBS`]. Rows written with SQL name jobs: without a bound, each name a writer
/// makes (and each one-off) would add series kept for the process's life.
pub const JOB_LABELS_MAX: usize = 20_000;

/// The `job` label of the runs of jobs beyond [`JOB_LABELS_MAX`].
pub const OTHER_JOBS: &str = "(other)";

impl Metrics {
    /// A chained or backfill row's runs count as its job's (`load#after-12`,
    /// `load#backfill-1700000000000` → `load`): one series per job, at most
    /// [`JOB_LABELS_MAX`] of them.
    fn job_label(&self, job: &str) -> JobLabel {
        let job = crate::model::signing::signed_name(job);
        let mut seen = self.job_labels.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains(job) {
            if seen.len() >= JOB_LABELS_MAX {
                return JobLabel {
                    job: OTHER_JOBS.into(),
                };
            }
            seen.insert(job.to_string());
        }
        JobLabel {
            job: escape_label(job),
        }
    }
}

/// A label value as the text format needs it: the encoder writes values as they are, so a
/// backslash, a double quote or a newline in a job's name (a row written with SQL may hold
/// any) would end the value early and forge series of other jobs.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_rate_is_counted() {
        let m = Metrics::new("web-1", Duration::from_secs(10));
        m.rate_held(Duration::from_millis(1_500));
        m.rate_given_back(3);
        let text = m.encode();
        assert!(
            text.contains("sqlcron_start_rate_hold_seconds_count{node=\"web-1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sqlcron_start_rate_given_back_total{node=\"web-1\"} 3"),
            "{text}"
        );
    }

    /// Issue 25 (10): a job name with a quote and a newline cannot forge a series of another
    /// job, nor break the scrape.
    #[test]
    fn empty_claims_and_sqlite_memory_are_reported() {
        let m = Metrics::new("web-1", Duration::from_secs(10));
        m.claim_took(Duration::from_millis(2), 0);
        m.claim_took(Duration::from_millis(2), 5);
        let text = m.encode();
        assert!(
            text.contains("sqlcron_claims_empty_total{node=\"web-1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sqlcron_claim_duration_seconds_count{node=\"web-1\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("sqlcron_sqlite_heap_bytes{node=\"web-1\"} "),
            "{text}"
        );
        // The allocator's heap: a test process has handed out something.
        let in_use = text
            .lines()
            .find_map(|l| l.strip_prefix("sqlcron_malloc_in_use_bytes{node=\"web-1\"} "))
            .and_then(|v| v.parse::<i64>().ok());
        assert!(in_use.is_some_and(|b| b > 0), "{text}");
        assert!(
            text.contains("sqlcron_malloc_free_bytes{node=\"web-1\"} "),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new("web-1", Duration::from_secs(10));
        let forged = "x\"} 1\nsqlcron_last_success_timestamp_seconds{node=\"web-1\",job=\"backup";
        m.run_ended(forged, "ok", 1_700_000_000_000);
        let text = m.encode();
        assert!(
            !text.lines().any(|l| l.starts_with(
                "sqlcron_last_success_timestamp_seconds{node=\"web-1\",job=\"backup\""
            )),
            "{text}"
        );
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let parsed = prometheus_parse::Scrape::parse(lines).expect("the scrape parses");
        assert!(
            parsed
                .samples
                .iter()
                .all(|s| s.labels.get("job") != Some("backup")),
            "{text}"
        );
    }

    #[test]
    fn series_carry_the_node_and_job_labels() {
        let m = Metrics::new("web-1", Duration::from_secs(10));
        m.run_ended("backup", "ok", 1_700_000_000_000);
        m.run_ended("backup", "failed", 1_700_000_001_000);
        m.missed("backup", 3);
        m.pass(true, 2, Some(-1500));
        let text = m.encode();
        for line in [
            "sqlcron_runs_total{node=\"web-1\",job=\"backup\",outcome=\"ok\"} 1",
            "sqlcron_runs_total{node=\"web-1\",job=\"backup\",outcome=\"failed\"} 1",
            "sqlcron_missed_slots_total{node=\"web-1\",job=\"backup\"} 3",
            "sqlcron_running_jobs{node=\"web-1\"} 2",
            "sqlcron_clock_offset_seconds{node=\"web-1\"} -1.5",
            "sqlcron_last_success_timestamp_seconds{node=\"web-1\",job=\"backup\"} 1700000000.0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
    }

    #[test]
    fn backfill_rows_count_as_their_job_and_job_labels_are_bounded() {
        let m = Metrics::new("n", Duration::from_secs(10));
        m.run_ended("etl#backfill-1700000000000", "ok", 1_700_000_000_000);
        m.run_ended("etl#after-12", "ok", 1_700_000_000_000);
        let text = m.encode();
        assert!(
            text.lines()
                .any(|l| l == "sqlcron_runs_total{node=\"n\",job=\"etl\",outcome=\"ok\"} 2"),
            "{text}"
        );
        assert!(!text.contains("#backfill-"), "{text}");
        for i in 0..JOB_LABELS_MAX + 5 {
            m.missed(&format!("job-{i}"), 1);
        }
        let text = m.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("sqlcron_missed_slots_total{"))
            .count();
        // etl's label was kept first: JOB_LABELS_MAX - 1 more, then one for all the others.
        assert_eq!(series, JOB_LABELS_MAX);
        assert!(
            text.lines()
                .any(|l| l
                    == format!("sqlcron_missed_slots_total{{node=\"n\",job=\"{OTHER_JOBS}\"}} 6")),
            "{}",
            text.lines()
                .filter(|l| l.contains(OTHER_JOBS))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    #[test]
    fn health_needs_a_recent_pass_that_reached_the_database() {
        let m = Metrics::new("n", Duration::from_secs(10));
        let now = Instant::now();
        assert_eq!(
            m.unhealthy(now).as_deref(),
            Some("the database is unreachable")
        );
        m.pass(true, 0, None);
        assert_eq!(m.unhealthy(Instant::now()), None);
        let later = Instant::now() + Duration::from_secs(11);
        assert!(
            m.unhealthy(later)
                .unwrap()
                .contains("has not completed a pass for 1")
        );
        // A late pass after a database error names the database.
        m.database_error("unreachable");
        let late = m.unhealthy(later).unwrap();
        assert!(late.starts_with("the database is unreachable"), "{late}");
        m.pass(false, 0, None);
        assert!(m.unhealthy(Instant::now()).is_some());
    }

    #[test]
    fn only_errors_that_may_mean_a_failover_ask_for_a_read_back() {
        let m = Metrics::new("a", Duration::from_secs(10));
        m.database_error("deadlock");
        m.database_error("timeout");
        m.database_error("refused");
        assert_eq!(m.take_connection_lost(), None);
        m.database_error("read-only");
        let first = m
            .take_connection_lost()
            .expect("a server that took no writes");
        assert_eq!(m.take_connection_lost(), None, "taken once");
        m.database_error("unreachable");
        m.database_error("unreachable");
        let second = m.take_connection_lost().unwrap();
        // A read-back that failed is kept with the earliest time.
        m.database_error("unreachable");
        m.keep_connection_lost(first);
        assert_eq!(m.take_connection_lost(), Some(first));
        assert!(second >= first);
    }
}
