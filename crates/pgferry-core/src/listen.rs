//! Tick feed for processes that are not the leader: LISTEN to the one NOTIFY per tick and
//! publish it to the engine's tick watch, so their claimers wake within milliseconds of a
//! tick instead of polling. (The leader's own process is fed in-process by its ticker.)
//! The same connection hears cancellations, so servers can tell the worker holding the job,
//! and segment advances, so enqueues COPY into the new segment at once (ids.rs).
//!
//! It also carries "the log grew" between processes (growth.rs): in a process that does not
//! lead, an enqueue makes it NOTIFY `pgferry_grew` unless a tick heard soon after shows the
//! ticker busy; in the leader's process, hearing that NOTIFY wakes the idle ticker.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
/// The channel a process that does not lead notifies after it appended to the log while the
/// ticker may be idle (nudge_ticker.sql); no payload.
pub const GREW_CHANNEL: &str = "pgferry_grew";
/// The channel a signal delivered to an awaiting workflow instance notifies (wf_signal); the
/// payload is the instance's queue. Idle workflow workers of that queue claim at once.
pub const WF_READY_CHANNEL: &str = "pgferry_wf_ready";

const NUDGE_TICKER: &str = include_str!("sql/nudge_ticker.sql");

/// After a tick is heard the ticker checks again within its `tick_interval` (2 ms by
/// default): growth within this long after a tick needs no nudge if another tick follows.
const NUDGE_QUIET: Duration = Duration::from_millis(3);
/// At most one nudge per this long from one process (each is a tiny transaction).
const NUDGE_GAP: Duration = Duration::from_millis(2);

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
             LISTEN {WF_CANCEL_CHANNEL}; LISTEN {GREW_CHANNEL}; LISTEN {WF_READY_CHANNEL}"
        ))
        .await?;
    let growth = engine.signals().growth();
    let mut nudge = Nudge::default();
    loop {
        let due = nudge.due();
        tokio::select! {
            msg = rx.recv() => {
                let Some((channel, payload)) = msg else { break };
                if channel == GREW_CHANNEL {
                    growth.heard_elsewhere();
                    continue;
                }
                if channel == WF_READY_CHANNEL {
                    let _ = engine.signals().wf_ready().send(payload);
                    continue;
                }
                let Ok(n) = payload.parse::<i64>() else {
                    continue;
                };
                match channel.as_str() {
                    CANCEL_CHANNEL => engine.signals().publish_cancel(n),
                    WF_CANCEL_CHANNEL => engine.signals().publish_wf_cancel(n),
                    SEGMENT_CHANNEL => {
                        if let Ok(segment) = i16::try_from(n) {
                            engine.observe_segment(segment);
                        }
                    }
                    _ => {
                        engine.signals().publish_tick(n);
                        nudge.tick_heard();
                    }
                }
            }
            _ = growth.nudge.notified() => {
                if !growth.ticking() {
                    nudge.grew();
                }
            }
            _ = sleep_until(due), if due.is_some() => {
                if !growth.ticking() {
                    client.execute(NUDGE_TICKER, &[]).await?;
                }
                nudge.sent();
            }
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

/// When this process owes the leader a nudge (growth.rs).
#[derive(Debug, Default)]
struct Nudge {
    /// The first growth not yet followed by a tick heard.
    pending: Option<Instant>,
    last_tick: Option<Instant>,
    last_sent: Option<Instant>,
}

impl Nudge {
    fn grew(&mut self) {
        self.pending.get_or_insert_with(Instant::now);
    }

    /// A tick heard at least [`NUDGE_QUIET`] after the growth was written after it (unless
    /// NOTIFY took that long), so its snapshot or the ticker's next check, one tick
    /// interval later, sees the growth: no nudge. A tick heard sooner may predate the
    /// growth and the ticker may have gone idle since: the nudge stays owed.
    fn tick_heard(&mut self) {
        let now = Instant::now();
        self.last_tick = Some(now);
        if self.pending.is_some_and(|g| now >= g + NUDGE_QUIET) {
            self.pending = None;
        }
    }

    fn sent(&mut self) {
        self.last_sent = Some(Instant::now());
        self.pending = None;
    }

    /// When to send the nudge owed, if one is: at once when the ticker has been quiet,
    /// else when [`NUDGE_QUIET`] after the last tick passed without another tick.
    fn due(&self) -> Option<Instant> {
        let grew = self.pending?;
        let quiet = self.last_tick.map_or(grew, |t| t + NUDGE_QUIET);
        let gap = self.last_sent.map_or(grew, |t| t + NUDGE_GAP);
        Some(grew.max(quiet).max(gap))
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}
