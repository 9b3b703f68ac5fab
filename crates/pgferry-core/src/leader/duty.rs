//! The one shape every leader duty has (issue 18), after River's maintenance services and
//! Oban's plugins: a small type with its validated settings, a [`Duty::run_once`] that does
//! one pass on a connection it is given (tests call it directly), and a loop that is the
//! same for every duty — connect, run passes, pause, reconnect after errors — with a tracing
//! span, per-duty counters and a test hook to run a pass now ([`DutyHandle::trigger`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_postgres::{Client, Config};
use tracing::Instrument;

use super::connect;
use crate::error::Result;

/// A future a duty returns, borrowing the duty and its connection.
pub type DutyFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// What to do after a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// More is waiting: run again at once.
    Now,
    /// Run again after this pause.
    After(Duration),
    /// Nothing was waiting: wait for [`Duty::idle`] (the duty's interval by default).
    Idle,
}

/// One background duty of the leader.
pub trait Duty: Send + Sync + 'static {
    /// The duty's name: its connections' application name, its tracing span and its metrics
    /// label.
    fn name(&self) -> &'static str;

    /// Session settings after each (re)connect.
    fn prepare<'a>(&'a mut self, _client: &'a Client) -> DutyFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    /// One pass.
    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next>;

    /// The pause after a pass that found nothing to do (and after a failed pass).
    fn interval(&self) -> Duration;

    /// The pause a pass asked for with [`Next::After`]; the default sleeps it. A duty may
    /// end it early on its own signal (the ticker, when claimers wait and the log grew).
    fn pause(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(d))
    }

    /// Waits while idle; the default sleeps [`Duty::interval`]. A duty may wake earlier on
    /// its own signal (the ticker, when this process enqueued something).
    fn idle(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(self.interval()))
    }
}

/// Counters of one duty, readable at any time (`/metrics`, tests).
#[derive(Debug, Default)]
pub struct DutyStats {
    pub passes: AtomicU64,
    pub failures: AtomicU64,
    /// Microseconds spent in passes, in all.
    pub busy_us: AtomicU64,
}

/// A point-in-time copy of [`DutyStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DutySnapshot {
    pub passes: u64,
    pub failures: u64,
    pub busy_us: u64,
}

impl DutyStats {
    pub fn snapshot(&self) -> DutySnapshot {
        DutySnapshot {
            passes: self.passes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            busy_us: self.busy_us.load(Ordering::Relaxed),
        }
    }
}

/// The handle of a duty: its counters and its "run a pass now" signal.
#[derive(Debug, Default, Clone)]
pub struct DutyHandle {
    pub stats: Arc<DutyStats>,
    wake: Arc<Notify>,
}

impl DutyHandle {
    /// Ends the duty's current pause: the next pass starts now (tests, operators).
    pub fn trigger(&self) {
        self.wake.notify_one();
    }
}

/// The handles of a leader's duties, by name; the same handles across leadership terms.
#[derive(Debug, Default, Clone)]
pub struct Duties {
    handles: Arc<Mutex<BTreeMap<&'static str, DutyHandle>>>,
}

impl Duties {
    /// The handle of duty `name` (created on first use).
    pub fn handle(&self, name: &'static str) -> DutyHandle {
        self.handles
            .lock()
            .expect("duties")
            .entry(name)
            .or_default()
            .clone()
    }

    /// Every duty's counters, by name.
    pub fn snapshot(&self) -> Vec<(&'static str, DutySnapshot)> {
        self.handles
            .lock()
            .expect("duties")
            .iter()
            .map(|(n, h)| (*n, h.stats.snapshot()))
            .collect()
    }
}

/// Runs `duty` forever: connect, prepare, passes with pauses, reconnect after a lost
/// connection. Errors are logged and counted, never fatal.
pub async fn run(pg: Config, mut duty: Box<dyn Duty>, handle: DutyHandle) {
    let name = duty.name();
    // role: the pgferry role of issue 27's log fields (enqueuer, claimer, leader duty).
    let span = tracing::info_span!("duty", role = "leader", duty = name);
    async move {
        loop {
            let mut client = match connect(&pg, name).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "duty cannot connect");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(e) = duty.prepare(&client).await {
                tracing::warn!(error = %e, "duty session setup failed");
                tokio::time::sleep(duty.interval()).await;
                continue;
            }
            loop {
                let started = Instant::now();
                let result = duty.run_once(&mut client).await;
                let stats = &handle.stats;
                stats.passes.fetch_add(1, Ordering::Relaxed);
                let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                stats.busy_us.fetch_add(us, Ordering::Relaxed);
                let pause = match result {
                    Ok(Next::Now) => continue,
                    Ok(Next::After(d)) => Some(d),
                    Ok(Next::Idle) => None,
                    Err(e) => {
                        stats.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "duty pass failed");
                        if client.is_closed() {
                            break;
                        }
                        Some(duty.interval())
                    }
                };
                let wait = async {
                    match pause {
                        Some(d) => duty.pause(d).await,
                        None => duty.idle().await,
                    }
                };
                tokio::select! {
                    _ = wait => {}
                    _ = handle.wake.notified() => {}
                }
            }
        }
    }
    .instrument(span)
    .await
}
