//! End to end over real sockets: an in-process server on loopback (real Postgres through
//! the testkit), the Rust client, and raw protocol streams where exact control is needed.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::raw::RawWorker;
use common::{
    completed_counts, loopback, queue_lease, spawn_worker, tenant_key, until_completed_once,
    Server, PATIENCE,
};
use pgferry_client::proto::v1 as pb;
use pgferry_client::{Ack, Error, JobSpec, Outcome, Producer, Worker, WorkerOptions};
use pgferry_server::grpc::GrpcConfig;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

async fn recv_acks(rx: &mut mpsc::UnboundedReceiver<Ack>, n: usize) -> Vec<Ack> {
    let mut out = Vec::new();
    while out.len() < n {
        let a = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("acks in time")
            .expect("ack channel open");
        out.push(a);
    }
    out
}

#[tokio::test]
async fn stream_enqueue_and_work_round_trip() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;

    let producer = Producer::connect(&server.url, &key)
        .await
        .expect("producer");
    let one = producer
        .enqueue(JobSpec::new("mail", "send", &json!({ "n": 0 })).meta("traceparent", "00-x"))
        .await
        .expect("enqueue");
    let batch: Vec<JobSpec> = (1..=20)
        .map(|n| JobSpec::new("mail", "send", &json!({ "n": n })))
        .collect();
    let ids = producer.enqueue_batch(batch).await.expect("batch");
    assert_eq!(ids.len(), 20);

    // A batch with one bad job: typed error naming it, nothing enqueued.
    let bad = vec![
        JobSpec::new("mail", "send", &json!({})),
        JobSpec::new("Bad Queue", "send", &json!({})),
    ];
    match producer.enqueue_batch(bad).await {
        Err(Error::Api { code, field, .. }) => {
            assert_eq!(code, "invalid_name");
            assert_eq!(field, "jobs[1].queue");
        }
        other => panic!("expected a typed error, got {other:?}"),
    }

    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(&server.url, &key, &["mail"], 4);
    opts.acks = Some(ack_tx);
    let worker = Worker::new(opts, move |job: pgferry_client::JobCtx| {
        let seen = seen_tx.clone();
        async move {
            let _ = seen.send((
                job.id,
                job.queue.clone(),
                job.args_json().unwrap(),
                job.meta,
            ));
            Outcome::Ok(Some(json!({ "done": job.id }).to_string()))
        }
    });
    let (stop_tx, run) = spawn_worker(worker, Duration::from_secs(10));
    let got = recv_acks(&mut acks, 21).await;
    let mut want: HashSet<i64> = ids.iter().copied().collect();
    want.insert(one);
    let acked: HashSet<i64> = got.iter().map(|a| a.id).collect();
    assert_eq!(acked, want, "every enqueued job acked once");
    assert!(got.iter().all(|a| !a.stale));
    let mut args_by_id = HashMap::new();
    while let Ok((id, queue, args, meta)) = seen.try_recv() {
        assert_eq!(
            queue, "mail",
            "the tenant's own queue name, not the engine's"
        );
        if id == one {
            assert_eq!(meta.get("traceparent").map(String::as_str), Some("00-x"));
        }
        args_by_id.insert(id, args["n"].as_i64().unwrap());
    }
    assert_eq!(args_by_id[&one], 0);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(args_by_id[id], i as i64 + 1);
    }
    let counts = completed_counts(&db, &want.iter().copied().collect::<Vec<_>>()).await;
    assert_eq!(counts.len(), 21);
    assert!(counts.values().all(|&c| c == 1));
    let _ = stop_tx.send(());
    run.await.unwrap().expect("worker drained");
    server.stop().await;
}

