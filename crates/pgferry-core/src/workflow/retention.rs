//! Retention of ended instances: the leader removes instances that ended longer ago than
//! their queue's retention ([`Workflows::set_retention`]), else
//! `LeaderConfig::workflow_retention`, a batch per statement through the partial index on
//! (queue, `finished_at`) of ended instances, with their signals and step history. Never
//! on the hot path (the outcomes write no retention rows; the index is entered at the
//! terminal transition, which is never a HOT update anyway); a batch that found a full
//! batch goes again at once.

use tokio_postgres::Client;

use crate::error::Result;
use crate::leader::duty::{Duty, DutyFuture, Next};
use crate::leader::LeaderConfig;

const PRUNE: &str = include_str!("../sql/workflow/prune.sql");
const SET_RETENTION: &str = include_str!("../sql/workflow/set_retention.sql");
const CLEAR_RETENTION: &str = include_str!("../sql/workflow/clear_retention.sql");
const GET_RETENTION: &str = include_str!("../sql/workflow/get_retention.sql");

impl super::Workflows {
    /// Ended instances of `queue` are removed `retention` after they ended (`None`: the
    /// leader's default, `LeaderConfig::workflow_retention`). One statement.
    pub async fn set_retention(
        &self,
        queue: &str,
        retention: Option<std::time::Duration>,
    ) -> Result<()> {
        crate::job::validate_queue_name(queue)?;
        let client = self.pool().get().await?;
        match retention {
            Some(r) => {
                client
                    .execute(SET_RETENTION, &[&queue, &r.as_secs_f64()])
                    .await?
            }
            None => client.execute(CLEAR_RETENTION, &[&queue]).await?,
        };
        Ok(())
    }

    /// The retention [`Workflows::set_retention`](super::Workflows::set_retention) gave
    /// `queue` (`None`: the leader's default). One statement.
    pub async fn retention(&self, queue: &str) -> Result<Option<std::time::Duration>> {
        crate::job::validate_queue_name(queue)?;
        let client = self.pool().get().await?;
        let row = client.query_opt(GET_RETENTION, &[&queue]).await?;
        Ok(match row {
            Some(r) => Some(std::time::Duration::from_secs_f64(r.try_get("secs")?)),
            None => None,
        })
    }
}

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
