//! What a process hears and tells about the log, in memory: the latest tick (claimers wait
//! on it instead of polling), cancellation requests of jobs and workflow instances (servers
//! tell the worker holding one), and "the log grew" (the ticker's early wake-up, growth.rs).
//! Fed by the in-process ticker and the LISTEN task (listen.rs); one per engine
//! ([`crate::Engine::signals`]), apart from the engine's database work.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};

use crate::growth::LogGrowth;

pub struct Signals {
    /// Latest tick id known to this process.
    ticks: watch::Sender<i64>,
    /// Job ids whose cancellation was requested (from LISTEN pgferry_cancel).
    cancels: broadcast::Sender<i64>,
    /// Workflow instance ids cancelled (from LISTEN pgferry_wf_cancel).
    wf_cancels: broadcast::Sender<i64>,
    /// Queues where a workflow step became runnable by a signal (from LISTEN
    /// pgferry_wf_ready): idle workflow workers claim at once instead of polling.
    wf_ready: broadcast::Sender<String>,
    /// Signalled after each enqueue: an in-process ticker ticks without waiting, and a
    /// process that does not lead tells the leader (growth.rs).
    growth: LogGrowth,
    /// Claimers of this process waiting for a tick after an empty claim: while there are
    /// some, the ticker ticks as soon as the log grows instead of after its pacing interval
    /// (tick on demand, issue 21; leader/ticker.rs).
    waiting: AtomicUsize,
    /// Notified when a claimer starts waiting.
    hunger: Notify,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            ticks: watch::Sender::new(0),
            cancels: broadcast::Sender::new(1024),
            wf_cancels: broadcast::Sender::new(1024),
            wf_ready: broadcast::Sender::new(1024),
            growth: LogGrowth::default(),
            waiting: AtomicUsize::new(0),
            hunger: Notify::new(),
        }
    }
}

impl Signals {
    /// Waits until a tick newer than `seen` is known, or `timeout` passes; returns the latest
    /// tick id. Claimers call this between empty claims instead of polling.
    pub async fn wait_for_tick(&self, seen: i64, timeout: Duration) -> i64 {
        let _waiting = self.waiting_for_tick();
        let mut rx = self.ticks.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|t| *t > seen)).await;
        let latest = *rx.borrow();
        latest
    }

    /// Marks a claimer of this process as waiting for the next tick (its claim came back
    /// empty) for as long as the guard lives: the ticker then ticks as soon as the log grows.
    pub fn waiting_for_tick(&self) -> WaitingForTick<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.hunger.notify_one();
        WaitingForTick(self)
    }

    /// Whether a claimer of this process waits for a tick.
    pub fn claimers_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// Notified when a claimer starts waiting for a tick (the ticker's pause listens).
    pub(crate) fn hunger(&self) -> &Notify {
        &self.hunger
    }

    /// The latest tick id this process has heard of.
    pub fn latest_tick(&self) -> i64 {
        *self.ticks.borrow()
    }

    pub fn subscribe_ticks(&self) -> watch::Receiver<i64> {
        self.ticks.subscribe()
    }

    /// Called by the in-process ticker or a LISTEN task when a tick is seen.
    pub fn publish_tick(&self, tick_id: i64) {
        self.ticks.send_if_modified(|cur| {
            if tick_id > *cur {
                *cur = tick_id;
                true
            } else {
                false
            }
        });
    }

    /// Cancellation requests, as job ids, for servers to tell the worker holding the job.
    /// A lagging receiver misses some; heartbeats (`Beat::cancelled`) catch those.
    pub fn subscribe_cancels(&self) -> broadcast::Receiver<i64> {
        self.cancels.subscribe()
    }

    pub fn publish_cancel(&self, job_id: i64) {
        let _ = self.cancels.send(job_id);
    }

    /// Cancelled workflow instances, as ids, for servers to tell the worker running a step
    /// of one. A lagging receiver misses some; step heartbeats report those.
    pub fn subscribe_wf_cancels(&self) -> broadcast::Receiver<i64> {
        self.wf_cancels.subscribe()
    }

    pub fn publish_wf_cancel(&self, instance_id: i64) {
        let _ = self.wf_cancels.send(instance_id);
    }

    /// The sender of "a workflow step became runnable in this queue" (a clone: workflow
    /// workers subscribe to it, the LISTEN task sends on it).
    pub fn wf_ready(&self) -> broadcast::Sender<String> {
        self.wf_ready.clone()
    }

    /// Notified when this process appended to the log (the ticker's early wake-up).
    pub fn log_grew(&self) -> Arc<Notify> {
        self.growth.here.clone()
    }

    /// The ticker's wake-up signals (growth.rs).
    pub fn growth(&self) -> &LogGrowth {
        &self.growth
    }
}

/// A claimer waiting for a tick ([`Signals::waiting_for_tick`]).
#[must_use]
pub struct WaitingForTick<'a>(&'a Signals);

impl Drop for WaitingForTick<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}
