//! At light load (one job in the queue at a time, a worker waiting) a dispatcher runs one
//! claim statement per job, not two: a second claim beside the first, on the queue's other
//! shard, found nothing every time and cost Postgres a claim statement (~0.3 ms) per job.
//! Counted by Postgres itself: calls of `pgferry.claim_lanes()`, one per claim statement.

mod common;

use std::time::Duration;

use common::{loopback, spawn_worker, tenant_key, Server, PATIENCE};
use pgferry_client::{JobSpec, Outcome, Producer, Worker, WorkerOptions};
use pgferry_core::QueueOptions;
use pgferry_server::grpc::GrpcConfig;
use serde_json::json;
use tokio::sync::mpsc;

const JOBS: i64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_claim_statement_per_job_when_jobs_come_one_at_a_time() {
    let db = pgferry_testkit::test_db().await;
    let (tenant_id, key) = tenant_key(&db, "acme").await;
    let admin = db.connect().await;
    // Function call counts for this database's sessions (the server's pool connects after).
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} SET track_functions = 'pl'",
            db.name
        ))
        .await
        .unwrap();
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    // Two shards, as the dispatcher's two claims side by side are meant for.
    let queue = pgferry_server::auth::engine_queue(tenant_id, "light").unwrap();
    server
        .engine
        .upsert_queue(
            &queue,
            &QueueOptions {
                shards: 2,
                max_attempts: 3,
                lease: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();

    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let worker = Worker::new(
        WorkerOptions::new(&server.url, &key, &["light"], 64),
        move |job: pgferry_client::JobCtx| {
            let _ = seen_tx.send(job.id);
            async { Outcome::Ok(None) }
        },
    );
    let (stop_tx, running) = spawn_worker(worker, Duration::from_secs(5));
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    for i in 0..JOBS {
        let id = producer
            .enqueue(JobSpec::new("light", "k", &json!({ "i": i })))
            .await
            .unwrap();
        let started = tokio::time::timeout(PATIENCE, seen.recv())
            .await
            .expect("the job started")
            .unwrap();
        assert_eq!(started, id);
        // The dispatcher settles (its follow-up claim finds the lanes dry) before the next.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop_tx.send(());
    running.await.unwrap().unwrap();
    server.stop().await;

    // A backend reports its function counts when it exits: wait until the server's are gone.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let others: i64 = admin
            .query_one(
                "SELECT count(*) AS n FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get("n");
        if others == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{others} sessions stayed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let claims = || async {
        admin
            .query_one(
                "SELECT coalesce(sum(calls), 0)::int8 AS calls FROM pg_stat_user_functions
                  WHERE schemaname = 'pgferry' AND funcname = 'claim_lanes'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>("calls")
    };
    let mut calls = claims().await;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = claims().await;
        if again == calls {
            break;
        }
        calls = again;
    }
    // Every job needed a claim; a few more for the dispatcher's first round and its idle
    // polls. Two claims side by side on every tick made it about 2 × JOBS.
    assert!(calls >= JOBS, "{calls} claim statements for {JOBS} jobs");
    assert!(
        calls < JOBS * 3 / 2,
        "{calls} claim statements for {JOBS} jobs, one at a time"
    );
}
