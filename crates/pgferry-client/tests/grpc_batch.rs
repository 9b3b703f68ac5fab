//! Batched worker streams (JobBatch / ResultBatch / ResultAckBatch, negotiated in the
//! hellos) end to end over loopback: credits hold per job inside batches, batches never
//! exceed what was agreed, acks are matched per ref, an idle worker still gets a lone job,
//! and workers that never asked for batches keep working beside batching ones.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::raw::RawWorker;
use common::{completed_counts, loopback, spawn_worker, tenant_key, Server, PATIENCE};
use pb::worker_request::Msg as Req;
use pgferry_client::proto::v1 as pb;
use pgferry_client::{JobSpec, Outcome, Producer, Worker, WorkerOptions};
use pgferry_server::grpc::GrpcConfig;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

/// A bounded look for a message that must not come (it can only fail, never pass by luck).
const QUIET: Duration = Duration::from_millis(500);

fn ok(r: &pb::AttemptRef) -> pb::JobResult {
    pb::JobResult {
        r#ref: Some(r.clone()),
        outcome: Some(pb::job_result::Outcome::Ok(pb::Success::default())),
        duration_ms: 1,
    }
}

/// Jobs from JobBatch messages until `n` arrived; checks every batch against `max`.
async fn jobs(w: &mut RawWorker, n: usize, max: usize) -> Vec<pb::Job> {
    let mut got = Vec::new();
    while got.len() < n {
        let batch = w.job_batch().await;
        assert!(
            !batch.is_empty() && batch.len() <= max,
            "batch of {}",
            batch.len()
        );
        got.extend(batch);
    }
    assert_eq!(got.len(), n, "more jobs than credits");
    got
}