/// Credits bound what the server sends: grant 3, get exactly 3; a result without credit
/// brings nothing more; 2 more credits bring exactly 2 more. Jobs the dispatcher claimed
/// but never delivered come back when the stream goes away, held ones when their lease
/// lapses: a second worker then finishes all ten.
#[tokio::test]
async fn credits_are_respected_and_nothing_is_lost_on_disconnect() {
    let db = pgferry_testkit::test_db().await;
    let (tenant, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    queue_lease(&server.engine, tenant, "q", Duration::from_secs(2)).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let ids = producer
        .enqueue_batch(
            (0..10)
                .map(|i| JobSpec::new("q", "k", &json!({ "i": i })))
                .collect(),
        )
        .await
        .unwrap();

    let mut w = RawWorker::open(&server.url, &key, &["q"]).await;
    w.send(pb::worker_request::Msg::Credit(pb::Credit { n: 3 }));
    let first: Vec<pb::Job> = vec![w.job().await, w.job().await, w.job().await];
    // The dispatcher has claimed all ten (demand 3 + prefetch); nothing more may come.
    // (A bounded look for a message that must not exist; it can only fail, never pass by luck.)
    assert!(
        w.next(Duration::from_millis(500)).await.is_none(),
        "a 4th job without credit"
    );

    // A result without a new credit: acked, still no job.
    let r = first[0].r#ref.clone().unwrap();
    w.send(pb::worker_request::Msg::Result(pb::JobResult {
        r#ref: Some(r.clone()),
        outcome: Some(pb::job_result::Outcome::Ok(pb::Success::default())),
        duration_ms: 1,
    }));
    match w.next(PATIENCE).await {
        Some(pb::worker_response::Msg::ResultAck(a)) => {
            assert_eq!(a.r#ref.unwrap().id, r.id);
            assert!(!a.stale);
            assert!(a.error.is_none());
        }
        other => panic!("expected result_ack, got {other:?}"),
    }
    assert!(
        w.next(Duration::from_millis(500)).await.is_none(),
        "a job without credit"
    );

    w.send(pb::worker_request::Msg::Credit(pb::Credit { n: 2 }));
    let more = vec![w.job().await, w.job().await];
    assert!(
        w.next(Duration::from_millis(500)).await.is_none(),
        "a 6th job"
    );
    let delivered: HashSet<i64> = first
        .iter()
        .chain(&more)
        .map(|j| j.r#ref.as_ref().unwrap().id)
        .collect();
    assert_eq!(delivered.len(), 5, "five distinct jobs");

    // A forged token is refused without touching anything.
    w.send(pb::worker_request::Msg::Result(pb::JobResult {
        r#ref: Some(pb::AttemptRef {
            id: r.id,
            attempt: r.attempt,
            token: "00".repeat(40),
        }),
        outcome: Some(pb::job_result::Outcome::Ok(pb::Success::default())),
        duration_ms: 1,
    }));
    match w.next(PATIENCE).await {
        Some(pb::worker_response::Msg::ResultAck(a)) => {
            assert_eq!(a.error.expect("refused").code, "not_found");
        }
        other => panic!("expected result_ack, got {other:?}"),
    }

    // Drop the stream holding 4 unfinished jobs, with 5 more claimed but undelivered.
    drop(w);

    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(&server.url, &key, &["q"], 8);
    opts.acks = Some(ack_tx);
    let worker = Worker::new(opts, |_job: pgferry_client::JobCtx| async {
        Outcome::Ok(None)
    });
    let (stop_tx, run) = spawn_worker(worker, Duration::from_secs(10));
    let got = recv_acks(&mut acks, 9).await;
    let mut done: HashSet<i64> = got.iter().filter(|a| !a.stale).map(|a| a.id).collect();
    done.insert(r.id);
    assert_eq!(
        done,
        ids.iter().copied().collect::<HashSet<_>>(),
        "all ten finished"
    );
    let counts = completed_counts(&db, &ids).await;
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "{counts:?}"
    );
    let _ = stop_tx.send(());
    run.await.unwrap().unwrap();
    server.stop().await;
}

