//! Running the server: migrate, start the leader campaign, serve HTTP, stop in order.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use pgferry_core::{db, Engine, EngineConfig, Leader, LeaderConfig};
use pgferry_server::AppState;
use tokio::sync::watch;
use tokio_postgres::Config;

#[derive(clap::Args, Clone)]
pub struct ServerArgs {
    /// HTTP listen address (port 0 picks a free port; the chosen one is printed).
    #[arg(long, default_value_t = crate::DEFAULT_HTTP)]
    pub http_addr: SocketAddr,
    /// gRPC listen address (port 0 picks a free port; the chosen one is printed).
    #[arg(long, default_value_t = crate::DEFAULT_GRPC)]
    pub grpc_addr: SocketAddr,
    /// HTTP/2 keepalive ping interval of gRPC connections, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub grpc_keepalive_ms: u64,
    /// Do not apply migrations on start.
    #[arg(long)]
    pub no_migrate: bool,
    /// Connections in the request pool; queues with async durability get a second pool of
    /// up to as many (opened only when such a queue writes).
    #[arg(long, default_value_t = 16)]
    pub pool_size: usize,
    /// Sustained HTTP requests per second allowed per API key (429 above).
    #[arg(long, default_value_t = 1000.0)]
    pub rate_limit: f64,
    /// HTTP requests per API key allowed in a burst above the sustained rate.
    #[arg(long, default_value_t = 2000.0)]
    pub rate_burst: f64,
    /// Sustained requests per second allowed per monitor ping token and per inbound webhook
    /// address (`/ping/...`, `/in/...`: no API key there; 429 above).
    #[arg(long, env = "PGFERRY_PUBLIC_RATE_LIMIT", default_value_t = 10.0,
          value_parser = positive_rate)]
    pub public_rate_limit: f64,
    /// Requests per ping token or webhook address allowed in a burst above the sustained rate.
    #[arg(long, env = "PGFERRY_PUBLIC_RATE_BURST", default_value_t = 60.0,
          value_parser = positive_rate)]
    pub public_rate_burst: f64,
    /// Largest args + meta of one job over HTTP, in bytes (413 above).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_job_bytes: usize,
    /// Longest HTTP claim long-poll, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub max_claim_wait_ms: u64,
    /// Group commit: most rows of one enqueue or completion statement (requests from all
    /// streams and HTTP calls are merged up to this).
    #[arg(long, env = "PGFERRY_GROUP_COMMIT_ROWS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub group_commit_rows: u64,
    /// Group commit: longest a request waits for others to share its statement, in
    /// microseconds (0: only requests already waiting are merged).
    #[arg(long, env = "PGFERRY_GROUP_COMMIT_WAIT_US", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub group_commit_wait_us: u64,
    /// Group commit: flush at once when nothing else is being written (adaptive, the
    /// default), or always wait --group-commit-wait-us for company (false).
    #[arg(long, env = "PGFERRY_GROUP_COMMIT_ADAPTIVE", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub group_commit_adaptive: bool,
    /// Group commit: completion flushes running at once. Each is a lane of receipts: the
    /// outcomes of one claimed batch always share a lane, so concurrent flushes never wait
    /// on each other's receipt locks. At most the pool size is useful.
    #[arg(long, env = "PGFERRY_GROUP_COMMIT_LANES", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub group_commit_lanes: u64,
    /// Group commit: how much longer a completion lane holding part of one claimed batch
    /// waits for the rest of it, in microseconds (a whole batch is written in claim order
    /// with one INSERT, the engine's cheapest completion; 0: never wait).
    #[arg(long, env = "PGFERRY_GROUP_COMMIT_GATHER_US", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub group_commit_gather_us: u64,
    /// Active session history: milliseconds between two samples of pg_stat_activity,
    /// taken by the leader (0: no sampling). See docs/ash.md.
    #[arg(long, env = "PGFERRY_ASH_INTERVAL_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub ash_interval_ms: u64,
    /// Active session history: milliseconds between two publishes of what this server's
    /// backends serve (queue, job kind), so whichever sampler runs (the leader's, or
    /// pg_cron's) attributes them (0: never; default: --ash-interval-ms). See docs/ash.md.
    #[arg(long, env = "PGFERRY_ASH_PUBLISH_MS",
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub ash_publish_ms: Option<u64>,
    /// Active session history: sample only these databases (comma-separated; default:
    /// every database of the cluster).
    #[arg(long, env = "PGFERRY_ASH_DATABASES", value_delimiter = ',')]
    pub ash_databases: Vec<String>,
    /// Address ranges HTTP jobs may reach besides the public internet, comma-separated:
    /// loopback, private, link_local, shared, multicast, unspecified, reserved (none unless
    /// given; docs/http-jobs.md).
    #[arg(long, env = "PGFERRY_HTTP_JOBS_ALLOW", value_delimiter = ',')]
    pub http_jobs_allow: Vec<String>,
    /// A PEM file of CA certificates HTTPS destinations of HTTP jobs may present besides the
    /// public web roots (a private CA); read and checked at startup (docs/http-jobs.md).
    #[arg(long, env = "PGFERRY_HTTP_JOBS_CA_BUNDLE")]
    pub http_jobs_ca_bundle: Option<std::path::PathBuf>,
    /// Requests per second to a destination key whose tenant set no rate for it
    /// (0 < rate <= 100000; default: unlimited). See docs/http-jobs.md.
    #[arg(long, env = "PGFERRY_HTTP_JOBS_DEFAULT_RATE")]
    pub http_jobs_default_rate: Option<f64>,
    /// Requests at once to one destination key (host:port, or a job's `group`), across every
    /// batch in flight (1 to 1024, the server's bound on HTTP-job requests at once).
    #[arg(
        long,
        env = "PGFERRY_HTTP_JOBS_PER_DESTINATION",
        default_value_t = u16::try_from(pgferry_http_jobs::worker::WorkerConfig::default().per_destination)
            .expect("a default within the range"),
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub http_jobs_per_destination: u16,
    /// Burst of --http-jobs-default-rate (1 to 100000).
    #[arg(
        long,
        env = "PGFERRY_HTTP_JOBS_DEFAULT_BURST",
        default_value_t = 1,
        requires = "http_jobs_default_rate"
    )]
    pub http_jobs_default_burst: u32,
    /// Schedules: milliseconds before its time that a fire needing no state at that time
    /// (a job target, overlap allow) is written, in a transaction committed at its time
    /// (0: every fire is written after its time). See docs/schedules.md, ADR 0025.
    #[arg(long, env = "PGFERRY_SCHEDULES_PREPARE_AHEAD_MS", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub schedules_prepare_ahead_ms: u64,
}

