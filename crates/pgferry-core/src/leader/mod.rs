//! The leader: one server at a time runs the background duties (architecture.md §4).
//!
//! Leadership is a session advisory lock on a dedicated connection. Each duty is one small
//! type with one shape ([`duty::Duty`]: ticker, promoter, rescuer, rotator, janitor,
//! recounter, workflow retention, workflow key sweeper), run by the same loop; they run
//! only while the lock is held and are aborted within a second of losing it (the lock connection is checked every
//! second), after which another server's leader takes over.

pub mod duty;
pub mod janitor;
pub mod promoter;
pub mod recounter;
pub mod rescuer;
pub mod rotator;
pub mod ticker;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_postgres::Config;

pub(crate) use crate::db::connect;

use crate::engine::Engine;
use crate::error::Result;

/// Session advisory lock key of the leader.
const LEADER_LOCK: i64 = 0x7067_6665_7272_7902;

/// Pause between two tries for the leader lock (issue 27: the takeover gap after a leader
/// is killed).
const CAMPAIGN_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Pause after a tick was written before checking again (the log is growing).
    pub tick_interval: Duration,
    /// Pause after a check found nothing new (external producers, late commits).
    pub idle_tick_interval: Duration,
    /// End the pause after a tick early when the log grew and a claimer of this process
    /// waits for a tick (ticker.rs; issue 21). Off: always wait `tick_interval`.
    pub tick_on_demand: bool,
    pub promote_interval: Duration,
    pub promote_batch: i64,
    pub rescue_interval: Duration,
    /// How long a claim may take at most; the rescue mark never passes younger receipts.
    pub claim_settle: Duration,
    pub rotate_interval: Duration,
    /// A segment is current for this long before the next one opens.
    pub segment_duration: Duration,
    /// Closed segments are kept at least this long (job history).
    pub retention: Duration,
    /// Pause between two lanes' counter recounts (each also waits two flush intervals).
    pub recount_interval: Duration,
    /// Pause between two passes of the janitor over unique keys.
    pub prune_interval: Duration,
    /// Unique keys examined per janitor statement (and ended workflow instances removed
    /// per retention statement).
    pub prune_batch: i64,
    /// Idempotency keys of enqueue requests are kept at least this long: a retry within it
    /// is answered from its key (issue 17).
    pub idempotency_retention: Duration,
    /// Ended workflow instances are kept this long (workflow/retention.rs).
    pub workflow_retention: Duration,
    /// Pause between two walks of the concurrency keys that have waiters, looking for a
    /// free slot no waiter took (workflow/sweeper.rs): the longest such a waiter waits.
    pub key_sweep_interval: Duration,
    /// Keys with waiters looked at per key sweeper statement.
    pub key_sweep_batch: i64,
}

impl LeaderConfig {
    /// Checks every setting: intervals above zero, batches of at least one, a retention no
    /// shorter than a segment's lifetime (a segment must be sealed before it can be freed).
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("tick_interval", self.tick_interval),
            ("idle_tick_interval", self.idle_tick_interval),
            ("promote_interval", self.promote_interval),
            ("rescue_interval", self.rescue_interval),
            ("rotate_interval", self.rotate_interval),
            ("segment_duration", self.segment_duration),
            ("recount_interval", self.recount_interval),
            ("prune_interval", self.prune_interval),
            ("key_sweep_interval", self.key_sweep_interval),
        ];
        for (field, d) in positive {
            if d.is_zero() {
                return Err(crate::Error::InvalidArgument {
                    field,
                    reason: "must be above zero".into(),
                });
            }
        }
        for (field, n) in [
            ("promote_batch", self.promote_batch),
            ("prune_batch", self.prune_batch),
            ("key_sweep_batch", self.key_sweep_batch),
        ] {
            if !(1..=100_000).contains(&n) {
                return Err(crate::Error::InvalidArgument {
                    field,
                    reason: format!("{n} is not in 1..=100000"),
                });
            }
        }
        Ok(())
    }
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            tick_interval: Duration::from_millis(2),
            idle_tick_interval: Duration::from_millis(50),
            tick_on_demand: true,
            promote_interval: Duration::from_millis(250),
            promote_batch: 1000,
            rescue_interval: Duration::from_secs(1),
            claim_settle: Duration::from_secs(60),
            rotate_interval: Duration::from_secs(1),
            // Half the retention: a segment in use is current for 30 s and kept 60 s after
            // it is sealed, so 3-4 segments are attached. Every hot statement pays per
            // attached segment (ADR 0009): in a 110 s cycle run the last 40 s did 35.4k
            // jobs/s with 10 s segments (7-8 attached) and 44.8k with 30 s (3-4).
            segment_duration: Duration::from_secs(30),
            retention: Duration::from_secs(60),
            recount_interval: Duration::from_secs(5),
            prune_interval: Duration::from_secs(10),
            prune_batch: 1000,
            idempotency_retention: Duration::from_secs(24 * 3600),
            workflow_retention: Duration::from_secs(7 * 24 * 3600),
            // A stranded waiter is rare (a stale outcome holding it as its slot is given
            // back); an idle walk is one index probe, but a walk costs a probe per key with
            // waiters (80 statements for 80k backlogged keys), so it runs every 5 s rather
            // than every second: a stranded waiter waits at most that long.
            key_sweep_interval: Duration::from_secs(5),
            key_sweep_batch: 1000,
        }
    }
}

