//! Ticker: records visibility ticks and wakes claimers (architecture.md §3.1).
//!
//! The ticker commits asynchronously: a tick lost in a crash is harmless, because any receipt
//! that used it was committed later in the WAL and so flushed it too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_postgres::{Client, Statement};

use super::duty::{Duty, DutyFuture, Next};
use super::LeaderConfig;
use crate::engine::Engine;
use crate::error::Result;

const TICK: &str = include_str!("../sql/tick.sql");

/// Writes a tick if the log may have changed (every test of `tick.sql`); returns its id.
/// Prepares the statement for this one call (tests, one-off callers); the duty prepares it
/// once per connection.
pub async fn tick(client: &Client) -> Result<Option<i64>> {
    let stmt = client.prepare(TICK).await?;
    tick_with(client, &stmt, true).await
}

/// `full`: whether a transaction that began after the last tick and has ended counts as a
/// change (`tick.sql`'s third test).
async fn tick_with(client: &Client, stmt: &Statement, full: bool) -> Result<Option<i64>> {
    Ok(client
        .query_opt(stmt, &[&full])
        .await?
        .map(|r| r.get("tick_id")))
}

/// The ticker duty: a tick, then `tick_interval` while the log grows; idle, it waits for
/// `idle_tick_interval` or until this process or another one enqueues something.
pub struct Ticker {
    engine: Arc<Engine>,
    config: LeaderConfig,
    /// The tick statement, prepared on the duty's connection by [`Duty::prepare`]. Ticks run
    /// hundreds of times a second while claimers wait (tick on demand): preparing per tick
    /// made Postgres parse and plan the statement each time, which cost more CPU than the
    /// tick itself (docs/performance.md, "The ticker's statement prepared once").
    statement: Option<Statement>,
    /// The pause after a tick ran out without word that the log grew: the next pass leaves
    /// out transactions that began after that tick (`tick.sql`). Those are the claims and
    /// completions the tick itself caused; counted, each tick caused the next, and at light
    /// load a job cost about three ticks and three claims (docs/performance.md, "Ticks that
    /// cause ticks"). Every other pass (after an idle wait, a growth, a trigger) is full.
    follow_up: AtomicBool,
}

impl Ticker {
    pub fn new(engine: Arc<Engine>, config: LeaderConfig) -> Ticker {
        Ticker {
            engine,
            config,
            statement: None,
            follow_up: AtomicBool::new(false),
        }
    }
}

impl Duty for Ticker {
    fn name(&self) -> &'static str {
        "ticker"
    }

    fn interval(&self) -> std::time::Duration {
        self.config.idle_tick_interval
    }

    fn prepare<'a>(&'a mut self, client: &'a Client) -> DutyFuture<'a, ()> {
        // enable_seqscan off: the latest-tick probe must use ticks_id even when a freshly
        // reused segment's statistics say it is empty.
        Box::pin(async move {
            // From now on this process's listener stops nudging: its enqueues wake this
            // ticker directly (growth.rs).
            self.engine.signals().growth().set_ticking(true);
            self.statement = None;
            client
                .batch_execute("SET synchronous_commit = off; SET enable_seqscan = off")
                .await?;
            // Its plan is made at its first run in this session, under the settings above.
            self.statement = Some(client.prepare(TICK).await?);
            Ok(())
        })
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            let stmt = match &self.statement {
                Some(s) => s.clone(),
                None => {
                    let s = client.prepare(TICK).await?;
                    self.statement.insert(s).clone()
                }
            };
            let full = !self.follow_up.swap(false, Ordering::Relaxed);
            Ok(match tick_with(client, &stmt, full).await? {
                Some(id) => {
                    self.engine.signals().publish_tick(id);
                    Next::After(self.config.tick_interval)
                }
                None => Next::Idle,
            })
        })
    }

    fn pause(
        &self,
        d: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        // The pacing interval keeps ticks (one row and one NOTIFY each) few while the log
        // grows fast and claimers find work. When a claimer of this process waits for a tick
        // and the log grew, waiting out the interval would be pure latency: tick on demand.
        let signals = self.engine.signals();
        let on_demand = self.config.tick_on_demand;
        Box::pin(async move {
            if !on_demand {
                return tokio::time::sleep(d).await;
            }
            let deadline = tokio::time::Instant::now() + d;
            let mut grew = false;
            loop {
                if grew && signals.claimers_waiting() {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {
                        // Nothing said the log grew since the tick: a follow-up pass.
                        self.follow_up.store(!grew, Ordering::Relaxed);
                        return;
                    }
                    _ = signals.growth().here.notified() => grew = true,
                    // Another process's enqueue (its nudge): its transaction began after
                    // the tick, so only a full pass would see it.
                    _ = signals.growth().elsewhere.notified() => grew = true,
                    _ = signals.hunger().notified() => {}
                }
            }
        })
    }

    fn idle(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        // Idle: wake early when this process enqueued something, or another process said
        // it did (its pgferry_grew NOTIFY, growth.rs).
        let growth = self.engine.signals().growth();
        let wait = self.config.idle_tick_interval;
        Box::pin(async move {
            let woken = async {
                tokio::select! {
                    _ = growth.here.notified() => {}
                    _ = growth.elsewhere.notified() => {}
                }
            };
            let _ = tokio::time::timeout(wait, woken).await;
        })
    }
}

impl Drop for Ticker {
    /// Leadership ended (the duty was aborted): this process's listener nudges again.
    fn drop(&mut self) {
        self.engine.signals().growth().set_ticking(false);
    }
}
