//! Retention of ended instances: the leader removes instances that ended longer ago than
//! `LeaderConfig::workflow_retention`, a batch per statement through the partial index on
//! `finished_at` of ended instances, with their signals and step history. Never on the hot
//! path; a batch that found a full batch goes again at once.

use tokio_postgres::{Client, Config};

use crate::error::Result;
use crate::leader::{duty_loop, LeaderConfig};

const PRUNE: &str = include_str!("../sql/workflow/prune.sql");

/// Removes up to `batch` ended instances older than the retention; returns how many.
pub async fn prune(client: &Client, retention: std::time::Duration, batch: i32) -> Result<i64> {
    let stmt = client.prepare(PRUNE).await?;
    let row = client
        .query_one(&stmt, &[&retention.as_secs_f64(), &batch])
        .await?;
    Ok(row.try_get("removed")?)
}

pub async fn run(pg: Config, config: LeaderConfig) {
    let (retention, batch) = (config.workflow_retention, config.prune_batch as i32);
    duty_loop(
        pg,
        "workflow-retention",
        config.prune_interval,
        move |client| async move {
            let r = prune(&client, retention, batch)
                .await
                .map(|n| n >= i64::from(batch));
            (client, r)
        },
    )
    .await
}
