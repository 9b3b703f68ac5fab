//! Tick feed for processes that are not the leader: LISTEN to the one NOTIFY per tick and
//! publish it to the engine's tick watch, so their claimers wake within milliseconds of a
//! tick instead of polling. (The leader's own process is fed in-process by its ticker.)
//! The same connection hears cancellations, so servers can tell the worker holding the job,
//! and segment advances, so enqueues COPY into the new segment at once (ids.rs).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, Config, NoTls};

use crate::engine::Engine;
use crate::error::Result;

/// The channel the ticker notifies (tick.sql).
pub const TICK_CHANNEL: &str = "pgferry_tick";
/// The channel a cancellation notifies (cancel.sql); the payload is the job id.
pub const CANCEL_CHANNEL: &str = "pgferry_cancel";
/// The channel a workflow cancel notifies (wf_cancel); the payload is the instance id.
pub const WF_CANCEL_CHANNEL: &str = "pgferry_wf_cancel";
/// The channel the rotator notifies when a new segment becomes current (advance_segment.sql);
/// the payload is the segment. Enqueues COPY into it (ids.rs).
pub const SEGMENT_CHANNEL: &str = "pgferry_segment";

/// Runs forever: listens, publishes ticks, reconnects after a second when the connection
/// drops. Spawn it once per process.
pub async fn run_tick_listener(engine: Arc<Engine>, pg: Config) {
    loop {
        if let Err(e) = listen_once(&engine, &pg).await {
            tracing::warn!(error = %e, "tick listener disconnected");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn listen_once(engine: &Engine, pg: &Config) -> Result<()> {
    let cfg = crate::db::session_config(pg, "listener");
    let (client, mut conn) = cfg.connect(NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The connection must be polled for notifications to arrive; forward them.
    let pump = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(msg) = messages.next().await {
            match msg {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx
                        .send((n.channel().to_string(), n.payload().to_string()))
                        .is_err()
                    {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    client
        .batch_execute(&format!(
            "LISTEN {TICK_CHANNEL}; LISTEN {CANCEL_CHANNEL}; LISTEN {SEGMENT_CHANNEL}; \
             LISTEN {WF_CANCEL_CHANNEL}"
        ))
        .await?;
    while let Some((channel, payload)) = rx.recv().await {
        let Ok(n) = payload.parse::<i64>() else {
            continue;
        };
        match channel.as_str() {
            CANCEL_CHANNEL => engine.publish_cancel(n),
            WF_CANCEL_CHANNEL => engine.publish_wf_cancel(n),
            SEGMENT_CHANNEL => {
                if let Ok(segment) = i16::try_from(n) {
                    engine.observe_segment(segment);
                }
            }
            _ => engine.publish_tick(n),
        }
    }
    drop(client);
    pump.await
        .map_err(|e| crate::error::Error::InvalidArgument {
            field: "listener",
            reason: e.to_string(),
        })??;
    Ok(())
}
