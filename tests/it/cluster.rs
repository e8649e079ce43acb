//! Several real `sqlcron daemon` processes sharing one database.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config};

for_each_dialect!(
    three_nodes_run_every_slot_exactly_once,
    killed_node_is_taken_over_within_lease_and_poll,
);

/// How long the exactly-once test lets the cluster run (`SQLCRON_CLUSTER_SECS`, default 30).
fn cluster_secs() -> u64 {
    std::env::var("SQLCRON_CLUSTER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

async fn three_nodes_run_every_slot_exactly_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let mut jobs = String::new();
    for i in 0..20 {
        jobs.push_str(&format!(
            "[[job]]\nname = \"job{i:02}\"\nschedule = \"* * * * * *\"\ncommand = \"echo $SQLCRON_JOB $SQLCRON_SLOT $SQLCRON_NODE $SQLCRON_ATTEMPT >> {}\"\n",
            out.display()
        ));
    }
    let nodes: Vec<DaemonProcess> = (0..3)
        .map(|n| {
            let name = format!("node{n}");
            DaemonProcess::start(dir.path(), &name, &node_config(&db.url, &name, &jobs))
        })
        .collect();
    // The window starts once every job has run (three daemons starting and migrating on a busy
    // machine take a variable while); then the cluster runs: that wait is the test's subject,
    // not a synchronisation.
    eventually(
        Duration::from_secs(120),
        "every job's first run",
        || async {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let jobs: BTreeSet<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
            (jobs.len() == 20).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(cluster_secs())).await;
    for node in nodes {
        let name = node.name.clone();
        let log = node.log_text();
        let status = node.stop();
        assert!(status.success(), "{name} exited with {status}:\n{log}");
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 4, "bad line {line:?}");
        assert_eq!(f[3], "1", "no retries expected: {line}");
        *count
            .entry((f[0].to_string(), f[1].to_string()))
            .or_default() += 1;
        *per_node.entry(f[2].to_string()).or_default() += 1;
    }
    let duplicates: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "slots run more than once: {duplicates:?}"
    );
    // No slot lost between a job's first and last run.
    let mut slots: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for (job, slot) in count.keys() {
        let t = chrono::DateTime::parse_from_rfc3339(slot)
            .unwrap()
            .timestamp();
        slots.entry(job.clone()).or_default().insert(t);
    }
    assert_eq!(slots.len(), 20, "every job ran");
    for (job, set) in &slots {
        let first = *set.iter().next().unwrap();
        let last = *set.iter().next_back().unwrap();
        let missing: Vec<i64> = (first..=last).filter(|t| !set.contains(t)).collect();
        assert!(missing.is_empty(), "{job} missed slots {missing:?}");
        assert!(
            set.len() as u64 >= cluster_secs() - 5,
            "{job} ran only {} slots",
            set.len()
        );
    }
    // The history agrees with what ran.
    let store = db.store().await;
    let recorded = store
        .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE outcome = 'ok'")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorded as usize, count.len());
    eprintln!("{dialect:?}: {} runs, per node {per_node:?}", count.len());
}

async fn killed_node_is_taken_over_within_lease_and_poll(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let job = format!(
        "[[job]]\nname = \"long\"\nschedule = \"*/20 * * * * *\"\ncommand = \"echo start $SQLCRON_NODE $SQLCRON_ATTEMPT $SQLCRON_SLOT >> {0}; sleep 3; echo end $SQLCRON_NODE $SQLCRON_ATTEMPT >> {0}\"\n",
        out.display()
    );
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &job));
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", &job));
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    // Wait for the first start (up to one period of the schedule).
    let first = eventually(Duration::from_secs(30), "a first start", || async {
        read()
            .lines()
            .find(|l| l.starts_with("start "))
            .map(str::to_string)
    })
    .await;
    let f: Vec<&str> = first.split_whitespace().collect();
    let (holder, slot) = (f[1].to_string(), f[3].to_string());
    assert_eq!(f[2], "1");
    let (victim, survivor) = if holder == "a" { (a, b) } else { (b, a) };
    // The job is seen running once its shell wrote the line; the daemon may not yet have handed
    // its process group to the reaper (a loaded machine can pause it between the two).
    eventually(
        Duration::from_secs(5),
        "the job's process handed over",
        || async {
            victim
                .log_text()
                .contains("job process started")
                .then_some(())
        },
    )
    .await;
    let killed_at = Instant::now();
    victim.signal(libc::SIGKILL);
    // lease 3s + poll 1s, plus slack for process start.
    let takeover = eventually(
        Duration::from_secs(8),
        "takeover by the survivor",
        || async {
            read()
                .lines()
                .find(|l| l.starts_with(&format!("start {} 2 {slot}", survivor.name)))
                .map(|_| killed_at.elapsed())
        },
    )
    .await;
    assert!(
        takeover <= Duration::from_millis(3_000 + 1_000 + 1_500),
        "takeover took {takeover:?}"
    );
    eventually(Duration::from_secs(10), "the rerun to finish", || async {
        read()
            .lines()
            .any(|l| l == format!("end {} 2", survivor.name))
            .then_some(())
    })
    .await;
    assert!(
        !read().contains(&format!("end {holder} 1")),
        "the dead node's job kept running:\n{}",
        read()
    );
    let store = db.store().await;
    let history = store.history(Some("long"), 50).await.unwrap();
    let slot_ms = chrono::DateTime::parse_from_rfc3339(&slot)
        .unwrap()
        .timestamp_millis();
    let of_slot: Vec<_> = history.iter().filter(|h| h.slot == slot_ms).collect();
    let outcome = |attempt: i64| {
        of_slot
            .iter()
            .find(|h| h.attempt == attempt)
            .map(|h| h.outcome.clone())
    };
    eventually(Duration::from_secs(5), "history of the rerun", || async {
        let h = store.history(Some("long"), 50).await.unwrap();
        h.iter()
            .any(|h| h.slot == slot_ms && h.attempt == 2 && h.outcome == "ok")
            .then_some(())
    })
    .await;
    assert_eq!(outcome(1).as_deref(), Some("lost"), "{of_slot:?}");
    eprintln!("{dialect:?}: takeover after SIGKILL in {takeover:?}");
    let log = survivor.log_text();
    let status = survivor.stop();
    assert!(status.success(), "{log}");
}