/// An idle worker stays subscribed: after thirty keepalive periods (the shortened stand-in
/// for a long idle) without any traffic, a job enqueued then still reaches it, woken by the
/// tick feed alone.
#[tokio::test]
async fn idle_worker_still_receives_a_job() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let config = GrpcConfig {
        keepalive: Duration::from_millis(100),
        // No backstop poll: only the tick feed can bring the job, so a lost wake-up fails
        // the test instead of being covered by the poll.
        idle_poll: Duration::from_secs(3600),
        ..GrpcConfig::default()
    };
    let server = Server::start(&db, loopback(), config).await;
    let mut w = RawWorker::open(&server.url, &key, &["idle"]).await;
    w.send(pb::worker_request::Msg::Credit(pb::Credit { n: 1 }));
    // Thirty keepalive periods with nothing to do (the stream must not expire).
    assert!(w.next(Duration::from_secs(3)).await.is_none());
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let started = std::time::Instant::now();
    let id = producer
        .enqueue(JobSpec::new("idle", "k", &json!(null)))
        .await
        .unwrap();
    let job = w.job().await;
    eprintln!(
        "idle worker got its job {:?} after enqueue",
        started.elapsed()
    );
    assert_eq!(job.r#ref.unwrap().id, id);
    server.stop().await;
}

/// A handler sees its job's enqueue time to the microsecond, as the database stored it: an
/// enqueue → start latency measured from it is not up to a millisecond too long.
#[tokio::test]
async fn a_handler_sees_the_enqueue_time_to_the_microsecond() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            producer
                .enqueue(JobSpec::new("times", "k", &json!(null)))
                .await
                .unwrap(),
        );
    }
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let worker = Worker::new(
        WorkerOptions::new(&server.url, &key, &["times"], 5),
        move |job: pgferry_client::JobCtx| {
            let _ = seen_tx.send((job.id, job.enqueued_at));
            async { Outcome::Ok(None) }
        },
    );
    let (stop_tx, running) = spawn_worker(worker, Duration::from_secs(5));
    let c = db.connect().await;
    for _ in 0..ids.len() {
        let (id, at) = tokio::time::timeout(PATIENCE, seen.recv())
            .await
            .expect("a job started")
            .unwrap();
        let stored: i64 = c
            .query_one(
                "SELECT (extract(epoch FROM enqueued_at) * 1000000)::int8 AS us
                   FROM pgferry.ready WHERE job_id = $1",
                &[&id],
            )
            .await
            .unwrap()
            .get("us");
        let seen_us = at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        assert_eq!(seen_us, stored, "job {id}");
    }
    let _ = stop_tx.send(());
    running.await.unwrap().unwrap();
    server.stop().await;
}

