//! Recounter: repairs drifted queue counters, one lane per step, in lane order, round and
//! round (see counters.rs). A lane written to while its truth was read is skipped this
//! round; the cost of a step is bounded by what is live in the lane (counters_truth.sql).

use std::sync::Arc;

use std::time::Duration;

use tokio_postgres::Client;

use super::duty::{Duty, DutyFuture, Next};
use super::LeaderConfig;
use crate::counters::{recount_lane, LaneRecount};
use crate::engine::Engine;
use crate::error::Result;

const NEXT_LANE: &str = "SELECT lane FROM pgferry.lanes WHERE lane > $1 ORDER BY lane LIMIT 1";

/// Recounts the lane after `after` (or the first lane); returns the lane recounted.
pub async fn step(engine: &Engine, client: &Client, after: i32) -> Result<Option<i32>> {
    let mut lane: Option<i32> = client
        .query_opt(NEXT_LANE, &[&after])
        .await?
        .map(|r| r.get("lane"));
    if lane.is_none() && after > 0 {
        lane = client
            .query_opt(NEXT_LANE, &[&0i32])
            .await?
            .map(|r| r.get("lane"));
    }
    let Some(lane) = lane else { return Ok(None) };
    let settle = engine.config().counter_flush * 2;
    if let LaneRecount::Stored { drifted: true } = recount_lane(client, lane, false, settle).await?
    {
        tracing::info!(lane, "recount repaired drifted queue counters");
    }
    Ok(Some(lane))
}

/// The recounter duty: one lane per pass, round and round.
pub struct Recounter {
    pub engine: Arc<Engine>,
    pub every: Duration,
    /// The lane recounted last.
    pub last: i32,
}

impl Recounter {
    pub fn new(engine: Arc<Engine>, config: &LeaderConfig) -> Recounter {
        Recounter {
            engine,
            every: config.recount_interval,
            last: 0,
        }
    }
}

impl Duty for Recounter {
    fn name(&self) -> &'static str {
        "recounter"
    }

    fn interval(&self) -> Duration {
        self.every
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            if let Some(l) = step(&self.engine, client, self.last).await? {
                self.last = l;
            }
            Ok(Next::Idle)
        })
    }
}