/// Acks from ResultAckBatch messages until `n` arrived, by job id.
async fn acks(w: &mut RawWorker, n: usize, max: usize) -> HashMap<i64, pb::ResultAck> {
    let mut got = HashMap::new();
    let mut count = 0;
    while count < n {
        let batch = w.ack_batch().await;
        assert!(!batch.is_empty() && batch.len() <= max);
        count += batch.len();
        for a in batch {
            got.insert(a.r#ref.as_ref().expect("ack ref").id, a);
        }
    }
    assert_eq!(count, n, "one ack per result");
    got
}

fn id(j: &pb::Job) -> i64 {
    j.r#ref.as_ref().unwrap().id
}

#[tokio::test]
async fn batched_stream_respects_credits_and_acks_each_ref() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let ids = producer
        .enqueue_batch(
            (0..12)
                .map(|i| JobSpec::new("b", "k", &json!({ "i": i })))
                .collect(),
        )
        .await
        .unwrap();

    let (mut w, hello) = RawWorker::open_batched(&server.url, &key, &["b"], 4).await;
    assert_eq!(
        hello.max_batch, 4,
        "the worker's wish is below the server's limit"
    );
    w.send(Req::Credit(pb::Credit { n: 3 }));
    let first = jobs(&mut w, 3, 4).await;
    assert!(w.next(QUIET).await.is_none(), "a 4th job without credit");

    // A result batch returning no credit: acked, and still no job.
    let r0 = first[0].r#ref.clone().unwrap();
    w.send(Req::Results(pb::ResultBatch {
        results: vec![ok(&r0)],
        credit: 0,
    }));
    let a = acks(&mut w, 1, 4).await;
    assert!(!a[&r0.id].stale && a[&r0.id].error.is_none());
    assert!(w.next(QUIET).await.is_none(), "a job without credit");

    // Two results with two credits piggybacked: two acks and exactly two more jobs.
    let done: Vec<pb::AttemptRef> = first[1..]
        .iter()
        .map(|j| j.r#ref.clone().unwrap())
        .collect();
    w.send(Req::Results(pb::ResultBatch {
        results: done.iter().map(ok).collect(),
        credit: 2,
    }));
    let mut more = Vec::new();
    let mut acked = HashSet::new();
    while more.len() < 2 || acked.len() < 2 {
        match w.next(PATIENCE).await {
            Some(pb::worker_response::Msg::Jobs(b)) => more.extend(b.jobs),
            Some(pb::worker_response::Msg::ResultAcks(b)) => {
                for a in b.acks {
                    assert!(!a.stale && a.error.is_none());
                    acked.insert(a.r#ref.unwrap().id);
                }
            }
            other => panic!("expected jobs or acks, got {other:?}"),
        }
    }
    assert_eq!(more.len(), 2, "exactly the two credits returned");
    assert_eq!(acked, done.iter().map(|r| r.id).collect::<HashSet<_>>());
    assert!(w.next(QUIET).await.is_none(), "a job beyond the credits");

    // Plenty of credit: the other seven, in batches of at most four.
    w.send(Req::Credit(pb::Credit { n: 100 }));
    let rest = jobs(&mut w, 7, 4).await;
    assert!(w.next(QUIET).await.is_none(), "only twelve jobs exist");
    let delivered: HashSet<i64> = first.iter().chain(&more).chain(&rest).map(id).collect();
    assert_eq!(delivered, ids.iter().copied().collect::<HashSet<_>>());

    // Mixed results in one batch: each ack names its ref and carries its own verdict.
    let forged = pb::AttemptRef {
        id: id(&rest[0]),
        attempt: 1,
        token: "00".repeat(40),
    };
    let empty = pb::JobResult {
        r#ref: rest[1].r#ref.clone(),
        outcome: None,
        duration_ms: 0,
    };
    w.send(Req::Results(pb::ResultBatch {
        results: vec![ok(&forged), empty, ok(rest[2].r#ref.as_ref().unwrap())],
        credit: 0,
    }));
    let a = acks(&mut w, 3, 4).await;
    assert_eq!(a.len(), 3);
    let code = |i: i64| a[&i].error.as_ref().map(|e| e.code.clone());
    assert_eq!(code(id(&rest[0])).as_deref(), Some("not_found"));
    assert_eq!(code(id(&rest[1])).as_deref(), Some("invalid_argument"));
    assert_eq!(code(id(&rest[2])), None);
    assert_eq!(a[&id(&rest[0])].r#ref.as_ref().unwrap().token, forged.token);

    // Everything not yet done, twice: the repeat of each attempt is acked stale.
    let refs: Vec<pb::AttemptRef> = rest[..2]
        .iter()
        .chain(&rest[3..])
        .chain(&more)
        .map(|j| j.r#ref.clone().unwrap())
        .collect();
    for stale in [false, true] {
        for chunk in refs.chunks(4) {
            w.send(Req::Results(pb::ResultBatch {
                results: chunk.iter().map(ok).collect(),
                credit: 0,
            }));
        }
        let a = acks(&mut w, refs.len(), 4).await;
        assert!(a.values().all(|a| a.error.is_none() && a.stale == stale));
    }
    let counts = completed_counts(&db, &ids).await;
    assert!(ids.iter().all(|i| counts.get(i) == Some(&1)), "{counts:?}");
    server.stop().await;
}

/// After a long idle period a batching worker still gets a lone job at once: the server
/// sends what it has, it never waits to fill a batch.
#[tokio::test]
async fn idle_batched_worker_gets_a_lone_job() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let config = GrpcConfig {
        keepalive: Duration::from_millis(100),
        idle_poll: Duration::from_millis(100),
        ..GrpcConfig::default()
    };
    let server = Server::start(&db, loopback(), config).await;
    let (mut w, hello) = RawWorker::open_batched(&server.url, &key, &["idle"], 64).await;
    assert_eq!(hello.max_batch, 64);
    w.send(Req::Credit(pb::Credit { n: 8 }));
    assert!(w.next(Duration::from_secs(3)).await.is_none());
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let started = std::time::Instant::now();
    let one = producer
        .enqueue(JobSpec::new("idle", "k", &json!(null)))
        .await
        .unwrap();
    let batch = w.job_batch().await;
    eprintln!(
        "idle batched worker got its job {:?} after enqueue",
        started.elapsed()
    );
    assert_eq!(batch.iter().map(id).collect::<Vec<_>>(), vec![one]);
    server.stop().await;
}

/// ResultBatch only where negotiated and within the agreed size; the server's own limit
/// caps the worker's wish, and a limit of 0 turns batching off (like an older server).
#[tokio::test]
async fn batches_are_negotiated_and_bounded() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let config = GrpcConfig {
        max_worker_batch: 3,
        ..GrpcConfig::default()
    };
    let server = Server::start(&db, loopback(), config).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    producer
        .enqueue_batch(
            (0..10)
                .map(|_| JobSpec::new("n", "k", &json!(null)))
                .collect(),
        )
        .await
        .unwrap();

    let (mut w, hello) = RawWorker::open_batched(&server.url, &key, &["n"], 1000).await;
    assert_eq!(hello.max_batch, 3, "capped by the server");
    w.send(Req::Credit(pb::Credit { n: 10 }));
    let got = jobs(&mut w, 10, 3).await;
    let refs: Vec<pb::AttemptRef> = got.iter().map(|j| j.r#ref.clone().unwrap()).collect();
    w.send(Req::Results(pb::ResultBatch {
        results: refs[..4].iter().map(ok).collect(),
        credit: 0,
    }));
    let st = w.ended().await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    assert!(st.message().contains("at most 3"), "{st:?}");

    // A worker that did not ask gets single messages and may not send a ResultBatch.
    let mut old = RawWorker::open(&server.url, &key, &["n"]).await;
    old.send(Req::Results(pb::ResultBatch {
        results: vec![ok(&refs[0])],
        credit: 1,
    }));
    assert_eq!(old.ended().await.code(), tonic::Code::InvalidArgument);
    server.stop().await;

    let off = GrpcConfig {
        max_worker_batch: 0,
        ..GrpcConfig::default()
    };
    let server = Server::start(&db, loopback(), off).await;
    let (_, hello) = RawWorker::open_batched(&server.url, &key, &["n"], 64).await;
    assert_eq!(hello.max_batch, 0, "batching off: single messages");
    server.stop().await;
}

async fn run_worker(
    url: &str,
    key: &str,
    queue: &str,
    max_batch: u32,
) -> (
    mpsc::UnboundedReceiver<pgferry_client::Ack>,
    std::sync::Arc<pgferry_client::WorkerStats>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<pgferry_client::Result<std::sync::Arc<pgferry_client::WorkerStats>>>,
) {
    let (ack_tx, acks) = mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(url, key, &[queue], 16);
    opts.acks = Some(ack_tx);
    opts.max_batch = max_batch;
    let worker = Worker::new(opts, |_job: pgferry_client::JobCtx| async {
        Outcome::Ok(None)
    });
    let stats = worker.stats();
    let (stop_tx, run) = spawn_worker(worker, Duration::from_secs(10));
    (acks, stats, stop_tx, run)
}

/// A batching client and one that never asks for batches on the same queue of the same
/// server; then the batching client against a server with batching off. Every job is
/// completed exactly once and acked to the worker that ran it.
#[tokio::test]
async fn old_and_batching_workers_work_side_by_side() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    let (mut new_acks, new_stats, new_stop, new_run) =
        run_worker(&server.url, &key, "mixed", 256).await;
    let (mut old_acks, old_stats, old_stop, old_run) =
        run_worker(&server.url, &key, "mixed", 0).await;
    for s in [&new_stats, &old_stats] {
        while s.connects.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        let batch = (0..500)
            .map(|_| JobSpec::new("mixed", "k", &json!(null)))
            .collect();
        ids.extend(producer.enqueue_batch(batch).await.unwrap());
    }
    let mut seen: HashMap<i64, u32> = HashMap::new();
    let (mut from_new, mut from_old) = (0, 0);
    while seen.len() < ids.len() {
        let a = tokio::select! {
            Some(a) = new_acks.recv() => { from_new += 1; a }
            Some(a) = old_acks.recv() => { from_old += 1; a }
            _ = tokio::time::sleep(PATIENCE) => panic!("{} of {} acked", seen.len(), ids.len()),
        };
        assert!(!a.stale);
        *seen.entry(a.id).or_default() += 1;
    }
    assert!(seen.values().all(|&n| n == 1));
    assert!(
        from_new > 0 && from_old > 0,
        "both workers took jobs: {from_new} / {from_old}"
    );
    let counts = completed_counts(&db, &ids).await;
    assert!(ids.iter().all(|i| counts.get(i) == Some(&1)));
    let _ = new_stop.send(());
    let _ = old_stop.send(());
    new_run.await.unwrap().unwrap();
    old_run.await.unwrap().unwrap();
    server.stop().await;

    let off = GrpcConfig {
        max_worker_batch: 0,
        ..GrpcConfig::default()
    };
    let server = Server::start(&db, loopback(), off).await;
    let (mut acks, _, stop, run) = run_worker(&server.url, &key, "mixed", 256).await;
    let batch = (0..300)
        .map(|_| JobSpec::new("mixed", "k", &json!(null)))
        .collect();
    let ids = Producer::connect(&server.url, &key)
        .await
        .unwrap()
        .enqueue_batch(batch)
        .await
        .unwrap();
    let mut done = HashSet::new();
    while done.len() < ids.len() {
        let a = tokio::time::timeout(PATIENCE, acks.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(!a.stale);
        assert!(done.insert(a.id), "acked twice");
    }
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    server.stop().await;
}
