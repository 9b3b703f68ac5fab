//! A listing's first runs are read whole from the scheduled phase's rows (migration 0025,
//! listing_first_runs.rs): they list exactly as get_job reads them, and a page of them
//! costs one statement; retries and snoozes waiting in `scheduled` still come with their
//! earlier attempts.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use pgferry_core::{Engine, EngineConfig, JobFilter, JobInfo, JobState, NewJob, QueueOptions};
use serde_json::json;

/// What the listing shows of each job is what get_job reads, field for field.
async fn assert_listed_as_get_job_reads(engine: &Engine, listed: &[JobInfo]) {
    for j in listed {
        let got = engine.get_job(j.id).await.unwrap();
        assert_eq!(format!("{j:?}"), format!("{got:?}"), "job {}", j.id);
    }
}

#[tokio::test]
async fn first_runs_list_as_get_job_reads_them() {
    let s = common::setup().await;
    let ids = common::mixed_workload(&s, "mix").await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    // First runs of every shape: with meta and a priority, holding a unique key, and one
    // enqueued from SQL (pgferry.enqueue).
    let extra = s
        .engine
        .enqueue(&[
            NewJob::new("mix", "m", json!({ "with": "meta" }))
                .meta(json!({ "trace": "t-1" }))
                .priority(2)
                .max_attempts(7)
                .run_at(later),
            NewJob::new("mix", "u", json!({ "unique": true }))
                .unique("only-one")
                .run_at(later),
        ])
        .await
        .unwrap();
    let client = s.db.connect().await;
    let from_sql: i64 = client
        .query_one(
            "SELECT pgferry.enqueue('mix', 'sql', '{\"from\": \"sql\"}', '{\"m\": 1}', 1, 4, now() + interval '1 hour')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let first_runs: Vec<i64> = client
        .query(
            "SELECT job_id FROM pgferry.scheduled WHERE first_run ORDER BY job_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // The mixed workload's first runs (the last three of its jobs, the first of them since
    // cancelled) and the three above; its delayed retries and its snooze are not first runs.
    let mut want: Vec<i64> = ids.all[25..].to_vec();
    want.extend(&extra);
    want.push(from_sql);
    want.sort();
    assert_eq!(first_runs, want);

    let tiny = Engine::new(
        s.db.pool(4),
        EngineConfig {
            list_round_rows: 3,
            ..EngineConfig::default()
        },
    );
    let scheduled = JobFilter {
        state: Some(JobState::Scheduled),
        ..Default::default()
    };
    for engine in [&s.engine, &tiny] {
        for limit in [1u32, 2, 100] {
            for f in [&JobFilter::default(), &scheduled] {
                let listed = common::walk_jobs(engine, "mix", f, limit).await;
                assert_listed_as_get_job_reads(&s.engine, &listed).await;
                let by_id: BTreeMap<i64, &JobInfo> = listed.iter().map(|j| (j.id, j)).collect();
                for id in &first_runs {
                    let j = by_id[id];
                    assert_eq!(j.state, JobState::Scheduled);
                    assert!(j.attempts.is_empty() && j.run_at.is_some());
                }
                // Delayed retries and the snooze keep their earlier attempts.
                for id in ids.scheduled.iter().filter(|id| !first_runs.contains(id)) {
                    let j = by_id[id];
                    assert_eq!(j.state, JobState::Scheduled, "job {id}");
                    assert!(!j.attempts.is_empty(), "job {id} lists its earlier attempt");
                }
            }
        }
    }
    let page = s
        .engine
        .list_jobs("mix", &scheduled, None, 100)
        .await
        .unwrap();
    let m = page.jobs.iter().find(|j| j.id == extra[0]).unwrap();
    assert_eq!(
        (
            m.kind.as_str(),
            m.priority,
            m.max_attempts,
            m.meta.as_ref().map(|m| m.to_value())
        ),
        ("m", 2, 7, Some(json!({ "trace": "t-1" })))
    );
    let u = page.jobs.iter().find(|j| j.id == extra[1]).unwrap();
    assert_eq!(u.unique_key.as_deref(), Some("only-one"));
    let q = page.jobs.iter().find(|j| j.id == from_sql).unwrap();
    assert_eq!((q.kind.as_str(), q.max_attempts), ("sql", 4));
}

#[tokio::test]
async fn a_page_of_first_runs_is_one_statement() {
    let s = common::setup_with(common::quiet_counters()).await;
    s.engine
        .upsert_queue(
            "later",
            &QueueOptions {
                shards: 2,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(600);
    let jobs: Vec<_> = (0..120)
        .map(|i| NewJob::new("later", "k", json!({ "i": i })).run_at(later))
        .collect();
    s.engine.enqueue(&jobs).await.unwrap();
    let admin = s.db.connect().await;
    let scheduled = JobFilter {
        state: Some(JobState::Scheduled),
        ..Default::default()
    };
    // Warm the statement cache.
    s.engine
        .list_jobs("later", &scheduled, None, 1)
        .await
        .unwrap();
    for f in [&JobFilter::default(), &scheduled] {
        common::reset_statements(&admin).await;
        let page = s.engine.list_jobs("later", f, None, 50).await.unwrap();
        assert_eq!(page.jobs.len(), 50);
        assert!(page.has_more);
        let statements = common::statements(&admin).await;
        assert!(
            // jobs_detail.sql's first line.
            !statements
                .iter()
                .any(|(q, _)| q.contains("get_job and list_jobs")),
            "a page of first runs is not read again: {statements:?}"
        );
        let phase: i64 = statements
            .iter()
            .filter(|(q, _)| q.contains("phase \"scheduled\""))
            .map(|(_, c)| c)
            .sum();
        assert_eq!(phase, 1, "{statements:?}");
    }

    // A retry waiting in `scheduled` on the page: read through jobs_detail.sql, with the
    // attempt that failed.
    let due = s
        .engine
        .enqueue(&[NewJob::new("later", "k", json!({ "retry": true }))])
        .await
        .unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("later", 1, "w").await.unwrap();
    assert_eq!(c[0].job_id, due);
    s.engine
        .complete(&[c[0].failed("try later", Duration::from_secs(600))])
        .await
        .unwrap();
    common::reset_statements(&admin).await;
    let page = s
        .engine
        .list_jobs("later", &scheduled, None, 50)
        .await
        .unwrap();
    let retry = page
        .jobs
        .iter()
        .find(|j| j.id == due)
        .expect("listed first");
    assert_eq!(retry.attempts.len(), 1);
    assert_eq!(retry.attempts[0].error.as_deref(), Some("try later"));
    assert!(common::statements(&admin)
        .await
        .iter()
        .any(|(q, _)| q.contains("get_job and list_jobs")));
    assert_listed_as_get_job_reads(&s.engine, &page.jobs).await;
}
