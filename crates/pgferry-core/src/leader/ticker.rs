//! Ticker: records visibility ticks and wakes claimers (architecture.md §3.1).
//!
//! The ticker commits asynchronously: a tick lost in a crash is harmless, because any receipt
//! that used it was committed later in the WAL and so flushed it too.

use std::sync::Arc;

use tokio_postgres::{Client, Config};

use super::{connect, LeaderConfig};
use crate::engine::Engine;
use crate::error::Result;

const TICK: &str = include_str!("../sql/tick.sql");

/// Writes a tick if the log may have changed; returns its id.
pub async fn tick(client: &Client) -> Result<Option<i64>> {
    let stmt = client.prepare(TICK).await?;
    Ok(client
        .query_opt(&stmt, &[])
        .await?
        .map(|r| r.get("tick_id")))
}

pub async fn run(engine: Arc<Engine>, pg: Config, config: LeaderConfig) {
    loop {
        let client = match connect(&pg, "ticker").await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "ticker cannot connect");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = tick_loop(&engine, &client, &config).await {
            tracing::warn!(error = %e, "ticker failed");
        }
        tokio::time::sleep(config.idle_tick_interval).await;
    }
}

async fn tick_loop(engine: &Engine, client: &Client, config: &LeaderConfig) -> Result<()> {
    // enable_seqscan off: the latest-tick probe must use ticks_id even when a freshly
    // reused segment's statistics say it is empty.
    client
        .batch_execute("SET synchronous_commit = off; SET enable_seqscan = off")
        .await?;
    let stmt = client.prepare(TICK).await?;
    let grew = engine.log_grew();
    loop {
        match client
            .query_opt(&stmt, &[])
            .await?
            .map(|r| r.get::<_, i64>("tick_id"))
        {
            Some(id) => {
                engine.publish_tick(id);
                tokio::time::sleep(config.tick_interval).await;
            }
            None => {
                // Idle: wake early when this process enqueued something.
                let _ = tokio::time::timeout(config.idle_tick_interval, grew.notified()).await;
            }
        }
    }
}
