//! Completion lanes end to end over loopback: the jobs of each claim are dealt over several
//! worker streams, their results come back concurrently in requests mixing receipts, and
//! the server's completion coalescer (partitioned by receipt) acknowledges every one after
//! COMMIT; repeats are acknowledged stale; every job is completed exactly once.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::raw::RawWorker;
use common::{completed_counts, loopback, tenant_key, Server};
use pb::worker_request::Msg as Req;
use pgferry_client::proto::v1 as pb;
use pgferry_client::{JobSpec, Producer};
use pgferry_server::coalesce::CoalesceConfig;
use pgferry_server::grpc::GrpcConfig;
use pgferry_server::ServerConfig;
use serde_json::json;

const STREAMS: usize = 4;
const PER_STREAM: usize = 60;
const BATCH: u32 = 16;

fn ok(r: &pb::AttemptRef) -> pb::JobResult {
    pb::JobResult {
        r#ref: Some(r.clone()),
        outcome: Some(pb::job_result::Outcome::Ok(pb::Success::default())),
        duration_ms: 1,
    }
}

/// Sends `refs` as result batches of 7 (across receipts), then reads one ack per ref.
async fn report(mut w: RawWorker, refs: Vec<pb::AttemptRef>) -> (RawWorker, Vec<pb::ResultAck>) {
    for chunk in refs.chunks(7) {
        w.send(Req::Results(pb::ResultBatch {
            results: chunk.iter().map(ok).collect(),
            credit: 0,
        }));
    }
    let mut acks = Vec::new();
    while acks.len() < refs.len() {
        acks.extend(w.ack_batch().await);
    }
    assert_eq!(acks.len(), refs.len(), "one ack per result");
    (w, acks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_of_shared_receipts_from_many_streams_all_land() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let lanes = 3;
    let server = Server::start_with(
        &db,
        loopback(),
        GrpcConfig::default(),
        ServerConfig {
            coalesce: CoalesceConfig {
                lanes,
                max_wait: Duration::from_millis(5),
                ..CoalesceConfig::default()
            },
            ..ServerConfig::default()
        },
    )
    .await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let mut ids = Vec::new();
    for b in 0..STREAMS * PER_STREAM / 40 {
        let jobs = (0..40)
            .map(|i| JobSpec::new("ln", "k", &json!({ "b": b, "i": i })))
            .collect();
        ids.extend(producer.enqueue_batch(jobs).await.unwrap());
    }

    // Every stream asks for its share; the dispatcher deals each claim over all of them.
    let mut workers = Vec::new();
    for _ in 0..STREAMS {
        let (w, _) = RawWorker::open_batched(&server.url, &key, &["ln"], BATCH).await;
        workers.push(w);
    }
    for w in &workers {
        w.send(Req::Credit(pb::Credit {
            n: PER_STREAM as u32,
        }));
    }
    let mut held = Vec::new();
    for w in &mut workers {
        let mut refs = Vec::new();
        while refs.len() < PER_STREAM {
            refs.extend(w.job_batch().await.into_iter().map(|j| j.r#ref.unwrap()));
        }
        assert_eq!(refs.len(), PER_STREAM, "more jobs than credits");
        held.push(refs);
    }
    let delivered: HashSet<i64> = held.iter().flatten().map(|r| r.id).collect();
    assert_eq!(delivered, ids.iter().copied().collect::<HashSet<_>>());

    // All streams report at once, then all of it again: first fresh, then stale.
    for stale in [false, true] {
        let tasks: Vec<_> = workers
            .drain(..)
            .zip(held.clone())
            .map(|(w, refs)| tokio::spawn(report(w, refs)))
            .collect();
        for t in tasks {
            let (w, acks) = t.await.unwrap();
            for a in &acks {
                assert!(a.error.is_none(), "{a:?}");
                assert_eq!(a.stale, stale, "{a:?}");
            }
            workers.push(w);
        }
    }
    let counts = completed_counts(&db, &ids).await;
    assert!(ids.iter().all(|i| counts.get(i) == Some(&1)), "{counts:?}");
    let s = server.app.coalescers.complete.stats().snapshot();
    assert_eq!(s.lanes, lanes as u64);
    assert_eq!(s.failed_flushes, 0);
    assert_eq!(
        s.rows,
        2 * ids.len() as u64,
        "every result went through the lanes once per report"
    );
    server.stop().await;
}
