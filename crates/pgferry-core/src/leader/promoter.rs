//! Promoter: moves due scheduled jobs into the ready log in batches (one statement each).

use tokio_postgres::{Client, Config};

use super::{duty_loop, LeaderConfig};
use crate::error::Result;

const PROMOTE: &str = include_str!("../sql/promote.sql");

/// Promotes up to `batch` due jobs; returns how many.
pub async fn promote(client: &Client, batch: i64) -> Result<u64> {
    let stmt = client.prepare(PROMOTE).await?;
    Ok(client.execute(&stmt, &[&batch]).await?)
}

pub async fn run(pg: Config, config: LeaderConfig) {
    let batch = config.promote_batch;
    duty_loop(
        pg,
        "promoter",
        config.promote_interval,
        move |client| async move {
            let r = promote(&client, batch).await.map(|n| n as i64 >= batch);
            (client, r)
        },
    )
    .await
}
