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
//! client, HTTP/2 and server alone. Beside them, the floor under any networked server: a
//! job-sized request to a task of this process and a short reply, over TCP loopback and over
//! a Unix socket (`echo.rs`). The engine's acknowledgement plus that floor is the least any
//! producer talking to a server, rather than to Postgres itself, can wait.

use std::time::{Duration, Instant};

use pgferry_client::{JobSpec, Producer};
use pgferry_core::{EnqueueRequest, IdempotencyKey, NewJob};
use serde::Serialize;
use tokio_postgres::Config;

use crate::bench_server::{Api, BenchServer, QUEUE};
use crate::echo::{Echo, Transport};
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
    /// A job-sized request and a short reply over TCP loopback, no server logic.
    pub tcp_round_trip: Probe,
    /// The same over a Unix socket pair.
    pub unix_round_trip: Probe,
    pub engine_ack_p50_vs_bare_commit_p50: f64,
    pub engine_keyed_ack_p50_vs_bare_commit_p50: f64,
    pub grpc_ack_p50_vs_bare_commit_p50: f64,
    /// (engine p50 + TCP round trip p50) ÷ bare commit p50: the least a producer behind a
    /// TCP hop can reach, whatever the server does.
    pub engine_plus_tcp_round_trip_p50_vs_bare_commit_p50: f64,
    /// The same behind a Unix socket.
    pub engine_plus_unix_round_trip_p50_vs_bare_commit_p50: f64,
}

#[derive(Clone, Copy)]
enum Path {
    BareCommit,
    Engine,
    EngineKeyed,
    Grpc,
    GrpcRefused,
    TcpRoundTrip,
    UnixRoundTrip,
}

const PATHS: [Path; 7] = [
    Path::BareCommit,
    Path::Engine,
    Path::EngineKeyed,
    Path::Grpc,
    Path::GrpcRefused,
    Path::TcpRoundTrip,
    Path::UnixRoundTrip,
];

/// Bytes an enqueue request of one job carries beyond its payload (queue, kind, key, gRPC and
/// HTTP/2 framing), for the echo's request size.
const REQUEST_OVERHEAD_BYTES: usize = 128;

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
    let mut echo = Echo::start(payload_bytes + REQUEST_OVERHEAD_BYTES).await?;

    let mut pace = gap.map(tokio::time::interval);
    let mut ms: [Vec<f32>; PATHS.len()] = Default::default();
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
                Path::TcpRoundTrip => {
                    echo.round_trip(Transport::Tcp).await?;
                }
                Path::UnixRoundTrip => {
                    echo.round_trip(Transport::Unix).await?;
                }
            }
            if started.is_some() {
                ms[i].push(t.elapsed().as_secs_f32() * 1000.0);
            }
        }
        round += 1;
    }
    let [bare, eng, keyed, grpc, grpc_refused, tcp, unix] = ms.map(|m| Probe::of(&m));
    let ratio = |p: &Probe| p.p50_ms / bare.p50_ms;
    let behind = |hop: &Probe| (eng.p50_ms + hop.p50_ms) / bare.p50_ms;
    Ok(LoneProducer {
        gap_ms: gap.map(|g| g.as_secs_f64() * 1000.0),
        rounds: round - WARMUP_ROUNDS,
        engine_ack_p50_vs_bare_commit_p50: ratio(&eng),
        engine_keyed_ack_p50_vs_bare_commit_p50: ratio(&keyed),
        grpc_ack_p50_vs_bare_commit_p50: ratio(&grpc),
        engine_plus_tcp_round_trip_p50_vs_bare_commit_p50: behind(&tcp),
        engine_plus_unix_round_trip_p50_vs_bare_commit_p50: behind(&unix),
        bare_commit: bare,
        engine: eng,
        engine_keyed: keyed,
        grpc,
        grpc_refused,
        tcp_round_trip: tcp,
        unix_round_trip: unix,
    })
}
