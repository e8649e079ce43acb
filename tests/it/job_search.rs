//! The job list's filter (`Store::jobs_filtered`, the dashboard's job list and `/api/v1/jobs`):
//! each state, tag, pool and zone selects exactly its jobs, the count covers every page, and
//! both orders page through every match once.

use sqlcron::store::job_search::{JobFilter, JobSort};
use sqlcron::store::{Dialect, PARKED, Store};

use crate::util::TestDb;

for_each_dialect!(the_job_list_filters_counts_and_pages);

/// Jobs `j00`..`j29`, each due at `1000 + (29 - i) * 10` (so `next` order reverses names):
/// every 5th paused, every 6th held by `n1`, every 7th parked, every 4th failed last, every
/// 3rd tagged `gpu` (and `j01` pinned to a node named `gpu`), even ones in pool `p`, every
/// 10th in `Europe/Berlin`.
async fn seed(store: &Store) {
    for i in 0..30 {
        let placement = if i % 3 == 0 {
            "'{\"tags\": [\"gpu\", \"ssd\"]}'".to_string()
        } else if i == 1 {
            "'{\"nodes\": [\"gpu\"]}'".to_string()
        } else {
            "NULL".to_string()
        };
        let next = if i % 7 == 0 && i > 0 {
            PARKED
        } else {
            1000 + (29 - i) * 10
        };
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command, enabled, exec_by, next_exec, \
                 last_status, placement, pool, timezone) VALUES ('j{i:02}', '* * * * *', 'true', \
                 {}, {}, {next}, {}, {placement}, {}, {})",
                i32::from(i % 5 != 0 || i == 0),
                if i % 6 == 0 && i > 0 { "'n1'" } else { "NULL" },
                if i % 4 == 0 { "'failed'" } else { "'ok'" },
                if i % 2 == 0 { "'p'" } else { "NULL" },
                if i % 10 == 0 {
                    "'Europe/Berlin'"
                } else {
                    "NULL"
                },
            ))
            .await
            .unwrap();
    }
}

/// Every page of `filter` in `sort` order, 4 a page: the names and the count each page gave.
async fn all_pages(store: &Store, filter: &JobFilter, sort: JobSort) -> (Vec<String>, i64) {
    let (mut names, mut after, mut total) = (vec![], None::<String>, None);
    loop {
        let (rows, n) = store
            .jobs_filtered(filter, sort, after.as_deref(), 5)
            .await
            .unwrap();
        assert!(
            total.is_none_or(|t| t == n),
            "the count is the same on every page"
        );
        total = Some(n);
        let more = rows.len() > 4;
        for r in rows.iter().take(4) {
            names.push(r.name.clone());
        }
        if !more {
            return (names, n);
        }
        after = Some(sort.cursor(&rows[3]));
    }
}

fn expect(pick: impl Fn(i64) -> bool) -> Vec<String> {
    (0..30)
        .filter(|i| pick(*i))
        .map(|i| format!("j{i:02}"))
        .collect()
}

async fn the_job_list_filters_counts_and_pages(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    seed(&store).await;
    let f = |state: Option<&str>| JobFilter {
        state: state.map(str::to_string),
        ..JobFilter::default()
    };
    let paused = |i: i64| i % 5 == 0 && i > 0;
    let running = |i: i64| i % 6 == 0 && i > 0;
    let parked = |i: i64| i % 7 == 0 && i > 0;
    for (state, want) in [
        (None, expect(|_| true)),
        (Some("paused"), expect(paused)),
        (Some("running"), expect(running)),
        (Some("parked"), expect(parked)),
        (Some("failing"), expect(|i| i % 4 == 0)),
        (
            Some("idle"),
            expect(|i| !paused(i) && !running(i) && !parked(i)),
        ),
    ] {
        let (names, total) = all_pages(&store, &f(state), JobSort::Name).await;
        assert_eq!(names, want, "state {state:?}");
        assert_eq!(total, want.len() as i64, "state {state:?}");
    }
    let tagged = JobFilter {
        tag: Some("gpu".into()),
        pool: Some("p".into()),
        ..JobFilter::default()
    };
    assert_eq!(
        all_pages(&store, &tagged, JobSort::Name).await.0,
        expect(|i| i % 6 == 0),
        "tag gpu (or the node gpu, j01, which is not in pool p) and pool p"
    );
    let zone = |z: &str| JobFilter {
        zone: Some(z.into()),
        ..JobFilter::default()
    };
    assert_eq!(
        all_pages(&store, &zone("Europe/Berlin"), JobSort::Name)
            .await
            .0,
        expect(|i| i % 10 == 0)
    );
    assert_eq!(
        all_pages(&store, &zone("default"), JobSort::Name)
            .await
            .0
            .len(),
        27
    );
    let named = JobFilter {
        name: "1".into(),
        ..JobFilter::default()
    };
    assert_eq!(
        all_pages(&store, &named, JobSort::Name).await.1,
        12,
        "j01, j10-j19, j21"
    );
    // Soonest due first: names reversed, parked last (by name among themselves).
    let (by_next, _) = all_pages(&store, &JobFilter::default(), JobSort::Next).await;
    let mut want: Vec<String> = expect(|i| !parked(i)).into_iter().rev().collect();
    want.extend(expect(parked));
    assert_eq!(by_next, want);
    // The characters of a LIKE pattern and its escape are text in a name.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('a%b!c_d', '* * * * *', 'true')",
        )
        .await
        .unwrap();
    let named = |n: &str| JobFilter {
        name: n.into(),
        ..JobFilter::default()
    };
    for (text, want) in [
        ("_", 1),
        ("%", 1),
        ("!", 1),
        ("b!c_d", 1),
        ("a_b", 0),
        ("!c", 1),
        ("!!", 0),
    ] {
        assert_eq!(
            all_pages(&store, &named(text), JobSort::Name).await.1,
            want,
            "{text}"
        );
    }
    store.close().await;
}
