//! `pgferry dev`: a private Postgres under `<data-dir>/pg`, migrated, served. Ctrl-C stops
//! the server first and then the cluster, so nothing is left running.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use pgferry_pgcluster::{Cluster, ClusterOptions};
use tokio_postgres::{Config, NoTls};

use crate::run::{self, ServerArgs};

/// Database pgferry uses inside the private cluster.
const DEV_DB: &str = "pgferry";

pub async fn run(data_dir: PathBuf, args: ServerArgs) -> anyhow::Result<()> {
    // First, so that Ctrl-C during startup cannot kill us with the cluster running: a
    // signal that arrives early stops the server as soon as it serves, then the cluster.
    let stop = run::shutdown_signal()?;
    let data_dir = std::path::absolute(&data_dir).context("resolving --data-dir")?;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let opts = ClusterOptions::new(data_dir.join("pg"));
    // Starting spawns and waits on processes: keep it off the async workers.
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(opts)).await??;
    let result = serve_on(&cluster, &data_dir, args, stop).await;
    tracing::info!("stopping embedded postgres");
    let stopped = tokio::task::spawn_blocking(move || cluster.stop()).await?;
    result?;
    stopped?;
    println!("pgferry: stopped");
    Ok(())
}

async fn serve_on(
    cluster: &Cluster,
    data_dir: &std::path::Path,
    args: ServerArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    ensure_database(cluster).await?;
    let config = Config::from_str(&cluster.conn_string(DEV_DB))?;
    println!(
        "pgferry: embedded postgres {} (data in {})",
        cluster.url(DEV_DB),
        cluster.data_dir().display()
    );
    print_dev_key(&config, data_dir).await?;
    run::serve(config, args, stop).await
}

/// Migrates (so the tenancy tables exist), ensures the `dev` tenant and its admin key, and
/// prints the key on one machine-readable line before the server starts listening.
async fn print_dev_key(config: &Config, data_dir: &std::path::Path) -> anyhow::Result<()> {
    let mut client = pgferry_core::db::connect(config, "migrate")
        .await
        .context("connecting to embedded postgres")?;
    pgferry_server::migrate::up(&mut client).await?;
    let key = crate::tenant_cmd::ensure_dev_key(&mut client, data_dir).await?;
    println!("pgferry: dev api key={key}");
    Ok(())
}

/// Creates the dev database on first start; a restart reuses it.
async fn ensure_database(cluster: &Cluster) -> anyhow::Result<()> {
    let admin = Config::from_str(&cluster.conn_string("postgres"))?;
    let (client, conn) = admin
        .connect(NoTls)
        .await
        .context("connecting to embedded postgres")?;
    tokio::spawn(conn);
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&DEV_DB])
        .await?
        .is_some();
    if !exists {
        // DEV_DB is a constant identifier.
        client
            .batch_execute(&format!("CREATE DATABASE {DEV_DB}"))
            .await?;
    }
    Ok(())
}