/// A rate or burst flag: a finite number above 0.
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number above 0")),
    }
}

impl ServerArgs {
    fn http_jobs_allow(&self) -> anyhow::Result<pgferry_http_jobs::Allow> {
        let mut ranges = Vec::new();
        for name in self.http_jobs_allow.iter().filter(|n| !n.is_empty()) {
            ranges.push(pgferry_http_jobs::Range::parse(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "--http-jobs-allow: unknown range {name:?} (loopback, private, link_local, shared, multicast, unspecified, reserved)"
                )
            })?);
        }
        Ok(pgferry_http_jobs::Allow::of(&ranges))
    }

    /// The extra roots of --http-jobs-ca-bundle (none without it).
    fn http_jobs_roots(&self) -> anyhow::Result<Vec<Vec<u8>>> {
        match &self.http_jobs_ca_bundle {
            Some(path) => pgferry_http_jobs::ca_bundle::load(path)
                .map_err(|e| anyhow::anyhow!("--http-jobs-ca-bundle: {e}")),
            None => Ok(Vec::new()),
        }
    }

    /// --http-jobs-default-rate and --http-jobs-default-burst, validated.
    fn http_jobs_default_rate(&self) -> anyhow::Result<Option<pgferry_http_jobs::Rate>> {
        let Some(per_sec) = self.http_jobs_default_rate else {
            return Ok(None);
        };
        let rate = pgferry_http_jobs::Rate {
            per_sec,
            burst: self.http_jobs_default_burst,
        };
        rate.validate().map_err(|(field, reason)| {
            let flag = match field {
                "burst" => "--http-jobs-default-burst",
                _ => "--http-jobs-default-rate",
            };
            anyhow::anyhow!("{flag}: {reason}")
        })?;
        Ok(Some(rate))
    }

    fn server_config(&self) -> pgferry_server::ServerConfig {
        let mut c = pgferry_server::ServerConfig::default();
        c.http.rate_per_sec = self.rate_limit;
        c.http.rate_burst = self.rate_burst;
        c.http.public_rate_per_sec = self.public_rate_limit;
        c.http.public_rate_burst = self.public_rate_burst;
        c.http.max_job_bytes = self.max_job_bytes;
        // Parsed again (with its error) by `serve`.
        c.http.http_jobs_allow = self.http_jobs_allow().unwrap_or_default();
        c.http.max_claim_wait = std::time::Duration::from_millis(self.max_claim_wait_ms);
        c.coalesce.max_rows = self.group_commit_rows as usize;
        c.coalesce.max_wait = std::time::Duration::from_micros(self.group_commit_wait_us);
        c.coalesce.adaptive = self.group_commit_adaptive;
        c.coalesce.lanes = self.group_commit_lanes as usize;
        c.coalesce.gather_wait = std::time::Duration::from_micros(self.group_commit_gather_us);
        c
    }

    /// The schedules firer's settings: the defaults but for --schedules-prepare-ahead-ms.
    fn firer_config(&self) -> pgferry_schedules::FirerConfig {
        pgferry_schedules::FirerConfig {
            prepare_ahead: std::time::Duration::from_millis(self.schedules_prepare_ahead_ms),
            ..Default::default()
        }
    }

    /// The ASH sampler's settings, validated; None when sampling is off.
    fn ash_config(&self) -> anyhow::Result<Option<pgferry_ash::SamplerConfig>> {
        if self.ash_interval_ms == 0 {
            return Ok(None);
        }
        let c = pgferry_ash::SamplerConfig {
            interval: std::time::Duration::from_millis(self.ash_interval_ms),
            databases: (!self.ash_databases.is_empty()).then(|| self.ash_databases.clone()),
            ..Default::default()
        };
        c.validate()?;
        Ok(Some(c))
    }

    /// How often this server publishes what its backends serve; None: never.
    fn ash_publish(&self) -> anyhow::Result<Option<std::time::Duration>> {
        match self.ash_publish_ms.unwrap_or(self.ash_interval_ms) {
            0 => Ok(None),
            ms if ms < 100 => anyhow::bail!("--ash-publish-ms: {ms} ms is under 100 ms"),
            ms => Ok(Some(std::time::Duration::from_millis(ms))),
        }
    }

    fn grpc_config(&self) -> pgferry_server::grpc::GrpcConfig {
        pgferry_server::grpc::GrpcConfig {
            keepalive: std::time::Duration::from_millis(self.grpc_keepalive_ms.max(1)),
            ..Default::default()
        }
    }
}

