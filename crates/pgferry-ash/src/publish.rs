//! Every server's half of cross-server attribution: it publishes what its pooled backends
//! serve (`pgferry_core::serving`) into `pgferry_ash.published`, one row per server, so that
//! the single sampler — the leader's, or pg_cron's `take_sample()` — can attribute the
//! backends of every server to their queue, job kind and tenant (docs/ash.md).
//!
//! Nothing is written on a job's path: the publisher takes the in-memory snapshot at each
//! sampling tick and writes it in one statement; while it serves nothing, only an empty row
//! every [`HEARTBEAT`] (so the table lists the live publishers). Ticks are aligned on the
//! wall clock (multiples of the interval since the epoch), as the sampler's are, so the
//! snapshot and the sampler's read of `pg_stat_activity` happen at about the same instant
//! and operations of a few milliseconds are still caught. An entry vouches only for
//! statements that began inside its operation and before its snapshot
//! (`pgferry_ash.published_serving`), so a stale or late snapshot misses a backend rather
//! than give it an old queue (the one narrow exception is in docs/ash.md).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgferry_core::serving::{self, Serving};
use tokio::sync::watch;
use tokio_postgres::{Client, Config};

use crate::error::Result;

const PUBLISH: &str = include_str!("../sql/publish/publish.sql");
const UNPUBLISH: &str = include_str!("../sql/publish/unpublish.sql");
const CLOCK: &str = include_str!("../sql/publish/clock.sql");

/// This process's name in `pgferry_ash.published`: its pid and start time, unique enough
/// across hosts and restarts without a host name.
pub fn server_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        format!("pid{}-{started:x}", std::process::id())
    })
}

/// Time until the next multiple of `interval` since the epoch (the sampler and every
/// publisher tick together).
pub fn until_aligned_tick(interval: Duration) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let step = interval.as_nanos().max(1);
    Duration::from_nanos((step - now % step) as u64)
}

/// One publisher's connection and what it last wrote.
pub struct Publisher {
    client: Client,
    /// Its row's key: [`server_id`], or a name given by a test or benchmark that stands in
    /// for another server.
    server: String,
    publish: tokio_postgres::Statement,
    /// The database's clock (epoch seconds) read during the last round trip, and the local
    /// instant that round trip ended: `db_now - (ended - t)` maps a local instant `t` to the
    /// database's clock no later than it really was (the reading happened before `ended`),
    /// off by at most that round trip. So a published `at` never claims a later instant than
    /// the snapshot, and no `since` a later start than its operation's first statement.
    clock: (f64, Instant),
    /// When the last write was empty (nothing served): an idle server then writes only a
    /// heartbeat every [`HEARTBEAT`].
    idle_since_write: Option<Instant>,
}

/// How often an idle server rewrites its empty row, so the table lists every live publisher
/// and a stopped or killed one is told from an idle one (the sampler's TTL is longer).
pub const HEARTBEAT: Duration = Duration::from_secs(3);

/// What one call to [`Publisher::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Wrote this many entries (0: the server just became idle).
    Wrote(usize),
    /// Idle and published as idle less than a [`HEARTBEAT`] ago: no statement.
    Skipped,
}

impl Publisher {
    pub async fn connect(pg: &Config) -> Result<Publisher> {
        let client = pgferry_core::db::connect(pg, "ash-publisher").await?;
        Publisher::with_client(client).await
    }

    pub async fn with_client(client: Client) -> Result<Publisher> {
        Publisher::named(client, server_id().to_string()).await
    }

    /// A publisher under another server's name (tests and benchmarks stand in for other
    /// servers from one process).
    pub async fn named(client: Client, server: String) -> Result<Publisher> {
        let publish = client.prepare(PUBLISH).await?;
        let db_now: f64 = client.query_one(CLOCK, &[]).await?.get("db_now");
        Ok(Publisher {
            client,
            server,
            publish,
            clock: (db_now, Instant::now()),
            idle_since_write: None,
        })
    }

    /// Publishes this process's registry as it is now.
    pub async fn publish(&mut self) -> Result<Published> {
        self.publish_snapshot(serving::snapshot_since(), Instant::now())
            .await
    }

    /// Publishes `snapshot`, taken at `taken`.
    pub async fn publish_snapshot(
        &mut self,
        snapshot: HashMap<i32, (Serving, Instant)>,
        taken: Instant,
    ) -> Result<Published> {
        if snapshot.is_empty()
            && self
                .idle_since_write
                .is_some_and(|t| t.elapsed() < HEARTBEAT)
        {
            return Ok(Published::Skipped);
        }
        let n = snapshot.len();
        let mut pids = Vec::with_capacity(n);
        let mut since_db = Vec::with_capacity(n);
        let mut roles = Vec::with_capacity(n);
        let mut queues = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        for (pid, (s, since)) in snapshot {
            pids.push(pid);
            since_db.push(self.on_db_clock(since));
            roles.push(s.role.to_string());
            queues.push(s.queue);
            kinds.push(s.kind);
        }
        let at = self.on_db_clock(taken);
        let row = self
            .client
            .query_one(
                &self.publish,
                &[&self.server, &at, &pids, &since_db, &roles, &queues, &kinds],
            )
            .await?;
        self.clock = (row.get("db_now"), Instant::now());
        self.idle_since_write = (n == 0).then(Instant::now);
        Ok(Published::Wrote(n))
    }

    /// `t` on the database's clock, no later than it really was.
    fn on_db_clock(&self, t: Instant) -> f64 {
        let (db_now, ended) = self.clock;
        if t <= ended {
            db_now - (ended - t).as_secs_f64()
        } else {
            db_now + (t - ended).as_secs_f64()
        }
    }

    /// Removes this server's row (on a clean stop).
    pub async fn unpublish(&self) -> Result<()> {
        self.client.execute(UNPUBLISH, &[&self.server]).await?;
        Ok(())
    }
}

/// Publishes at every aligned tick of `interval` until `stop` turns true, then removes the
/// row. Reconnects after errors; a server whose publisher is down is attributed by role only.
pub async fn run(pg: Config, interval: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        if stop_requested(&stop) {
            return;
        }
        let mut publisher = match Publisher::connect(&pg).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "ash publisher cannot start; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(interval.max(Duration::from_secs(1))) => continue,
                    _ = stopped(&mut stop) => return,
                }
            }
        };
        loop {
            tokio::select! {
                _ = tokio::time::sleep(until_aligned_tick(interval)) => {}
                _ = stopped(&mut stop) => {
                    if let Err(e) = publisher.unpublish().await {
                        tracing::debug!(error = %e, "ash: unpublish failed (pruned by TTL)");
                    }
                    return;
                }
            }
            if let Err(e) = publisher.publish().await {
                tracing::warn!(error = %e, "ash publish failed");
                if publisher.client.is_closed() {
                    break;
                }
            }
        }
    }
}

/// Resolves once `stop` is true (or its sender is gone); holds no borrow of it afterwards.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn stop_requested(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}
