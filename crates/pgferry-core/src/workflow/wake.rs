//! Waking idle workers: a signal delivered to an awaiting instance NOTIFYs
//! `pgferry_wf_ready` with the instance's queue (wf_signal.sql). A process with an engine
//! hears it on the engine's LISTEN task (listen.rs → `Signals::wf_ready`); a process with
//! only a pool runs [`Workflows::listen_ready`]. An idle [`super::Worker`] of that queue then
//! claims at once instead of at its next poll, so it can poll rarely (ADR 0016).

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, Config, NoTls};

use super::client::Workflows;
use crate::listen::WF_READY_CHANNEL;

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

/// Waits until a step of `queue` is announced ready (or announcements were missed: a lagged
/// receiver wakes too, since one of the missed ones may have been for `queue`).
pub(crate) async fn woken(rx: &mut broadcast::Receiver<String>, queue: &str) {
    loop {
        match rx.recv().await {
            Ok(q) if q == queue => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}
