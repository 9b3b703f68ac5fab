//! An in-process pgferry server (engine, leader, gRPC on loopback) over a testkit database.
#![allow(dead_code)]

pub mod raw;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::{Engine, EngineConfig, Leader, LeaderConfig, QueueOptions};
use pgferry_server::auth::{admin, Scopes};
use pgferry_server::grpc::{GrpcConfig, GrpcState};
use pgferry_server::{AppState, ServerConfig};
use pgferry_testkit::TestDb;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Generous bound for anything that should take milliseconds (never a timing assertion:
/// hitting it means the message never came).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Fast timings for tests: ticks every few ms even when idle, rescue every 200 ms.
pub fn leader_config() -> LeaderConfig {
    LeaderConfig {
        idle_tick_interval: Duration::from_millis(20),
        rescue_interval: Duration::from_millis(200),
        claim_settle: Duration::from_millis(500),
        ..LeaderConfig::default()
    }
}

pub struct Server {
    pub url: String,
    pub addr: SocketAddr,
    /// The HTTP API of the same server (`http://127.0.0.1:<port>`, no trailing slash).
    pub http_url: String,
    pub app: AppState,
    pub engine: Arc<Engine>,
    pub grpc: Arc<GrpcState>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    listener_task: JoinHandle<()>,
}

impl Server {
    /// Starts on `addr` (port 0: any free port).
    pub async fn start(db: &TestDb, addr: SocketAddr, config: GrpcConfig) -> Server {
        Server::start_with(db, addr, config, ServerConfig::default()).await
    }

    /// Starts with the given settings of the HTTP API, auth and group commit too (gRPC
    /// shares the key cache and the rate limits); HTTP is served on a free port.
    pub async fn start_with(
        db: &TestDb,
        addr: SocketAddr,
        config: GrpcConfig,
        server_config: ServerConfig,
    ) -> Server {
        Server::start_on(&db.config, addr, config, server_config).await
    }

    /// Starts on the database `pg` points to (not necessarily the testkit's).
    pub async fn start_on(
        pg: &tokio_postgres::Config,
        addr: SocketAddr,
        config: GrpcConfig,
        server_config: ServerConfig,
    ) -> Server {
        let mut client = pgferry_core::db::connect(pg, "migrate")
            .await
            .expect("connect");
        pgferry_server::migrate::up(&mut client)
            .await
            .expect("migrate");
        let engine = Engine::new(
            pgferry_core::db::pool(pg, "api", 16),
            EngineConfig::default(),
        );
        let (stop, stop_rx) = watch::channel(false);
        let leader = Leader::new(engine.clone(), pg.clone(), leader_config());
        let rescues = leader.subscribe_rescues();
        let mut tasks = vec![tokio::spawn(leader.run(stop_rx.clone()))];
        // Cancellations (NOTIFY pgferry_cancel) reach this server's streams through it.
        let listener_task = tokio::spawn(pgferry_core::listen::run_tick_listener(
            engine.clone(),
            pg.clone(),
        ));
        let app = AppState::new(engine.clone(), server_config)
            .await
            .expect("app state");
        tokio::spawn(pgferry_server::metrics::feed_rescues(app.clone(), rescues));
        let grpc = GrpcState::from_app(&app, config).await.expect("grpc state");
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let mut rx = stop_rx;
        let g = grpc.clone();
        tasks.push(tokio::spawn(async move {
            pgferry_server::grpc::serve_grpc(listener, g, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
            .expect("serve grpc");
        }));
        let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind http");
        let http_url = format!("http://{}", http_listener.local_addr().unwrap());
        let mut rx = stop.subscribe();
        let served = app.clone();
        tasks.push(tokio::spawn(async move {
            pgferry_server::serve_http(http_listener, served, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
            .expect("serve http");
        }));
        Server {
            url: format!("http://{addr}"),
            addr,
            http_url,
            app,
            engine,
            grpc,
            stop,
            tasks,
            listener_task,
        }
    }

    /// Graceful stop: streams end with UNAVAILABLE, dispatchers hand back their buffers,
    /// the leader releases its lock.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.listener_task.abort();
        for t in self.tasks {
            t.await.expect("server task");
        }
        self.engine.pool().close();
    }
}

/// Runs `worker` on a task of its own until the returned sender is used or dropped, then
/// lets it drain for `drain`.
pub fn spawn_worker(
    worker: pgferry_client::Worker,
    drain: Duration,
) -> (
    tokio::sync::oneshot::Sender<()>,
    JoinHandle<pgferry_client::Result<Arc<pgferry_client::WorkerStats>>>,
) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(worker.run(
        async move {
            let _ = stop_rx.await;
        },
        drain,
    ));
    (stop_tx, run)
}

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A tenant with an all-scopes key; returns (tenant id, key).
pub async fn tenant_key(db: &TestDb, name: &str) -> (i64, String) {
    let mut client = db.connect().await;
    pgferry_server::migrate::up(&mut client)
        .await
        .expect("migrate");
    let id = admin::create_tenant(&mut client, name)
        .await
        .expect("tenant");
    let (_, key) = admin::create_key(&mut client, name, Scopes::all(), None)
        .await
        .expect("key");
    (id, key.expose())
}

/// Sets the lease of a tenant's queue (short leases make rescue observable in tests).
pub async fn queue_lease(engine: &Engine, tenant_id: i64, queue: &str, lease: Duration) {
    let name = pgferry_server::auth::engine_queue(tenant_id, queue).unwrap();
    engine
        .upsert_queue(
            &name,
            &QueueOptions {
                lease,
                ..QueueOptions::default()
            },
        )
        .await
        .expect("queue");
}

/// Completed outcomes per job id among `ids`.
pub async fn completed_counts(db: &TestDb, ids: &[i64]) -> std::collections::HashMap<i64, i64> {
    let client = db.connect().await;
    client
        .query(
            "SELECT u.id, count(*) FROM pgferry.completions c, unnest(c.job_ids) u(id) \
             WHERE c.outcome = 1 AND u.id = ANY($1) GROUP BY u.id",
            &[&ids],
        )
        .await
        .expect("ledger")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Waits (up to `within`) until every job of `ids` has a completed outcome, and asserts
/// that none has two.
pub async fn until_completed_once(db: &TestDb, ids: &[i64], within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let counts = completed_counts(db, ids).await;
        if counts.len() == ids.len() {
            assert!(counts.values().all(|&c| c == 1), "a job completed twice");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} jobs completed",
            counts.len(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The id of tenant `name`.
pub async fn tenant_key_id(db: &TestDb, name: &str) -> i64 {
    let client = db.connect().await;
    admin::tenant_id(&client, name)
        .await
        .expect("tenant lookup")
        .expect("tenant exists")
}
