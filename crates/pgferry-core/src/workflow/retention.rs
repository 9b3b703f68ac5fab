//! Retention of ended instances: the leader removes instances that ended longer ago than
//! `LeaderConfig::workflow_retention`, a batch per statement through the partial index on
//! `finished_at` of ended instances, with their signals and step history. Never on the hot
//! path; a batch that found a full batch goes again at once.

use tokio_postgres::Client;

use crate::error::Result;
use crate::leader::duty::{Duty, DutyFuture, Next};
use crate::leader::LeaderConfig;

const PRUNE: &str = include_str!("../sql/workflow/prune.sql");

/// Removes up to `batch` ended instances older than the retention; returns how many.
pub async fn prune(client: &Client, retention: std::time::Duration, batch: i32) -> Result<i64> {
    let stmt = client.prepare(PRUNE).await?;
    let row = client
        .query_one(&stmt, &[&retention.as_secs_f64(), &batch])
        .await?;
    Ok(row.try_get("removed")?)
}

/// The workflow retention duty.
pub struct Retention {
    pub retention: std::time::Duration,
    pub batch: i32,
    pub every: std::time::Duration,
}

impl Retention {
    pub fn new(config: &LeaderConfig) -> Retention {
        Retention {
            retention: config.workflow_retention,
            batch: config.prune_batch as i32,
            every: config.prune_interval,
        }
    }
}

impl Duty for Retention {
    fn name(&self) -> &'static str {
        "workflow-retention"
    }

    fn interval(&self) -> std::time::Duration {
        self.every
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            let n = prune(client, self.retention, self.batch).await?;
            Ok(if n >= i64::from(self.batch) {
                Next::Now
            } else {
                Next::Idle
            })
        })
    }
}
