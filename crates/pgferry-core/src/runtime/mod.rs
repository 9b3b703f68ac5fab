//! An in-process worker runtime for Rust users (issue 18): what River's `Client` gives Go
//! users. Register typed handlers by kind, say how many jobs of each queue run at once, and
//! the runtime does the rest — claims in batches sized to free slots, waits for the next
//! tick after an empty claim, runs handlers outside any transaction, batches outcomes into
//! one statement per flush, heartbeats long jobs, tells handlers of cancellation, and on
//! shutdown stops claiming, lets running jobs finish (or reports them for retry), flushes
//! every outcome and closes the engine. It also runs the leader and the tick listener, which
//! a hand-written claim loop must not forget (without them claims return nothing forever).
//!
//! ```no_run
//! # async fn demo(engine: std::sync::Arc<pgferry_core::Engine>, pg: tokio_postgres::Config)
//! # -> pgferry_core::Result<()> {
//! use pgferry_core::runtime::{HandlerError, Runtime};
//! #[derive(serde::Deserialize)]
//! struct Send { to: String }
//! let rt = Runtime::builder(engine, pg)
//!     .queue("emails", 16)
//!     .handler("send", |_ctx, args: Send| async move {
//!         if args.to.is_empty() { return Err(HandlerError::discard("no recipient")); }
//!         Ok(None)
//!     })
//!     .start();
//! // ... later
//! rt.shutdown(std::time::Duration::from_secs(30)).await;
//! # Ok(()) }
//! ```

mod handler;
mod queue_loop;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_postgres::Config;

use crate::engine::Engine;
use crate::leader::{Leader, LeaderConfig};

pub use handler::{Handler, HandlerError, JobContext};

/// Settings of the runtime as a whole.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The worker name recorded with each claim.
    pub worker: String,
    /// Run the leader's duties in this process (one process per database must).
    pub leader: Option<LeaderConfig>,
    /// Outcomes are written when this many are waiting, or `flush_wait` after the first.
    pub flush_rows: usize,
    pub flush_wait: Duration,
    /// Longest pause between claims of an idle queue (ticks wake it sooner).
    pub idle_poll: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            worker: format!("rust@{}", std::process::id()),
            leader: Some(LeaderConfig::default()),
            flush_rows: 256,
            flush_wait: Duration::from_millis(1),
            idle_poll: Duration::from_secs(1),
        }
    }
}

pub struct RuntimeBuilder {
    engine: Arc<Engine>,
    pg: Config,
    config: RuntimeConfig,
    queues: Vec<(String, usize)>,
    handlers: HashMap<String, Arc<dyn Handler>>,
}

impl RuntimeBuilder {
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Works `queue` with at most `concurrency` jobs running at once (at least 1).
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push((queue.into(), concurrency.max(1)));
        self
    }

    /// Runs jobs of `kind` with `f`; args are deserialized into `A` (a job whose args do not
    /// fit is dead-lettered at once: retrying cannot fix it).
    pub fn handler<A, F, Fut>(mut self, kind: impl Into<String>, f: F) -> Self
    where
        A: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Option<serde_json::Value>, HandlerError>>
            + Send
            + 'static,
    {
        self.handlers
            .insert(kind.into(), Arc::new(handler::Typed::new(f)));
        self
    }

    /// Starts the leader (if configured), the tick listener and one loop per queue.
    pub fn start(self) -> Runtime {
        let (stop, stop_rx) = watch::channel(None);
        let (leader_stop, leader_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut background = JoinSet::new();
        let leader = self.config.leader.clone().map(|cfg| {
            let leader = Leader::new(self.engine.clone(), self.pg.clone(), cfg);
            tokio::spawn(leader.run(leader_rx))
        });
        background.spawn(crate::listen::run_tick_listener(
            self.engine.clone(),
            self.pg.clone(),
        ));
        let handlers = Arc::new(self.handlers);
        for (queue, concurrency) in self.queues {
            let looped = queue_loop::QueueLoop {
                engine: self.engine.clone(),
                queue,
                concurrency,
                handlers: handlers.clone(),
                config: self.config.clone(),
                stop: stop_rx.clone(),
            };
            tasks.spawn(looped.run());
        }
        Runtime {
            engine: self.engine,
            stop,
            leader_stop,
            leader,
            tasks,
            background,
        }
    }
}

/// A running runtime; [`Runtime::shutdown`] ends it.
pub struct Runtime {
    engine: Arc<Engine>,
    /// `Some(grace)`: stop claiming, drain within grace.
    stop: watch::Sender<Option<Duration>>,
    leader_stop: watch::Sender<bool>,
    leader: Option<tokio::task::JoinHandle<()>>,
    tasks: JoinSet<Stats>,
    background: JoinSet<()>,
}

/// What a runtime did, reported by [`Runtime::shutdown`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub completed: u64,
    /// Failed attempts that run again.
    pub retried: u64,
    /// Moved to the dead-letter queue (discarded, or failed on their last attempt).
    pub dead: u64,
    pub snoozed: u64,
    /// Handed back unstarted (not attempts).
    pub released: u64,
    pub cancelled: u64,
    /// Still running when the grace period ended: told to stop and reported failed (they
    /// run again; counted in `retried` or `dead` too).
    pub abandoned: u64,
}

impl Runtime {
    pub fn builder(engine: Arc<Engine>, pg: Config) -> RuntimeBuilder {
        RuntimeBuilder {
            engine,
            pg,
            config: RuntimeConfig::default(),
            queues: Vec::new(),
            handlers: HashMap::new(),
        }
    }

    /// Stops claiming, gives running handlers `grace` to finish (then tells them to stop and
    /// reports them as failed so they run again), writes every outcome, stops the leader and
    /// the listener, and closes the engine's pools.
    pub async fn shutdown(mut self, grace: Duration) -> Stats {
        let _ = self.stop.send(Some(grace));
        let mut total = Stats::default();
        // Past the grace, outcomes are still being written (retried while the database is
        // unreachable): bounded, so a shutdown always ends.
        let deadline = tokio::time::Instant::now() + grace + Duration::from_secs(30);
        while let Ok(Some(done)) = tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
            if let Ok(s) = done {
                total.add(&s);
            }
        }
        self.tasks.abort_all();
        // The leader releases its lock cleanly (another process takes over at once).
        let _ = self.leader_stop.send(true);
        if let Some(leader) = self.leader.take() {
            let abort = leader.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), leader)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        self.background.abort_all();
        while self.background.join_next().await.is_some() {}
        self.engine.close();
        total
    }
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.completed += o.completed;
        self.retried += o.retried;
        self.dead += o.dead;
        self.snoozed += o.snoozed;
        self.cancelled += o.cancelled;
        self.abandoned += o.abandoned;
    }
}
