//! Browsing the history (`Store::runs_page`, the dashboard's runs view and `/api/v1/runs`):
//! every run can be reached by cursor from either end, the filters hold, and a search of the
//! output is bounded by its window and goes on from where it stopped.

use sqlcron::store::run_search::{RunFilter, RunPlace, SEARCH_WINDOW};
use sqlcron::store::{Dialect, Store};

use crate::util::TestDb;

for_each_dialect!(every_run_is_reached_by_cursor_and_the_filters_hold);

/// Inserts runs `from..to` (record order = i): job `j{i % 3}`, node `n{i % 2}`, every seventh
/// failed, ended at `i * 1000`, output `line i` (and `Disk FULL` on the 1234th).
async fn seed(store: &Store, from: i64, to: i64) {
    let mut i = from;
    while i < to {
        let end = (i + 400).min(to);
        let values: Vec<String> = (i..end)
            .map(|k| {
                let outcome = if k % 7 == 0 { "failed" } else { "ok" };
                let output = if k == 1234 {
                    "Disk FULL on /var".to_string()
                } else {
                    format!("line {k}")
                };
                format!(
                    "('j{}', {}, 1, 'n{}', {k}, {}, {}, '{outcome}', '{output}')",
                    k % 3,
                    k * 1000,
                    k % 2,
                    k * 1000,
                    k * 1000 + 500
                )
            })
            .collect();
        store
            .execute_raw(&format!(
                "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, outcome, output) \
                 VALUES {}",
                values.join(", ")
            ))
            .await
            .unwrap();
        i = end;
    }
}

/// Every page from `place` in the direction it reads, until there is none: the ids, as shown
/// (each page newest first).
async fn walk(store: &Store, filter: &RunFilter, mut place: RunPlace, limit: i64) -> Vec<Vec<i64>> {
    let mut pages = vec![];
    loop {
        let page = store.runs_page(filter, place, limit).await.unwrap();
        assert!(page.runs.len() as i64 <= limit);
        let ids: Vec<i64> = page.runs.iter().map(|r| r.id).collect();
        assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
        pages.push(ids);
        let next = match place {
            RunPlace::After(_) => page.newer.map(RunPlace::After),
            _ => page.older.map(RunPlace::Before),
        };
        match next {
            Some(p) => place = p,
            None => return pages,
        }
        assert!(pages.len() < 10_000, "the cursor does not move");
    }
}

/// The tokens of runs `ids` (the seed's `i`).
async fn tokens(store: &Store, ids: &[i64]) -> Vec<i64> {
    let mut t = vec![];
    for id in ids {
        t.push(
            store
                .scalar_i64(&format!("SELECT token FROM cron_runs WHERE id = {id}"))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    t
}

async fn every_run_is_reached_by_cursor_and_the_filters_hold(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    seed(&store, 1, 301).await;
    let all: Vec<i64> = {
        let mut v: Vec<i64> = store
            .history(None, 1_000)
            .await
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    };
    assert_eq!(all.len(), 300);

    // From the newest back to the first, and from the first up to the newest: each run once.
    let none = RunFilter::default();
    let back: Vec<i64> = walk(&store, &none, RunPlace::Newest, 7).await.concat();
    assert_eq!(back, all);
    let up = walk(&store, &none, RunPlace::After(0), 7).await;
    assert_eq!(up[0].len(), 7, "the oldest page is full");
    assert_eq!(
        *up[0].last().unwrap(),
        *all.last().unwrap(),
        "it starts at the first run"
    );
    let mut forth: Vec<i64> = up.concat();
    forth.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(forth, all);
    // A page in the middle links both ways, and the newer link holds the page before it.
    let first = store.runs_page(&none, RunPlace::Newest, 10).await.unwrap();
    let second = store
        .runs_page(&none, RunPlace::Before(first.older.unwrap()), 10)
        .await
        .unwrap();
    let again = store
        .runs_page(&none, RunPlace::After(second.newer.unwrap()), 10)
        .await
        .unwrap();
    assert_eq!(
        again.runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        first.runs.iter().map(|r| r.id).collect::<Vec<_>>()
    );
    assert_eq!(first.newer, None, "nothing is newer than the newest page");

    // Filters: job, outcome, node and the end time, together.
    let filter = RunFilter {
        job: Some("j1".into()),
        outcome: Some("failed".into()),
        node: Some("n0".into()),
        since: Some(100_000),
        until: Some(250_999),
        ..RunFilter::default()
    };
    let got: Vec<i64> = walk(&store, &filter, RunPlace::Newest, 2).await.concat();
    let want: Vec<i64> = (1..301)
        .rev()
        .filter(|k| k % 3 == 1 && k % 7 == 0 && k % 2 == 0 && k * 1000 + 500 >= 100_000)
        .filter(|k| k * 1000 + 500 <= 250_999)
        .collect();
    assert!(!want.is_empty());
    assert_eq!(tokens(&store, &got).await, want);
    // An outcome that is not one is no pattern and no statement text: it matches nothing.
    let odd = RunFilter {
        outcome: Some("ok' OR '1' = '1".into()),
        ..RunFilter::default()
    };
    let page = store.runs_page(&odd, RunPlace::Newest, 5).await.unwrap();
    assert!(page.runs.is_empty() && page.older.is_none());
    // A run still going matches any `since`; `until` leaves it out.
    store
        .execute_raw(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             VALUES ('j1', 999000, 1, 'n0', 999, 999000, 'running')",
        )
        .await
        .unwrap();
    let since = RunFilter {
        since: Some(299_000),
        ..RunFilter::default()
    };
    let page = store.runs_page(&since, RunPlace::Newest, 50).await.unwrap();
    assert_eq!(
        page.runs
            .iter()
            .map(|r| r.outcome.as_str())
            .collect::<Vec<_>>(),
        ["running", "ok", "ok"],
        "the run going and the two that ended at 299.5 s and 300.5 s"
    );

    // Cursors at the ends of the range of ids: empty pages, no overflow.
    for place in [
        RunPlace::Before(i64::MIN),
        RunPlace::After(i64::MAX),
        RunPlace::Before(1),
    ] {
        let page = store.runs_page(&none, place, 5).await.unwrap();
        assert!(page.runs.is_empty(), "{place:?}");
    }

    // Text in the output, without regard to case; bounded by its window.
    seed(&store, 301, 301 + SEARCH_WINDOW + 1000).await;
    let search = RunFilter {
        text: Some("disk full".into()),
        ..RunFilter::default()
    };
    let mut place = RunPlace::Newest;
    let mut windows = 0;
    let found = loop {
        let page = store.runs_page(&search, place, 20).await.unwrap();
        if !page.runs.is_empty() {
            break page;
        }
        assert_eq!(
            page.searched,
            Some(SEARCH_WINDOW),
            "an empty page says it stopped"
        );
        windows += 1;
        place = RunPlace::Before(page.older.expect("the search goes on"));
        assert!(windows < 10);
    };
    assert!(windows >= 1, "the match lies beyond the first window");
    assert_eq!(found.runs.len(), 1);
    assert_eq!(found.runs[0].job, "j1");
    assert_eq!(tokens(&store, &[found.runs[0].id]).await, [1234]);
    // The run's output is not read with the page.
    assert_eq!(found.runs[0].output, None);

    store.close().await;
}
