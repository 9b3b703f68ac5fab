//! Workers sharing one connection (`pgferry_client::Connection`): their streams are
//! multiplexed on one TCP connection, every stream gets jobs, and after a server restart
//! they all resume on it.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use common::{loopback, queue_lease, tenant_key, until_completed_once, Server, PATIENCE};
use pgferry_client::{Ack, Connection, JobSpec, Outcome, Producer, Worker, WorkerOptions};
use pgferry_server::grpc::GrpcConfig;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

const WORKERS: usize = 4;

/// Established TCP connections whose local end is `addr` (the server's side), from
/// /proc/net/tcp: both ends live in this test process.
fn server_connections(addr: SocketAddr) -> usize {
    let SocketAddr::V4(v4) = addr else {
        panic!("loopback is IPv4")
    };
    let ip = u32::from_le_bytes(v4.ip().octets());
    let local = format!("{ip:08X}:{:04X}", v4.port());
    std::fs::read_to_string("/proc/net/tcp")
        .expect("/proc/net/tcp")
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == local && f[3] == "01"
        })
        .count()
}

async fn enqueue(producer: &Producer, from: usize, n: usize) -> Vec<i64> {
    let jobs: Vec<JobSpec> = (from..from + n)
        .map(|i| JobSpec::new("shared", "k", &json!({ "i": i })))
        .collect();
    producer.enqueue_batch(jobs).await.expect("enqueued")
}

/// Which worker each acknowledged job ran on, until `n` acks arrived.
async fn acks_by_worker(
    rx: &mut mpsc::UnboundedReceiver<(usize, Ack)>,
    n: usize,
) -> HashMap<usize, usize> {
    let mut by = HashMap::new();
    for _ in 0..n {
        let (w, _) = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("acks in time")
            .expect("ack channel open");
        *by.entry(w).or_default() += 1;
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_one_connection_and_resume_on_it_after_a_restart() {
    let db = pgferry_testkit::test_db().await;
    let (tenant, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), GrpcConfig::default()).await;
    let addr = server.addr;
    queue_lease(&server.engine, tenant, "shared", Duration::from_secs(2)).await;

    let connection = Connection::open(&server.url).await.expect("connection");
    let (all_tx, mut all_acks) = mpsc::unbounded_channel();
    let mut stops = Vec::new();
    let mut runs = Vec::new();
    let mut stats = Vec::new();
    for w in 0..WORKERS {
        let (ack_tx, mut acks) = mpsc::unbounded_channel::<Ack>();
        let all = all_tx.clone();
        tokio::spawn(async move {
            while let Some(a) = acks.recv().await {
                let _ = all.send((w, a));
            }
        });
        let mut opts = WorkerOptions::new(&server.url, &key, &["shared"], 1);
        opts.worker_id = format!("shared-{w}");
        opts.acks = Some(ack_tx);
        opts.connection = Some(connection.clone());
        // One slot each, and a handler slow enough that the queue's jobs spread over all four.
        let worker = Worker::new(opts, |_job: pgferry_client::JobCtx| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Outcome::Ok(None)
        });
        stats.push(worker.stats());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        stops.push(stop_tx);
        runs.push(tokio::spawn(worker.run(
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(10),
        )));
    }

    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let first = enqueue(&producer, 0, 200).await;
    let by = acks_by_worker(&mut all_acks, first.len()).await;
    until_completed_once(&db, &first, Duration::from_secs(60)).await;
    assert_eq!(
        by.keys().copied().collect::<HashSet<_>>().len(),
        WORKERS,
        "every stream on the shared connection got jobs: {by:?}"
    );
    // The four workers' streams and the producer's: two connections, not five.
    assert_eq!(
        server_connections(addr),
        2,
        "one connection for the workers"
    );

    // A restart breaks every stream; each worker opens its next one on the same connection,
    // which reconnects by itself.
    drop(producer);
    server.stop().await;
    let server = Server::start(&db, addr, GrpcConfig::default()).await;
    let producer = Producer::connect(&server.url, &key).await.unwrap();
    let second = enqueue(&producer, 200, 200).await;
    let by = acks_by_worker(&mut all_acks, second.len()).await;
    until_completed_once(&db, &second, Duration::from_secs(60)).await;
    assert_eq!(by.len(), WORKERS, "every worker resumed: {by:?}");
    for s in &stats {
        assert!(
            s.connects.load(std::sync::atomic::Ordering::Relaxed) >= 2,
            "each worker opened a second stream"
        );
    }
    assert_eq!(
        server_connections(addr),
        2,
        "still one connection for the workers"
    );

    for stop in stops {
        let _ = stop.send(());
    }
    for run in runs {
        run.await.unwrap().unwrap();
    }
    server.stop().await;
}
