//! Promoter: moves due scheduled jobs into the ready log in batches (one statement each).

use std::time::Duration;

use tokio_postgres::Client;

use super::duty::{Duty, DutyFuture, Next};
use super::LeaderConfig;
use crate::error::Result;

const PROMOTE: &str = include_str!("../sql/promote.sql");

/// Promotes up to `batch` due jobs; returns how many.
pub async fn promote(client: &Client, batch: i64) -> Result<u64> {
    let stmt = client.prepare(PROMOTE).await?;
    Ok(client.execute(&stmt, &[&batch]).await?)
}

/// The promoter duty.
pub struct Promoter {
    pub batch: i64,
    pub every: Duration,
}

impl Promoter {
    pub fn new(config: &LeaderConfig) -> Promoter {
        Promoter {
            batch: config.promote_batch,
            every: config.promote_interval,
        }
    }
}

impl Duty for Promoter {
    fn name(&self) -> &'static str {
        "promoter"
    }

    fn interval(&self) -> Duration {
        self.every
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            let n = promote(client, self.batch).await?;
            Ok(if n as i64 >= self.batch {
                Next::Now
            } else {
                Next::Idle
            })
        })
    }
}
