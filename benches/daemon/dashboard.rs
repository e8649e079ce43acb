//! The dashboard under a large cluster's data (`cargo bench --bench daemon -- dashboard`):
//! 10,000 jobs and 1,000,000 runs on PostgreSQL (and one job of 200,000 runs), the job list
//! (first page, a deep page, a search, a filter) and a job's page, the runs view (filters,
//! an output search, the first page of the 200,000), one client and 20 at once; then the run path's start lateness
//! (3 nodes, 100 jobs every second) without and with 20 clients reading the dashboard.

use std::time::{Duration, Instant};

use sqlcron::store::Dialect;

use super::{Db, FAR, fill, lateness_of, percentile, start_daemon, stop, wait_ready};

const JOBS: i64 = 10_000;
const RUNS: i64 = 1_000_000;
/// The runs of the one job `big`.
const BIG: i64 = 200_000;

/// `[daemon]` for a bench node: jobs need a user when the daemon runs as root.
fn daemon_table() -> String {
    if unsafe { libc::geteuid() } == 0 {
        "[daemon]\ndefault_user = \"nobody\"\n".into()
    } else {
        "[daemon]\n".into()
    }
}

/// One job, `big`, with 200,000 runs, the oldest of all; then 1,000,000 finished runs spread
/// over the 10,000 jobs, one a second up to now (so the last day holds 86,400 of them, about 9
/// per job). Records are inserted oldest first, so a later run has a larger id, as in a real
/// history.
async fn seed(store: &sqlcron::store::Store) {
    let now = store.now().await.unwrap();
    let first = now - (RUNS + BIG) * 1000;
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, outcome, exit_code, output) \
             SELECT 'big', {first} + g * 1000, 1, 'seed', g, {first} + g * 1000 + 20, \
             {first} + g * 1000 + 520, 'ok', 0, 'output of a big run' \
             FROM generate_series(0, {BIG} - 1) g"
        ))
        .await
        .unwrap();
    let chunk = 250_000;
    let mut start = 0;
    while start < RUNS {
        let end = (start + chunk - 1).min(RUNS - 1);
        store
            .execute_raw(&format!(
                "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, outcome, exit_code, output) \
                 SELECT 'job' || (g % {JOBS} + 1), {now} - ({RUNS} - g) * 1000, 1, 'seed', g, {now} - ({RUNS} - g) * 1000 + 20, \
                 {now} - ({RUNS} - g) * 1000 + 520, CASE WHEN g % 97 = 0 THEN 'failed' ELSE 'ok' END, 0, 'output of a run' \
                 FROM generate_series({start}, {end}) g"
            ))
            .await
            .unwrap();
        start = end + 1;
    }
    store.execute_raw("ANALYZE").await.unwrap();
}

