//! The in-process worker runtime (issue 18): typed handlers by kind, concurrency per
//! queue, outcomes of every kind, heartbeats of long jobs, cancellation told to the handler,
//! graceful shutdown — against real Postgres, with the runtime's own leader and listener.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::runtime::{HandlerError, Runtime, RuntimeConfig};
use pgferry_core::{Engine, EngineConfig, JobState, LeaderConfig, NewJob, QueueOptions};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

fn fast_leader() -> RuntimeConfig {
    RuntimeConfig {
        leader: Some(LeaderConfig {
            idle_tick_interval: Duration::from_millis(20),
            rescue_interval: Duration::from_millis(200),
            claim_settle: Duration::from_millis(500),
            ..LeaderConfig::default()
        }),
        idle_poll: Duration::from_millis(200),
        ..RuntimeConfig::default()
    }
}

async fn setup() -> (pgferry_testkit::TestDb, Arc<Engine>) {
    let s = common::setup().await;
    (s.db, s.engine)
}

/// Polls until `job` is in `state` (bounded; never a timing assertion).
async fn wait_state(engine: &Engine, job: i64, state: JobState) {
    for _ in 0..600 {
        if engine.get_job(job).await.unwrap().state == state {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "job {job} never reached {state:?}: {:?}",
        engine.get_job(job).await.unwrap().state
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_handlers_run_every_outcome() {
    let (db, engine) = setup().await;
    engine
        .upsert_queue(
            "math",
            &QueueOptions {
                max_attempts: 2,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let flaky = Arc::new(AtomicUsize::new(0));
    let f = flaky.clone();
    let rt = Runtime::builder(engine.clone(), db.config.clone())
        .config(fast_leader())
        .queue("math", 4)
        .handler("add", |_ctx, args: Add| async move {
            Ok(Some(json!(args.a + args.b)))
        })
        .handler("flaky", move |ctx, _: serde_json::Value| {
            let f = f.clone();
            async move {
                f.fetch_add(1, Ordering::SeqCst);
                if ctx.attempt == 1 {
                    return Err(HandlerError::Retry {
                        message: "first try".into(),
                        delay: Some(Duration::ZERO),
                    });
                }
                Ok(None)
            }
        })
        .handler("bad", |_ctx, _: serde_json::Value| async move {
            Err::<Option<serde_json::Value>, _>(HandlerError::discard("cannot work"))
        })
        .start();
    let ids = engine
        .enqueue(&[
            NewJob::new("math", "add", json!({"a": 2, "b": 3})),
            NewJob::new("math", "flaky", json!({})),
            NewJob::new("math", "bad", json!({})),
            NewJob::new("math", "add", json!({"a": "not a number"})),
            NewJob::new("math", "unknown-kind", json!({})),
        ])
        .await
        .unwrap();
    wait_state(&engine, ids[0], JobState::Completed).await;
    wait_state(&engine, ids[1], JobState::Completed).await;
    wait_state(&engine, ids[2], JobState::Dead).await;
    wait_state(&engine, ids[3], JobState::Dead).await;
    wait_state(&engine, ids[4], JobState::Dead).await;
    assert_eq!(engine.get_job(ids[0]).await.unwrap().result, Some(json!(5)));
    assert_eq!(
        flaky.load(Ordering::SeqCst),
        2,
        "retried once, then completed"
    );
    // The typed args error says what did not fit, and was not retried.
    let dead = engine.get_job(ids[3]).await.unwrap();
    assert_eq!(dead.attempts.len(), 1, "{dead:?}");
    let stats = rt.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        (stats.completed, stats.retried, stats.dead),
        (2, 1, 3),
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_bounded_per_queue() {
    let (db, engine) = setup().await;
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (n, p) = (now.clone(), peak.clone());
    let rt = Runtime::builder(engine.clone(), db.config.clone())
        .config(fast_leader())
        .queue("slow", 3)
        .handler("nap", move |_ctx, _: serde_json::Value| {
            let (n, p) = (n.clone(), p.clone());
            async move {
                let k = n.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(k, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok(None)
            }
        })
        .start();
    let jobs: Vec<_> = (0..20)
        .map(|i| NewJob::new("slow", "nap", json!({ "i": i })))
        .collect();
    let ids = engine.enqueue(&jobs).await.unwrap();
    for id in &ids {
        wait_state(&engine, *id, JobState::Completed).await;
    }
    let stats = rt.shutdown(Duration::from_secs(5)).await;
    assert_eq!(stats.completed, 20);
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "ran at most (and at some point) 3 at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_jobs_are_heartbeated_not_rescued() {
    let (db, engine) = setup().await;
    // A 2 s lease and a 4 s job: without heartbeats the rescuer would take it back.
    engine
        .upsert_queue(
            "long",
            &QueueOptions {
                lease: Duration::from_secs(2),
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let rt = Runtime::builder(engine.clone(), db.config.clone())
        .config(fast_leader())
        .queue("long", 1)
        .handler("slow", move |_ctx, _: serde_json::Value| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(4)).await;
                Ok(None)
            }
        })
        .start();
    let id = engine
        .enqueue(&[NewJob::new("long", "slow", json!({}))])
        .await
        .unwrap()[0];
    wait_state(&engine, id, JobState::Completed).await;
    let job = engine.get_job(id).await.unwrap();
    assert_eq!(job.attempts.len(), 1, "one attempt, never rescued: {job:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_is_told_and_shutdown_reports_what_was_still_running() {
    let (db, engine) = setup().await;
    let rt = Runtime::builder(engine.clone(), db.config.clone())
        .config(fast_leader())
        .queue("q", 2)
        .handler("cooperative", |mut ctx, _: serde_json::Value| async move {
            ctx.stopped().await;
            Err::<Option<serde_json::Value>, _>(HandlerError::Cancel {
                reason: "asked to stop".into(),
            })
        })
        .handler("stubborn", |_ctx, _: serde_json::Value| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(None)
        })
        .start();
    let ids = engine
        .enqueue(&[
            NewJob::new("q", "cooperative", json!({})),
            NewJob::new("q", "stubborn", json!({})),
        ])
        .await
        .unwrap();
    wait_state(&engine, ids[0], JobState::Running).await;
    wait_state(&engine, ids[1], JobState::Running).await;
    engine.cancel(ids[0], Some("test")).await.unwrap();
    wait_state(&engine, ids[0], JobState::Cancelled).await;
    // The stubborn job outlives the grace: reported for another run, nothing lost.
    let stats = rt.shutdown(Duration::from_millis(300)).await;
    assert_eq!((stats.cancelled, stats.abandoned), (1, 1), "{stats:?}");
    let c = db.connect().await;
    let closed: i64 = c
        .query_one(
            "SELECT count(*) FROM pgferry.completions WHERE $1 = ANY(job_ids)",
            &[&ids[1]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        closed, 1,
        "the abandoned attempt was closed (to run again), not left to its lease"
    );
    // The engine is closed: new work fails instead of hanging.
    assert!(engine
        .enqueue(&[NewJob::new("q", "k", json!({}))])
        .await
        .is_err());
    let _ = EngineConfig::default();
}