/// A duty another crate adds (the ASH sampler, ADR 0012): started with the built-in duties
/// when leadership is taken and aborted with them when it is lost. Gets the database config.
pub type ExtraDuty = Arc<
    dyn Fn(Config) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

pub struct Leader {
    engine: Arc<Engine>,
    pg: Config,
    config: LeaderConfig,
    rescues: rescuer::RescueFeed,
    extra: Vec<ExtraDuty>,
    duties: duty::Duties,
}

impl Leader {
    /// A leader with these settings. Panics on settings [`LeaderConfig::validate`] refuses
    /// (a programming error); [`Leader::try_new`] returns the error instead.
    pub fn new(engine: Arc<Engine>, pg: Config, config: LeaderConfig) -> Leader {
        match Leader::try_new(engine, pg, config) {
            Ok(l) => l,
            Err(e) => panic!("invalid LeaderConfig: {e}"),
        }
    }

    pub fn try_new(engine: Arc<Engine>, pg: Config, config: LeaderConfig) -> Result<Leader> {
        config.validate()?;
        Ok(Leader {
            engine,
            pg,
            config,
            rescues: tokio::sync::broadcast::channel(64).0,
            extra: Vec::new(),
            duties: duty::Duties::default(),
        })
    }

    /// The duties' counters and "run a pass now" triggers (metrics, tests).
    pub fn duties(&self) -> duty::Duties {
        self.duties.clone()
    }

    /// Adds a duty that runs only while this process leads (see [`ExtraDuty`]).
    pub fn with_duty(mut self, duty: ExtraDuty) -> Leader {
        self.extra.push(duty);
        self
    }

    /// What the rescuer rescues while this process leads (one report per pass that rescued
    /// something): the server counts it per queue in its metrics.
    pub fn subscribe_rescues(
        &self,
    ) -> tokio::sync::broadcast::Receiver<Arc<rescuer::RescueReport>> {
        self.rescues.subscribe()
    }

    /// Campaigns for leadership until `shutdown` turns true; runs the duties while leader.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            match self.lead_once(&mut shutdown).await {
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, "leader session ended"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// One leadership term: campaign for the lock (until shutdown); run duties until the lock session fails
    /// or shutdown.
    async fn lead_once(&self, shutdown: &mut watch::Receiver<bool>) -> Result<()> {
        let lock = connect(&self.pg, "leader").await?;
        // Campaign on this one connection every CAMPAIGN_INTERVAL: a killed leader's lock
        // is taken over within that (it was up to a second plus a new connection per try).
        // A try, not a blocking pg_advisory_lock: a waiting backend would show as an active
        // session waiting on a lock all the time (ASH) and would outlive a killed process.
        loop {
            let got: bool = lock
                .query_one("SELECT pg_try_advisory_lock($1) AS got", &[&LEADER_LOCK])
                .await?
                .get("got");
            if got {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(CAMPAIGN_INTERVAL) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
        tracing::info!("became leader");
        let mut duties = JoinSet::new();
        let c = &self.config;
        let builtin: Vec<Box<dyn duty::Duty>> = vec![
            Box::new(ticker::Ticker::new(self.engine.clone(), c.clone())),
            Box::new(promoter::Promoter::new(c)),
            Box::new(rescuer::Rescuer::new(c, self.rescues.clone())),
            Box::new(rotator::Rotator { config: c.clone() }),
            Box::new(janitor::Janitor::new(c)),
            Box::new(crate::workflow::retention::Retention::new(c)),
            Box::new(crate::workflow::sweeper::KeySweeper::new(c)),
            Box::new(recounter::Recounter::new(self.engine.clone(), c)),
        ];
        for d in builtin {
            let handle = self.duties.handle(d.name());
            duties.spawn(duty::run(self.pg.clone(), d, handle));
        }
        for duty in &self.extra {
            duties.spawn(duty(self.pg.clone()));
        }
        let result = loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if let Err(e) = lock.simple_query("SELECT 1").await {
                        break Err(e.into());
                    }
                }
                Some(done) = duties.join_next() => {
                    // Duties loop forever and retry their own errors; one ending is a bug.
                    tracing::error!(?done, "leader duty ended unexpectedly");
                }
                _ = shutdown.changed() => break Ok(()),
            }
        };
        duties.shutdown().await;
        tracing::info!("leadership released");
        result
    }
}
