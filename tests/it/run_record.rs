//! The job-side record of the topology tests: each run appends `start JOB SLOT ATTEMPT NODE`
//! when it begins and `end JOB SLOT ATTEMPT` when it ends, to one file all nodes share.

use std::collections::BTreeMap;
use std::path::Path;

use crate::outage::lines;

/// A job that records its runs to `out` (each runs `sleep 0.3` between its two lines).
pub fn recording_job(name: &str, schedule: &str, out: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n\
         command = \"echo start $SQLCRON_JOB $SQLCRON_SLOT $SQLCRON_ATTEMPT $SQLCRON_NODE >> {0}; \
         sleep 0.3; echo end $SQLCRON_JOB $SQLCRON_SLOT $SQLCRON_ATTEMPT >> {0}\"\n",
        out.display()
    )
}

/// `start JOB SLOT ATTEMPT NODE` lines counted by (job, slot, attempt), and the runs that
/// ended.
pub fn runs(path: &Path) -> (BTreeMap<(String, String, String), usize>, usize) {
    let mut started = BTreeMap::new();
    let mut ended = 0;
    for l in lines(path) {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["start", job, slot, attempt, _node] => {
                *started
                    .entry((job.to_string(), slot.to_string(), attempt.to_string()))
                    .or_default() += 1;
            }
            ["end", ..] => ended += 1,
            _ => panic!("unexpected line {l:?}"),
        }
    }
    (started, ended)
}

/// Panics when two runs of one job overlap: a start while the job's previous run has not
/// written its end. A run that never ends (its node was killed with it) is left out.
fn assert_no_overlap(path: &Path) {
    let all = lines(path);
    let ended: std::collections::BTreeSet<(&str, &str, &str)> = all
        .iter()
        .filter_map(|l| match l.split(' ').collect::<Vec<_>>().as_slice() {
            ["end", job, slot, attempt] => Some((*job, *slot, *attempt)),
            _ => None,
        })
        .collect();
    let mut open = std::collections::BTreeSet::new();
    for l in &all {
        match l.split(' ').collect::<Vec<_>>().as_slice() {
            ["start", job, slot, attempt, _] if ended.contains(&(*job, *slot, *attempt)) => {
                assert!(open.insert(*job), "{job} overlaps: {l}\n{}", all.join("\n"))
            }
            ["end", job, ..] => {
                open.remove(job);
            }
            _ => {}
        }
    }
}

pub fn started_by(path: &Path, node: &str) -> usize {
    lines(path)
        .iter()
        .filter(|l| l.starts_with("start") && l.ends_with(&format!(" {node}")))
        .count()
}

pub fn ended(path: &Path) -> usize {
    runs(path).1
}

pub fn starts(path: &Path) -> usize {
    lines(path)
        .iter()
        .filter(|l| l.starts_with("start"))
        .count()
}

/// Panics unless every (job, slot, attempt) started once and no two runs of a job overlapped;
/// returns how many runs ended. A run cut short by a fault may run again as a later attempt
/// (the lease rules), never as the same one.
pub fn assert_each_run_started_once(path: &Path) -> usize {
    assert_no_overlap(path);
    let (started, ended) = runs(path);
    for ((job, slot, attempt), n) in &started {
        assert_eq!(
            *n, 1,
            "{job} slot {slot} attempt {attempt} started {n} times"
        );
    }
    ended
}

/// The node that made the latest start.
pub fn latest_starter(path: &Path) -> String {
    lines(path)
        .iter()
        .rev()
        .find(|l| l.starts_with("start"))
        .and_then(|l| l.rsplit(' ').next())
        .expect("a start")
        .to_string()
}
