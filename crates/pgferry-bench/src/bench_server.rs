//! A pgferry server inside the bench process, the way `pgferry serve` runs one: engine, leader
//! and gRPC or the HTTP API on a loopback port, with a tenant, an API key and the benchmark
//! queue of the run.

use pgferry_core::{db, Engine};
use pgferry_server::auth::{admin, Scopes};
use pgferry_server::grpc::{GrpcConfig, GrpcState};
use pgferry_server::{AppState, ServerConfig};
use tokio::task::JoinHandle;
use tokio_postgres::Config;

use crate::measure;
use crate::BenchOpts;

/// Connections of the server's pool (what `pgferry serve` uses by default).
const SERVER_POOL: usize = 16;

/// The queue clients name; the engine knows it by its tenant-scoped name.
pub(crate) const QUEUE: &str = "bench";

/// What the server answers on its port.
#[derive(Clone, Copy)]
pub(crate) enum Api {
    Grpc,
    Http,
}

pub(crate) struct BenchServer {
    /// `http://127.0.0.1:port` of the listener.
    pub url: String,
    /// An API key of the bench tenant with every scope.
    pub key: String,
    pub engine: std::sync::Arc<Engine>,
    /// [`QUEUE`] as the engine names it (`t<tenant>.bench`).
    pub engine_queue: String,
    stop: tokio::sync::watch::Sender<bool>,
    server: JoinHandle<()>,
    leader: JoinHandle<()>,
}

/// Migrates the database of `config` and creates the bench tenant with a key of every
/// scope: (tenant id, the key as clients send it).
pub(crate) async fn bench_tenant(config: &Config) -> anyhow::Result<(i64, String)> {
    let mut c = measure::connect(config, "migrate").await?;
    pgferry_server::migrate::up(&mut c).await?;
    let tenant_id = admin::create_tenant(&mut c, "bench").await?;
    let (_, key) = admin::create_key(&mut c, "bench", Scopes::all(), Some("bench")).await?;
    Ok((tenant_id, key.expose()))
}

impl BenchServer {
    /// Migrates the database of `config`, creates the tenant, key and queue, and serves `api`.
    pub(crate) async fn start(
        config: &Config,
        opts: &BenchOpts,
        api: Api,
    ) -> anyhow::Result<BenchServer> {
        let (tenant_id, key) = bench_tenant(config).await?;
        let engine = Engine::new(
            db::Pools::new(config, "api", SERVER_POOL),
            crate::engine_config(opts),
        );
        let engine_queue = pgferry_server::auth::engine_queue(tenant_id, QUEUE)?;
        crate::bench_queue(&engine, &engine_queue, opts).await?;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let leader = crate::spawn_leader(&engine, config, opts, stop_rx.clone());
        let mut server_config = ServerConfig::default();
        server_config.coalesce.adaptive = opts.group_commit_adaptive;
        server_config.coalesce.caller_flush = opts.group_commit_caller_flush;
        // The benchmark is the only client: no per-key rate limit in the way.
        server_config.http.rate_per_sec = 1e9;
        server_config.http.rate_burst = 1e9;
        let app = AppState::new(engine.clone(), server_config).await?;
        let listener = pgferry_server::listen(([127, 0, 0, 1], 0).into())?;
        let url = format!("http://{}", listener.local_addr()?);
        let mut server_stop = stop_rx;
        let stopped = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        let server = match api {
            Api::Grpc => {
                let grpc = GrpcState::from_app(&app, GrpcConfig::default()).await?;
                let serving = pgferry_server::grpc::serve_grpc(listener, grpc, stopped);
                tokio::spawn(async move {
                    if let Err(e) = serving.await {
                        tracing::warn!(error = %e, "bench gRPC server ended");
                    }
                })
            }
            Api::Http => {
                let serving = pgferry_server::serve_http(listener, app, stopped);
                tokio::spawn(async move {
                    if let Err(e) = serving.await {
                        tracing::warn!(error = %e, "bench HTTP server ended");
                    }
                })
            }
        };
        Ok(BenchServer {
            url,
            key,
            engine,
            engine_queue,
            stop,
            server,
            leader,
        })
    }

    /// Stops serving and leading, and closes the engine's pool.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        let _ = self.leader.await;
        self.engine.pool().close();
    }
}
