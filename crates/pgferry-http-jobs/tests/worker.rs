//! HTTP jobs from a queue on real Postgres, executed against a loopback target.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use pgferry_core::{JobState, NewJob};
use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::worker::{HttpWorker, WorkerConfig, KIND};
use pgferry_http_jobs::{Allow, Executor, ExecutorConfig};
use serde_json::json;

async fn target(hits: Arc<AtomicUsize>) -> String {
    let h = hits.clone();
    let slow_hits = hits.clone();
    let app = Router::new()
        .route(
            "/ok",
            get(move || {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    "fine"
                }
            }),
        )
        .route(
            "/slow-busy",
            get(move || {
                let h = slow_hits.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "30")],
                        "slow down",
                    )
                }
            }),
        )
        .route(
            "/busy",
            get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "30")],
                    "later",
                )
            }),
        );
    common::serve(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_jobs_complete_retry_after_pause_the_destination_and_refusals_die() {
    let (db, engine) = common::migrated().await;
    let hits = Arc::new(AtomicUsize::new(0));
    let base = target(hits.clone()).await;
    let executor = Executor::new(ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        ..Default::default()
    })
    .unwrap();
    let worker = HttpWorker::new(engine.clone(), Arc::new(executor), WorkerConfig::default());
    let tick = || async {
        let c = db.connect().await;
        pgferry_core::leader::ticker::tick(&c).await.unwrap();
    };

    let job = |path: &str| {
        NewJob::new(
            "http",
            KIND,
            json!({"url": format!("{base}{path}"), "expect_body": "fine"}),
        )
    };
    let ids = engine
        .enqueue(&[
            job("/ok"),
            NewJob::new(
                "http",
                KIND,
                json!({"url": "http://169.254.169.254/latest/"}),
            ),
            NewJob::new("http", KIND, json!({"nope": 1})),
        ])
        .await
        .unwrap();
    tick().await;
    assert_eq!(worker.run_once("http").await.unwrap(), 3);
    let ok = engine.get_job(ids[0]).await.unwrap();
    assert_eq!(ok.state, JobState::Completed);
    let result = ok.result.unwrap();
    assert_eq!(
        (result["status"].as_u64(), result["body"].as_str()),
        (Some(200), Some("fine"))
    );
    let refused = engine.get_job(ids[1]).await.unwrap();
    assert_eq!(refused.state, JobState::Dead);
    let err = refused.attempts[0].error.clone().unwrap();
    assert!(err.contains("link_local"), "{err}");
    assert_eq!(engine.get_job(ids[2]).await.unwrap().state, JobState::Dead);

    // 503 + Retry-After: 30 s: the job waits at least that, and the destination pauses.
    let busy = engine.enqueue(&[job("/busy")]).await.unwrap()[0];
    tick().await;
    let before = SystemTime::now();
    worker.run_once("http").await.unwrap();
    let b = engine.get_job(busy).await.unwrap();
    assert_eq!(b.state, JobState::Scheduled);
    assert!(
        b.run_at.unwrap() >= before + Duration::from_secs(29),
        "{:?}",
        b.run_at
    );
    let err = b.attempts[0].error.clone().unwrap();
    assert!(
        err.contains("503") && err.contains("later"),
        "response kept: {err}"
    );

    let hits_before = hits.load(Ordering::SeqCst);
    let next = engine.enqueue(&[job("/ok")]).await.unwrap()[0];
    tick().await;
    worker.run_once("http").await.unwrap();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        hits_before,
        "the paused destination got nothing"
    );
    let n = engine.get_job(next).await.unwrap();
    assert_eq!(n.state, JobState::Scheduled);
    assert!(n.run_at.unwrap() >= before + Duration::from_secs(25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_waiting_for_their_destinations_turn_are_held_by_a_pause_that_came_meanwhile() {
    let (db, engine) = common::migrated().await;
    let hits = Arc::new(AtomicUsize::new(0));
    let base = target(hits.clone()).await;
    let executor = Executor::new(ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        ..Default::default()
    })
    .unwrap();
    // One request at a time to the key: the second and third wait for the first, which
    // answers 429 with Retry-After: 30 s.
    let config = WorkerConfig {
        per_destination: 1,
        ..Default::default()
    };
    let worker = HttpWorker::new(engine.clone(), Arc::new(executor), config);
    let job = NewJob::new("http", KIND, json!({"url": format!("{base}/slow-busy")}));
    let ids = engine
        .enqueue(&[job.clone(), job.clone(), job])
        .await
        .unwrap();
    let c = db.connect().await;
    pgferry_core::leader::ticker::tick(&c).await.unwrap();
    let before = SystemTime::now();
    assert_eq!(worker.run_once("http").await.unwrap(), 3);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "only the first was sent");
    let mut failed = 0;
    for id in ids {
        let j = engine.get_job(id).await.unwrap();
        assert_eq!(j.state, JobState::Scheduled);
        assert!(
            j.run_at.unwrap() >= before + Duration::from_secs(25),
            "{:?}",
            j.run_at
        );
        failed += j.attempts.iter().filter(|a| a.error.is_some()).count();
    }
    assert_eq!(failed, 1, "the waiting jobs were snoozed, not failed");
}
