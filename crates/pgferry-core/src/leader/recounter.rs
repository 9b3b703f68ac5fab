//! Recounter: repairs drifted queue counters, one lane per step, in lane order, round and
//! round (see counters.rs). A lane written to while its truth was read is skipped this
//! round; the cost of a step is bounded by what is live in the lane (counters_truth.sql).

use std::sync::Arc;

use tokio_postgres::{Client, Config};

use super::{duty_loop, LeaderConfig};
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

pub async fn run(engine: Arc<Engine>, pg: Config, config: LeaderConfig) {
    let last = Arc::new(std::sync::atomic::AtomicI32::new(0));
    duty_loop(pg, "recounter", config.recount_interval, move |client| {
        let engine = engine.clone();
        let last = last.clone();
        async move {
            let after = last.load(std::sync::atomic::Ordering::Relaxed);
            let r = step(&engine, &client, after).await.map(|lane| {
                if let Some(l) = lane {
                    last.store(l, std::sync::atomic::Ordering::Relaxed);
                }
                false
            });
            (client, r)
        }
    })
    .await
}