pub async fn serve_url(url: &str, args: ServerArgs) -> anyhow::Result<()> {
    let stop = shutdown_signal()?;
    let config = db::parse_config(url)?;
    serve(config, args, stop).await
}

/// Serves until `stop` resolves; then stops HTTP, then the leader (releasing its lock).
pub async fn serve(
    config: Config,
    args: ServerArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let ash = args.ash_config()?;
    let ash_publish = args.ash_publish()?;
    // Checked before anything connects: a bad flag stops the server with its error.
    args.http_jobs_allow()?;
    let http_jobs_roots = args.http_jobs_roots()?;
    let http_jobs_default_rate = args.http_jobs_default_rate()?;
    if !args.no_migrate {
        let mut client = db::connect(&config, "migrate")
            .await
            .context("connecting to the database")?;
        let applied = pgferry_server::migrate::up(&mut client).await?;
        if applied != Default::default() {
            tracing::info!(versions = ?applied.versions, functions = ?applied.functions, "schema updated");
        }
    }
    let engine = Engine::new(
        db::Pools::new(&config, "api", args.pool_size),
        EngineConfig::default(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut leader = Leader::new(engine.clone(), config.clone(), LeaderConfig::default());
    if let Some(ash) = ash {
        leader = leader.with_duty(pgferry_ash::sampler::leader_duty(ash));
    }
    // Schedules fire from the leader, exactly once per (schedule, fire time) (ADR 0015).
    leader = leader.with_duty(pgferry_schedules::leader_duty(
        engine.clone(),
        args.firer_config(),
    ));
    // Late monitors and schedules watched as monitors (docs/monitors.md), from the leader.
    leader = leader.with_duty(pgferry_monitors::leader_duty(
        engine.clone(),
        pgferry_monitors::DutyConfig::default(),
    ));
    let rescues = leader.subscribe_rescues();
    // Destinations that start failing or recover notify the tenant's targets (issue 22).
    let http_jobs = tokio::spawn(pgferry_http_jobs::service::run_with_sink(
        engine.clone(),
        pgferry_http_jobs::ExecutorConfig {
            allow: args.http_jobs_allow()?,
            root_certs_pem: http_jobs_roots,
            ..Default::default()
        },
        pgferry_http_jobs::worker::WorkerConfig {
            default_rate: http_jobs_default_rate,
            per_destination: usize::from(args.http_jobs_per_destination),
            ..Default::default()
        },
        pgferry_monitors::http_transitions::NotifyTransitions::new(engine.clone()),
        stop_rx.clone(),
    ));
    // Every server publishes what its backends serve, for the one sampler (docs/ash.md).
    let ash_publisher = ash_publish.map(|every| {
        tokio::spawn(pgferry_ash::publish::run(
            config.clone(),
            every,
            stop_rx.clone(),
        ))
    });
    let leader_task = tokio::spawn(leader.run(stop_rx));
    // Ticks from whichever server leads reach this server's claimers through LISTEN.
    let tick_feed = tokio::spawn(pgferry_core::listen::run_tick_listener(
        engine.clone(),
        config.clone(),
    ));

    let listener = pgferry_server::listen(args.http_addr)
        .with_context(|| format!("binding HTTP on {}", args.http_addr))?;
    let addr = listener.local_addr()?;
    // One machine-readable line; scripts and tests wait for it.
    println!("pgferry: listening http=http://{addr}");
    let state = AppState::new(Arc::clone(&engine), args.server_config())
        .await
        .context("preparing the API")?;
    tokio::spawn(pgferry_server::metrics::feed_rescues(
        state.clone(),
        rescues,
    ));
    let grpc_listener = pgferry_server::listen(args.grpc_addr)
        .with_context(|| format!("binding gRPC on {}", args.grpc_addr))?;
    let grpc_addr = grpc_listener.local_addr()?;
    println!("pgferry: listening grpc=http://{grpc_addr}");
    // One stop signal, two listeners.
    let (front_tx, front_rx) = watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        let _ = front_tx.send(true);
    });
    let until = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // The gRPC state needs the database (the shared token key). `serve` must start, and
    // answer /readyz with "not ready", before the database is reachable or migrated, so the
    // gRPC front comes up in the background once it can; connections made earlier wait in
    // the listener's backlog.
    let grpc = {
        let (state, config, mut stopping) = (state.clone(), args.grpc_config(), front_rx.clone());
        let serve_until = until(front_rx.clone());
        tokio::spawn(async move {
            let grpc_state = loop {
                match pgferry_server::grpc::GrpcState::from_app(&state, config.clone()).await {
                    Ok(s) => break s,
                    Err(e) => tracing::warn!(error = %e, "gRPC API not ready; retrying"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                    _ = stopping.wait_for(|s| *s) => return Ok(()),
                }
            };
            pgferry_server::grpc::serve_grpc(grpc_listener, grpc_state, serve_until).await
        })
    };
    pgferry_server::serve_http(listener, state, until(front_rx)).await?;
    match grpc.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "gRPC server failed"),
        Err(e) => tracing::error!(error = %e, "gRPC server task failed"),
    }
    tracing::info!("HTTP and gRPC stopped; stopping leader");
    let _ = stop_tx.send(true);
    let _ = leader_task.await;
    let _ = http_jobs.await;
    if let Some(p) = ash_publisher {
        let _ = p.await;
    }
    tick_feed.abort();
    Ok(())
}

