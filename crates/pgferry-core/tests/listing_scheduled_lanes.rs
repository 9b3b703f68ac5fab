//! An unfiltered scheduled phase is one index walk per lane, merged by the engine
//! (listing_scheduled_lanes.rs): page for page the same answer as the general statement
//! gives with a filter every job matches, over queues of one and of several lanes, and one
//! statement per page without the general one.

mod common;

use std::time::{Duration, SystemTime};

use pgferry_core::{Engine, JobFilter, JobInfo, JobState, NewJob, QueueOptions};
use serde_json::json;

/// Every page of `queue` under `f`, each job in full (Debug form) with `has_more`.
async fn pages(
    engine: &Engine,
    queue: &str,
    f: &JobFilter,
    limit: u32,
) -> Vec<(Vec<String>, bool)> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = engine
            .list_jobs(queue, f, cursor.as_deref(), limit)
            .await
            .unwrap();
        let shown: Vec<String> = page
            .jobs
            .iter()
            .map(|j: &JobInfo| format!("{j:?}"))
            .collect();
        out.push((shown, page.has_more));
        match page.next {
            Some(next) if page.has_more => cursor = Some(next),
            _ => return out,
        }
        assert!(out.len() < 1000, "paging does not end");
    }
}

#[tokio::test]
async fn the_walks_page_as_the_general_statement_does() {
    let s = common::setup_with(common::quiet_counters()).await;
    // Five lanes: two shards at priority 0, two at priority 1 (after upsert), one more
    // priority; and a queue of one lane.
    s.engine
        .upsert_queue(
            "many",
            &QueueOptions {
                shards: 2,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    for queue in ["many", "one"] {
        let jobs: Vec<_> = (0..137)
            .map(|i| {
                let mut j = NewJob::new(queue, "k", json!({ "i": i })).run_at(later);
                j = j.priority((i % 3) as u8);
                if i % 5 == 0 {
                    j = j.meta(json!({ "m": i }));
                }
                if i % 11 == 0 {
                    j = j.unique(format!("u{i}"));
                }
                j
            })
            .collect();
        // In several batches, so that lanes interleave by id.
        for chunk in jobs.chunks(17) {
            s.engine.enqueue(chunk).await.unwrap();
        }
    }
    // A retry waiting in `scheduled` (not a first run: read through jobs_detail.sql).
    let due = s
        .engine
        .enqueue(&[NewJob::new("one", "k", json!({ "retry": true }))])
        .await
        .unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("one", 1, "w").await.unwrap();
    assert_eq!(c[0].job_id, due);
    s.engine
        .complete(&[c[0].failed("later", Duration::from_secs(3600))])
        .await
        .unwrap();

    let lanes: i64 =
        s.db.connect()
            .await
            .query_one(
                "SELECT count(*) FROM pgferry.lanes l JOIN pgferry.queues q USING (queue_id)
              WHERE q.name = 'many'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
    assert!(lanes >= 3, "lanes of 'many': {lanes}");

    for queue in ["many", "one"] {
        for state in [Some(JobState::Scheduled), None] {
            let plain = JobFilter {
                state,
                ..JobFilter::default()
            };
            // Every job is of kind "k": the same jobs, through the general statement.
            let general = JobFilter {
                kind: Some("k".into()),
                ..plain.clone()
            };
            for limit in [1, 7, 50, 100] {
                let a = pages(&s.engine, queue, &plain, limit).await;
                let b = pages(&s.engine, queue, &general, limit).await;
                assert_eq!(a, b, "{queue} {state:?} limit {limit}");
                if state.is_some() {
                    let shown: usize = a.iter().map(|(p, _)| p.len()).sum();
                    let expected = if queue == "one" { 138 } else { 137 };
                    assert_eq!(shown, expected, "{queue} limit {limit}");
                }
            }
        }
    }
}

#[tokio::test]
async fn an_unfiltered_page_runs_the_walk_not_the_general_statement() {
    let s = common::setup_with(common::quiet_counters()).await;
    let later = SystemTime::now() + Duration::from_secs(600);
    let jobs: Vec<_> = (0..80)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })).run_at(later))
        .collect();
    s.engine.enqueue(&jobs).await.unwrap();
    let admin = s.db.connect().await;
    let f = JobFilter::default();
    common::reset_statements(&admin).await;
    let page = s.engine.list_jobs("q", &f, None, 50).await.unwrap();
    assert_eq!(page.jobs.len(), 50);
    assert!(page.has_more);
    let statements = common::statements(&admin).await;
    let calls = |first_line: &str| -> i64 {
        (statements.iter())
            .filter(|(q, _)| q.starts_with(first_line))
            .map(|(_, c)| c)
            .sum()
    };
    assert_eq!(
        calls("-- list_jobs, phase \"scheduled\", without a kind or text filter"),
        1,
        "{statements:?}"
    );
    assert_eq!(
        calls("-- list_jobs, phase \"scheduled\": a queue's jobs"),
        0,
        "{statements:?}"
    );
}
