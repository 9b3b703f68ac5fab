//! A lone producer's acknowledgement (issue 21): one job per request, nothing consuming it,
//! against one bare one-row commit, all measured in the same rounds on the same cluster.
//!
//! Each round takes one sample of every path, in an order that rotates from round to round,
//! so that each path sees the same cluster (its WAL, its autovacuum, this process's other
//! tasks) and none always follows another. Back to back (`gap`: None) every request follows
//! the previous one at once; paced, each follows an idle `gap`, as an open loop's does (a
//! commit after an idle gap costs more: the backend and the client wake up for it).
//!
//! The paths: the bare commit (a one-row INSERT on its own connection), `Engine::enqueue` in
//! process, the same with an idempotency key (what the server writes for every request),
//! gRPC `Producer::enqueue` through a server in this process, and a gRPC request the server
//! refuses before it touches the database (a queue name that is not one): the round trip of
//! client, HTTP/2 and server alone.

use std::time::{Duration, Instant};

use pgferry_client::{JobSpec, Producer};
use pgferry_core::{EnqueueRequest, IdempotencyKey, NewJob};
use serde::Serialize;
use tokio_postgres::Config;

use crate::bench_server::{Api, BenchServer, QUEUE};
use crate::measure;
use crate::BenchOpts;

/// Rounds before the measured ones (connections warm, statements prepared, id blocks
/// reserved).
const WARMUP_ROUNDS: usize = 200;

/// One path's acknowledgement latency.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Probe {
    fn of(ms: &[f32]) -> Probe {
        Probe {
            samples: ms.len(),
            p50_ms: measure::percentile(ms, 0.50),
            p99_ms: measure::percentile(ms, 0.99),
        }
    }
}

/// Every path of one run, with each acknowledgement's p50 over the bare commit's.
#[derive(Debug, Clone, Serialize)]
pub struct LoneProducer {
    /// The idle gap before each request (None: back to back).
    pub gap_ms: Option<f64>,
    pub rounds: usize,
    pub bare_commit: Probe,
    pub engine: Probe,
    pub engine_keyed: Probe,
    pub grpc: Probe,
    pub grpc_refused: Probe,
    pub engine_ack_p50_vs_bare_commit_p50: f64,
    pub engine_keyed_ack_p50_vs_bare_commit_p50: f64,
    pub grpc_ack_p50_vs_bare_commit_p50: f64,
}

#[derive(Clone, Copy)]
enum Path {
    BareCommit,
    Engine,
    EngineKeyed,
    Grpc,
    GrpcRefused,
}

const PATHS: [Path; 5] = [
    Path::BareCommit,
    Path::Engine,
    Path::EngineKeyed,
    Path::Grpc,
    Path::GrpcRefused,
];

/// Runs the rounds for `duration` on a fresh database of the cluster of `base`; jobs carry
/// `payload_bytes` of JSON.
pub async fn run(
    base: &Config,
    gap: Option<Duration>,
    duration: Duration,
    payload_bytes: usize,
) -> anyhow::Result<LoneProducer> {
    let config = crate::fresh_database(base, "bench_lone_producer").await?;
    let server = BenchServer::start(&config, &BenchOpts::default(), Api::Grpc).await?;
    let measured = rounds(&config, &server, gap, duration, payload_bytes).await;
    server.stop().await;
    measured
}

async fn rounds(
    config: &Config,
    server: &BenchServer,
    gap: Option<Duration>,
    duration: Duration,
    payload_bytes: usize,
) -> anyhow::Result<LoneProducer> {
    let commits = measure::connect(config, "commit").await?;
    commits
        .batch_execute("CREATE TABLE bench_commit (x int)")
        .await?;
    let insert = commits
        .prepare("INSERT INTO bench_commit VALUES (1)")
        .await?;
    let producer = Producer::connect(&server.url, &server.key).await?;
    let payload = crate::payload(payload_bytes);
    let spec = JobSpec::new(QUEUE, "noop", &payload);
    let refused = JobSpec::new("not a queue!", "noop", &payload);
    let job = NewJob::new(server.engine_queue.clone(), "noop", payload.clone());
    let engine = &server.engine;

    let mut pace = gap.map(tokio::time::interval);
    let mut ms: [Vec<f32>; 5] = Default::default();
    let mut round = 0usize;
    let mut started: Option<Instant> = None;
    while started.is_none_or(|s| s.elapsed() < duration) {
        if round == WARMUP_ROUNDS {
            started = Some(Instant::now());
        }
        for k in 0..PATHS.len() {
            let i = (round + k) % PATHS.len();
            if let Some(pace) = pace.as_mut() {
                pace.tick().await;
            }
            let t = Instant::now();
            match PATHS[i] {
                Path::BareCommit => {
                    commits.execute(&insert, &[]).await?;
                }
                Path::Engine => {
                    engine.enqueue(std::slice::from_ref(&job)).await?;
                }
                Path::EngineKeyed => {
                    let key = IdempotencyKey::new(format!("lone-{round}"))?;
                    let request = EnqueueRequest::new(vec![job.clone()]).idempotency_key(key);
                    engine.enqueue_requests(&[request]).await?.remove(0)?;
                }
                Path::Grpc => {
                    producer.enqueue(spec.clone()).await?;
                }
                Path::GrpcRefused => {
                    if producer.enqueue(refused.clone()).await.is_ok() {
                        anyhow::bail!("the server accepted a job for an invalid queue name");
                    }
                }
            }
            if started.is_some() {
                ms[i].push(t.elapsed().as_secs_f32() * 1000.0);
            }
        }
        round += 1;
    }
    let [bare, eng, keyed, grpc, grpc_refused] = ms.map(|m| Probe::of(&m));
    let ratio = |p: &Probe| p.p50_ms / bare.p50_ms;
    Ok(LoneProducer {
        gap_ms: gap.map(|g| g.as_secs_f64() * 1000.0),
        rounds: round - WARMUP_ROUNDS,
        engine_ack_p50_vs_bare_commit_p50: ratio(&eng),
        engine_keyed_ack_p50_vs_bare_commit_p50: ratio(&keyed),
        grpc_ack_p50_vs_bare_commit_p50: ratio(&grpc),
        bare_commit: bare,
        engine: eng,
        engine_keyed: keyed,
        grpc,
        grpc_refused,
    })
}