/// The server restarts (same address) while producers and workers run: clients reconnect,
/// and every job whose enqueue was acknowledged is completed exactly once.
#[tokio::test]
async fn server_restart_mid_run_ledger_balances() {
    let db = pgferry_testkit::test_db().await;
    let (tenant, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    let addr = server.addr;
    queue_lease(&server.engine, tenant, "r", Duration::from_secs(2)).await;

    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(&server.url, &key, &["r"], 16);
    opts.acks = Some(ack_tx);
    let worker = Worker::new(opts, |_job: pgferry_client::JobCtx| async {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Outcome::Ok(None)
    });
    let stats = worker.stats();
    let (stop_tx, run) = spawn_worker(worker, Duration::from_secs(10));

    // Producer: 40 batches of 25; a batch whose ack was lost to the restart is retried
    // (its first copy may have committed: those ids are unknown and not in the ledger).
    let producer = Arc::new(Producer::connect(&server.url, &key).await.unwrap());
    let (restart_tx, restart_rx) = oneshot::channel::<()>();
    let prod = {
        let producer = producer.clone();
        tokio::spawn(async move {
            let mut known = Vec::new();
            let mut restart_tx = Some(restart_tx);
            for b in 0..40 {
                if b == 20 {
                    // Halfway: let the test restart the server.
                    let _ = restart_tx.take().unwrap().send(());
                }
                let jobs: Vec<JobSpec> = (0..25)
                    .map(|i| JobSpec::new("r", "k", &json!({ "b": b, "i": i })))
                    .collect();
                loop {
                    match producer.enqueue_batch(jobs.clone()).await {
                        Ok(ids) => {
                            known.extend(ids);
                            break;
                        }
                        Err(Error::Api { code, .. }) if code != "unavailable" => {
                            panic!("refused: {code}")
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            }
            known
        })
    };
    restart_rx.await.unwrap();
    server.stop().await;
    let server = Server::start(&db, addr, GrpcConfig::default()).await;
    let known = prod.await.unwrap();
    assert_eq!(known.len(), 1000);

    // Wait until every known id has its completion (lease-expired ones are rescued and
    // run again), then check none has two.
    until_completed_once(&db, &known, Duration::from_secs(90)).await;
    let mut non_stale = HashMap::<i64, u32>::new();
    while let Ok(a) = acks.try_recv() {
        if !a.stale {
            *non_stale.entry(a.id).or_default() += 1;
        }
    }
    assert!(
        non_stale.values().all(|&n| n == 1),
        "an attempt acked as recorded twice"
    );
    assert!(
        stats.connects.load(std::sync::atomic::Ordering::Relaxed) >= 2,
        "the worker reconnected"
    );
    let _ = stop_tx.send(());
    run.await.unwrap().unwrap();
    server.stop().await;
}

/// A job running three times longer than its queue's lease is kept by the worker's
/// heartbeats: one attempt, completed, never rescued.
#[tokio::test]
async fn heartbeats_keep_a_long_job() {
    let db = pgferry_testkit::test_db().await;
    let (tenant, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    queue_lease(&server.engine, tenant, "long", Duration::from_secs(1)).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let id = producer
        .enqueue(JobSpec::new("long", "k", &json!(null)))
        .await
        .unwrap();
    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(&server.url, &key, &["long"], 1);
    opts.acks = Some(ack_tx);
    let worker = Worker::new(opts, |job: pgferry_client::JobCtx| async move {
        // Three leases long; a lost lease would cancel the context.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(3)) => Outcome::Ok(None),
            _ = job.cancelled() => Outcome::Cancelled("lease lost".into()),
        }
    });
    let (stop_tx, run) = spawn_worker(worker, Duration::from_secs(10));
    let got = recv_acks(&mut acks, 1).await;
    assert_eq!(got[0].id, id);
    assert_eq!(got[0].attempt, 1, "never rescued and retried");
    assert!(!got[0].stale, "the worker's outcome won");
    let info = server.engine.get_job(id).await.unwrap();
    assert_eq!(info.state.as_str(), "completed");
    assert_eq!(info.attempts.len(), 1, "{:?}", info.attempts);
    let _ = stop_tx.send(());
    run.await.unwrap().unwrap();
    server.stop().await;
}

/// Cancelling a running job reaches the worker holding it; the worker's `cancelled`
/// outcome is recorded.
#[tokio::test]
async fn cancel_reaches_a_running_worker() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let id = producer
        .enqueue(JobSpec::new("c", "k", &json!(null)))
        .await
        .unwrap();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(&server.url, &key, &["c"], 1);
    opts.acks = Some(ack_tx);
    let worker = Worker::new(opts, move |job: pgferry_client::JobCtx| {
        let started = started_tx.clone();
        async move {
            let _ = started.send(job.id);
            tokio::select! {
                _ = job.cancelled() => Outcome::Cancelled("stopped on request".into()),
                _ = tokio::time::sleep(PATIENCE) => Outcome::Ok(None),
            }
        }
    });
    let (stop_tx, run) = spawn_worker(worker, Duration::from_secs(10));
    let running = tokio::time::timeout(PATIENCE, started.recv())
        .await
        .expect("job started")
        .unwrap();
    assert_eq!(running, id);
    server
        .engine
        .cancel(id, Some("test"))
        .await
        .expect("cancel");
    let got = recv_acks(&mut acks, 1).await;
    assert_eq!(got[0].id, id);
    assert!(!got[0].stale);
    let info = server.engine.get_job(id).await.unwrap();
    assert_eq!(info.state.as_str(), "cancelled");
    let _ = stop_tx.send(());
    run.await.unwrap().unwrap();
    server.stop().await;
}
