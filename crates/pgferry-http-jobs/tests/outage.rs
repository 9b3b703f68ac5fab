//! A database outage while an HTTP job's request is in flight: the destination answers
//! during the outage, the outcome cannot be written, and the worker keeps trying until the
//! database is back — the job completes on attempt 1 and the destination sees the request
//! once. (The flusher used to give up after ~6 s of tries; the job then waited for its
//! lease and was sent again.)
//!
//! The outage: the test's database stops accepting connections (`ALLOW_CONNECTIONS false`)
//! and every session of it is terminated, so the engine's pool finds no
//! connection (`unavailable`), as when Postgres restarts.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use pgferry_core::{JobState, NewJob};
use pgferry_http_jobs::worker::{WorkerConfig, KIND};
use serde_json::json;
use tokio::sync::{watch, Notify};

/// Longer than the flusher's old tries (50 ms doubling, 8 tries: ~6.4 s).
const OUTAGE: Duration = Duration::from_secs(9);
/// The job's lease: far longer than the test, so only a written outcome completes it.
const LEASE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_is_written_after_an_outage_and_the_request_is_sent_once() {
    let (db, engine) = common::migrated().await;
    engine
        .upsert_queue(
            "http",
            &pgferry_core::QueueOptions {
                lease: LEASE,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let (arrived, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let app = {
        let (hits, arrived, release) = (hits.clone(), arrived.clone(), release.clone());
        Router::new().route(
            "/hold",
            post(move || {
                let (hits, arrived, release) = (hits.clone(), arrived.clone(), release.clone());
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    arrived.notify_one();
                    release.notified().await;
                    "ok"
                }
            }),
        )
    };
    let base = common::serve(app).await;
    let ids = engine
        .enqueue(&[NewJob::new(
            "http",
            KIND,
            json!({"method": "POST", "url": format!("{base}/hold"), "timeout_ms": 60000}),
        )])
        .await
        .unwrap();

    let (stop_tx, stop_rx) = watch::channel(false);
    // The ticker on a session of its own that survives the outage's terminations only by
    // reconnecting: ticks that fail during it are skipped.
    let ticker = {
        let (db, mut stop) = (db.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let connect = || pgferry_core::db::connect(&db.config, "test-ticker");
            let mut c = connect().await.ok();
            loop {
                if c.as_ref().is_none_or(|c| c.is_closed()) {
                    c = connect().await.ok();
                }
                if let Some(c) = &c {
                    let _ = pgferry_core::leader::ticker::tick(c).await;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        })
    };
    let service = common::service(&engine, WorkerConfig::default(), stop_rx);
    tokio::time::timeout(Duration::from_secs(30), arrived.notified())
        .await
        .expect("the request reaches the target");

    // The outage: no new connection, every other session ended; then the answer comes.
    // From another database of the cluster: a database cannot refuse its own session.
    let mut other = db.config.clone();
    other.dbname("postgres");
    let control = pgferry_core::db::connect(&other, "test-control")
        .await
        .unwrap();
    let quoted = format!("\"{}\"", db.name.replace('"', "\"\""));
    control
        .batch_execute(&format!("ALTER DATABASE {quoted} ALLOW_CONNECTIONS false"))
        .await
        .unwrap();
    control
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&db.name],
        )
        .await
        .unwrap();
    release.notify_one();
    tokio::time::sleep(OUTAGE).await;
    assert_eq!(
        engine.get_job(ids[0]).await.map(|j| j.state).ok(),
        None,
        "the engine cannot read while the database refuses connections"
    );
    control
        .batch_execute(&format!("ALTER DATABASE {quoted} ALLOW_CONNECTIONS true"))
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = engine.get_job(ids[0]).await;
        if let Ok(j) = &job {
            if j.state == JobState::Completed {
                let attempts: Vec<(i32, &str)> =
                    j.attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
                assert_eq!(attempts, [(1, "completed")]);
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not completed 30 s after the outage (its lease is {LEASE:?}): {:?}",
            job.map(|j| j.state)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the request was sent once");
    let _ = stop_tx.send(true);
    service.await.unwrap();
    ticker.await.unwrap();
}