/// Times `rounds` requests of each path by `clients` clients at once: p50 and p99 in ms.
async fn measure(
    base: &str,
    paths: &[&str],
    clients: usize,
    rounds: usize,
) -> Vec<(String, f64, f64)> {
    let http = reqwest::Client::new();
    let mut out = vec![];
    for path in paths {
        let url = format!("{base}{path}");
        let mut tasks = vec![];
        for _ in 0..clients {
            let (http, url) = (http.clone(), url.clone());
            tasks.push(tokio::spawn(async move {
                let mut times = vec![];
                for _ in 0..rounds {
                    let t = Instant::now();
                    let r = http.get(&url).send().await.unwrap();
                    assert!(r.status().is_success(), "{url}: {}", r.status());
                    r.bytes().await.unwrap();
                    times.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                times
            }));
        }
        let mut all = vec![];
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort_by(f64::total_cmp);
        out.push((
            path.to_string(),
            percentile(&all, 0.5),
            percentile(&all, 0.99),
        ));
    }
    out
}

pub async fn dashboard() {
    let db = Db::new(Dialect::Postgres).await;
    let store = db.store().await;
    let t = Instant::now();
    fill(&store, Dialect::Postgres, "job", JOBS, FAR, 1000, "true").await;
    seed(&store).await;
    println!(
        "dashboard  postgres {JOBS} jobs, {RUNS} runs seeded in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir().unwrap();
    let port = 38_000 + (std::process::id() % 1000) as u16;
    let web = format!(
        "{}[web]\nlisten = \"127.0.0.1:{port}\"\npool_size = 4\n",
        daemon_table()
    );
    let node = start_daemon(dir.path(), "web", &db.url, &web, "info");
    wait_ready(&node).await;
    let base = format!("http://127.0.0.1:{port}");
    let paths = [
        "/jobs",
        "/jobs?after=job5000",
        "/jobs?q=999",
        "/jobs/job1234",
        "/",
        "/timeline",
        "/api/v1/jobs?after=job9000",
        "/jobs?state=failing&sort=next",
        "/runs",
        "/runs?outcome=failed&since=1h",
        "/runs?outcome=failed&before=700000",
        "/runs?job=job1234",
        "/runs?node=seed&since=24h",
        "/runs?q=no%20such%20text",
        "/runs?job=big&after=0",
        "/api/v1/runs?job=big&after=0&limit=500",
    ];
    measure(&base, &paths, 1, 5).await; // warm the caches
    for clients in [1, 20] {
        for (path, p50, p99) in measure(&base, &paths, clients, 200 / clients.min(10)).await {
            println!(
                "dashboard  postgres {clients:>2} client(s) {path:<40} p50 {p50:>6.1} ms  p99 {p99:>6.1} ms"
            );
        }
    }
    drop(node);
    store.close().await;
    db.drop_db().await;
    lateness_while_read().await;
}

/// Start lateness of 3 nodes x 100 jobs every second for 30 s, with nobody reading the
/// dashboard, then with 20 clients reading it without pause.
async fn lateness_while_read() {
    for readers in [0, 20] {
        let db = Db::new(Dialect::Postgres).await;
        let store = db.store().await;
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = String::new();
        for i in 0..100 {
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"late{i:03}\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n"
            ));
        }
        let port = 39_000 + (std::process::id() % 1000) as u16 + readers as u16;
        let mut nodes: Vec<_> = (0..3)
            .map(|n| {
                let web = if n == 0 {
                    format!("[web]\nlisten = \"127.0.0.1:{port}\"\n")
                } else {
                    String::new()
                };
                let extra = format!("{}{web}{jobs}", daemon_table());
                start_daemon(dir.path(), &format!("n{n}"), &db.url, &extra, "info")
            })
            .collect();
        for n in &nodes {
            wait_ready(n).await;
        }
        let stop_at = Instant::now() + Duration::from_secs(30);
        let mut tasks = vec![];
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        for i in 0..readers {
            let http = reqwest::Client::new();
            let base = format!("http://127.0.0.1:{port}");
            let requests = requests.clone();
            tasks.push(tokio::spawn(async move {
                let paths = [
                    "/",
                    "/jobs",
                    &format!("/jobs/late{:03}", i * 5),
                    "/timeline",
                ];
                let mut k = 0;
                while Instant::now() < stop_at {
                    if let Ok(r) = http
                        .get(format!("{base}{}", paths[k % paths.len()]))
                        .send()
                        .await
                    {
                        let _ = r.bytes().await;
                        requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    k += 1;
                }
            }));
        }
        tokio::time::sleep_until(stop_at.into()).await;
        for t in tasks {
            let _ = t.await;
        }
        for n in &mut nodes {
            stop(n);
        }
        let history = store.history(None, 100_000).await.unwrap();
        let first_slot = history.iter().map(|h| h.slot).min().unwrap_or(0);
        let (late, dup) = lateness_of(&history, first_slot + 3_000);
        println!(
            "dashboard  postgres lateness with {readers:>2} dashboard readers ({} requests): {} runs, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, duplicates {dup}",
            requests.load(std::sync::atomic::Ordering::Relaxed),
            late.len(),
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(f64::NAN),
        );
        store.close().await;
        db.drop_db().await;
    }
}