/// Installs the SIGINT/SIGTERM handlers right away and returns a future that resolves on
/// either (also for a signal that arrived before it is first polled). Call it before any
/// startup work: until the handlers exist a signal kills the process outright, which in
/// `dev` would leave the embedded postgres running.
pub fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutdown requested");
    })
}

#[cfg(test)]
mod tests {
    use super::ServerArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        server: ServerArgs,
    }

    fn parse(args: &[&str]) -> Result<ServerArgs, clap::Error> {
        Args::try_parse_from(std::iter::once("serve").chain(args.iter().copied())).map(|a| a.server)
    }

    #[test]
    fn group_commit_defaults_and_flags() {
        let d = parse(&[]).unwrap().server_config().coalesce;
        assert_eq!(
            (d.max_rows, d.max_wait.as_micros(), d.lanes),
            (1000, 1000, 4)
        );
        let c = parse(&[
            "--group-commit-rows",
            "50",
            "--group-commit-wait-us",
            "0",
            "--group-commit-lanes",
            "8",
            "--group-commit-gather-us",
            "0",
        ])
        .unwrap()
        .server_config()
        .coalesce;
        assert_eq!((c.max_rows, c.max_wait.as_micros(), c.lanes), (50, 0, 8));
        assert!(c.gather_wait.is_zero());
        assert!(d.adaptive);
        let fixed = parse(&["--group-commit-adaptive", "false"]).unwrap();
        assert!(!fixed.server_config().coalesce.adaptive);
        for bad in [
            ["--group-commit-lanes", "0"],
            ["--group-commit-rows", "0"],
            ["--group-commit-rows", "10001"],
            ["--group-commit-wait-us", "1000001"],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn schedules_prepare_ahead_flag_reaches_the_firer_and_is_bounded() {
        let d = parse(&[]).unwrap().firer_config();
        assert_eq!(d.prepare_ahead.as_millis(), 3000);
        assert_eq!(
            d.prepare_ahead,
            pgferry_schedules::FirerConfig::default().prepare_ahead
        );
        let off = parse(&["--schedules-prepare-ahead-ms", "0"]).unwrap();
        assert!(off.firer_config().prepare_ahead.is_zero());
        let e = parse(&["--schedules-prepare-ahead-ms", "60001"])
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("--schedules-prepare-ahead-ms"), "{e}");
    }

    #[test]
    fn public_rate_flags_reach_the_http_config_and_must_be_positive() {
        let d = parse(&[]).unwrap().server_config().http;
        assert_eq!((d.public_rate_per_sec, d.public_rate_burst), (10.0, 60.0));
        let c = parse(&["--public-rate-limit", "0.5", "--public-rate-burst", "3"])
            .unwrap()
            .server_config()
            .http;
        assert_eq!((c.public_rate_per_sec, c.public_rate_burst), (0.5, 3.0));
        for bad in [
            "--public-rate-limit=0",
            "--public-rate-limit=-1",
            "--public-rate-burst=NaN",
        ] {
            let e = parse(&[bad]).err().expect("refused").to_string();
            let flag = bad.split('=').next().unwrap();
            assert!(e.contains(flag) && e.contains("above 0"), "{e}");
        }
    }

    #[test]
    fn http_jobs_per_destination_is_bounded() {
        assert_eq!(parse(&[]).unwrap().http_jobs_per_destination, 64);
        let a = parse(&["--http-jobs-per-destination", "200"]).unwrap();
        assert_eq!(a.http_jobs_per_destination, 200);
        for bad in ["0", "1025", "many"] {
            let e = parse(&["--http-jobs-per-destination", bad])
                .err()
                .expect("refused")
                .to_string();
            assert!(e.contains("--http-jobs-per-destination"), "{e}");
        }
    }

    #[test]
    fn http_jobs_default_rate_is_validated_with_its_flag_named() {
        assert_eq!(parse(&[]).unwrap().http_jobs_default_rate().unwrap(), None);
        let r = parse(&[
            "--http-jobs-default-rate",
            "50",
            "--http-jobs-default-burst",
            "5",
        ])
        .unwrap()
        .http_jobs_default_rate()
        .unwrap()
        .unwrap();
        assert_eq!((r.per_sec, r.burst), (50.0, 5));
        let e = parse(&["--http-jobs-default-rate", "0"])
            .unwrap()
            .http_jobs_default_rate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--http-jobs-default-rate: "), "{e}");
        let e = parse(&[
            "--http-jobs-default-rate",
            "5",
            "--http-jobs-default-burst",
            "0",
        ])
        .unwrap()
        .http_jobs_default_rate()
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--http-jobs-default-burst: "), "{e}");
        // A burst without a rate is refused by the parser.
        assert!(parse(&["--http-jobs-default-burst", "5"]).is_err());
    }

    #[test]
    fn a_missing_ca_bundle_names_the_flag_and_the_file() {
        assert!(parse(&[]).unwrap().http_jobs_roots().unwrap().is_empty());
        let e = parse(&["--http-jobs-ca-bundle", "/nonexistent/roots.pem"])
            .unwrap()
            .http_jobs_roots()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--http-jobs-ca-bundle: ") && e.contains("/nonexistent/roots.pem"),
            "{e}"
        );
    }
}
