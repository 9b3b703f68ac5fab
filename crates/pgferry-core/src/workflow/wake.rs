//! Waking idle workers: a signal delivered to an awaiting instance NOTIFYs
//! `pgferry_wf_ready` with the instance's queue (wf_signal.sql). A process with an engine
//! hears it on the engine's LISTEN task (listen.rs → `Signals::wf_ready`); a process with
//! only a pool runs [`Workflows::listen_ready`]. An idle [`super::Worker`] of that queue then
//! claims at once instead of at its next poll, so it can poll rarely (ADR 0016).
//!
//! One announcement wakes **one** idle worker of the queue ([`Wakers`], ADR 0018): it
//! announces one runnable step, and waking every worker made all but one of them run an
//! empty claim. Under a stream of signals that herd was most of the database's work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, Config, NoTls};

use tokio::sync::Notify;

use super::client::Workflows;
use crate::listen::WF_READY_CHANNEL;

/// Per queue, the idle workers of this `Workflows` (and its clones) waiting to be woken.
/// A relay task (started with the first worker) turns each announcement of a queue into
/// one `notify_one`: one waiting worker wakes, or, if none waits (all are claiming or
/// running steps), the next one to pause claims at once.
#[derive(Default)]
pub struct Wakers {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
    relay: std::sync::OnceLock<()>,
}

impl Workflows {
    /// The waker of `queue`'s idle workers; starts the relay on first use.
    pub(crate) fn waker(&self, queue: &str) -> Arc<Notify> {
        let w = &self.wakers;
        w.relay.get_or_init(|| {
            let rx = self.subscribe_ready();
            tokio::spawn(relay(rx, Arc::downgrade(w)));
        });
        let mut queues = w.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.entry(queue.to_string()).or_default().clone()
    }
}

/// Ends when the announcements end or every clone of the `Workflows` is gone.
async fn relay(mut rx: broadcast::Receiver<String>, wakers: Weak<Wakers>) {
    loop {
        let q = rx.recv().await;
        let Some(w) = wakers.upgrade() else { return };
        let queues = w.queues.lock().unwrap_or_else(|e| e.into_inner());
        match q {
            Ok(q) => {
                if let Some(n) = queues.get(&q) {
                    n.notify_one();
                }
            }
            // Missed announcements may have been for any queue: one worker of each claims.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                queues.values().for_each(|n| n.notify_one());
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

impl Workflows {
    /// Listens to `pgferry_wf_ready` on its own connection and wakes this `Workflows`'
    /// idle workers; reconnects after a second when the connection drops. Only for a
    /// `Workflows` built on a bare pool: [`Workflows::of`] an engine shares the engine's
    /// LISTEN task, which does this already.
    pub fn listen_ready(&self, pg: Config) -> tokio::task::JoinHandle<()> {
        let ready = self.ready_sender();
        tokio::spawn(async move {
            loop {
                if let Err(e) = listen_once(&ready, &pg).await {
                    tracing::warn!(error = %e, "workflow ready listener disconnected");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }
}

async fn listen_once(ready: &broadcast::Sender<String>, pg: &Config) -> crate::Result<()> {
    let cfg = crate::db::session_config(pg, "wf-listener");
    let (client, mut conn) = cfg.connect(NoTls).await?;
    let ready = ready.clone();
    let pump = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(msg) = messages.next().await {
            match msg {
                Ok(AsyncMessage::Notification(n)) if n.channel() == WF_READY_CHANNEL => {
                    let _ = ready.send(n.payload().to_string());
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    client
        .batch_execute(&format!("LISTEN {WF_READY_CHANNEL}"))
        .await?;
    // Held until the connection ends (the pump returns).
    let ended = pump.await;
    drop(client);
    match ended {
        Ok(r) => Ok(r?),
        Err(e) => Err(crate::error::Error::InvalidArgument {
            field: "listener",
            reason: e.to_string(),
        }),
    }
}
