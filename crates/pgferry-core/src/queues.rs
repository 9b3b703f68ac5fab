//! Queue settings and pause/resume. Settings live in `pgferry.queues`; every process's lane
//! cache re-reads them within a second, so a pause stops claims everywhere within ~1 s.

use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::{validate_queue_name, MAX_ATTEMPTS_LIMIT};

const QUEUE_SETTINGS: &str = include_str!("sql/queue_settings.sql");
const QUEUE_ENSURE: &str = include_str!("sql/queue_ensure.sql");

/// A change of settings: `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct QueueSettings {
    pub max_attempts: Option<i32>,
    pub lease: Option<Duration>,
    pub backoff_base: Option<Duration>,
    pub backoff_cap: Option<Duration>,
    /// How long finished jobs' history is kept before their segment may be truncated.
    pub retention: Option<Duration>,
    /// Claim-time aging threshold of lower priorities.
    pub aging: Option<Duration>,
    pub paused: Option<bool>,
    /// Most attempts of the queue running at once across servers; `Some(0)` removes the
    /// limit. Attempts already running when a limit is first set are not counted.
    pub concurrency: Option<u32>,
    /// How the queue's hot-path writes commit (architecture.md §1.7).
    pub durability: Option<Durability>,
}

/// How a queue's enqueues, claims and completions commit (architecture.md §1.7).
///
/// `Async` commits with `synchronous_commit = off`: the caller is answered once the commit
/// is in Postgres's WAL buffers, not on disk, so a Postgres crash (not a pgferry crash) can
/// lose the last fraction of a second of acknowledged enqueues and completions (up to three
/// `wal_writer_delay`s). A lost claim only means the jobs are delivered again; a lost
/// completion means the attempt runs again after its lease. The ids of lost jobs may be
/// handed out again after the crash (their sequence advance is lost with them). Nothing is
/// ever half-written, and any later synchronous commit makes everything before it durable
/// too, so a durable row never refers to a lost one.
///
/// A batch that holds jobs of several queues commits synchronously unless every one of
/// them is `Async`, so mixing never weakens a `Sync` queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Committed with the server's `synchronous_commit` before anything is acknowledged.
    #[default]
    Sync,
    /// Committed asynchronously: faster, at the risk above.
    Async,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }

    /// From the `pgferry.queues.async_commit` column.
    pub fn from_async_commit(async_commit: bool) -> Durability {
        if async_commit {
            Durability::Async
        } else {
            Durability::Sync
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = Error;

    fn from_str(s: &str) -> Result<Durability> {
        match s {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            other => Err(Error::InvalidArgument {
                field: "durability",
                reason: format!("{other:?} is not \"sync\" or \"async\""),
            }),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A queue's settings as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    pub name: String,
    pub paused: bool,
    pub max_attempts: i32,
    pub lease: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub retention: Duration,
    pub aging: Duration,
    pub concurrency: Option<u32>,
    pub durability: Durability,
}

fn ms(field: &'static str, d: Option<Duration>, max: u128) -> Result<Option<i64>> {
    match d {
        None => Ok(None),
        Some(d) if d.as_millis() <= max => Ok(Some(d.as_millis() as i64)),
        Some(d) => Err(Error::InvalidArgument {
            field,
            reason: format!("{} ms is over the limit of {max} ms", d.as_millis()),
        }),
    }
}

fn to_i32(v: Option<i64>) -> Option<i32> {
    v.map(|v| v as i32)
}

impl Engine {
    /// Changes a queue's settings. `NotFound` if the queue does not exist.
    pub async fn update_queue(&self, name: &str, s: &QueueSettings) -> Result<QueueInfo> {
        validate_queue_name(name)?;
        if let Some(n) = s.max_attempts {
            if !(1..=MAX_ATTEMPTS_LIMIT).contains(&n) {
                return Err(Error::InvalidArgument {
                    field: "max_attempts",
                    reason: format!("{n} is not in 1..={MAX_ATTEMPTS_LIMIT}"),
                });
            }
        }
        let lease = ms("lease", s.lease, 86_400_000)?;
        if lease.is_some_and(|l| l < 100) {
            return Err(Error::InvalidArgument {
                field: "lease",
                reason: "must be at least 100 ms".into(),
            });
        }
        let base = ms("backoff_base", s.backoff_base, 86_400_000)?;
        let cap = ms("backoff_cap", s.backoff_cap, 604_800_000)?;
        let retention = ms("retention", s.retention, 31_536_000_000)?;
        let aging = ms("aging", s.aging, 86_400_000)?;
        let concurrency = match s.concurrency {
            Some(n) if n > 1_000_000 => {
                return Err(Error::InvalidArgument {
                    field: "concurrency",
                    reason: format!("{n} is over the limit of 1000000"),
                })
            }
            n => n.map(|n| n as i32),
        };
        let client = self.pool().get().await?;
        let row = client
            .query_opt(
                QUEUE_SETTINGS,
                &[
                    &name,
                    &s.max_attempts,
                    &to_i32(lease),
                    &to_i32(base),
                    &to_i32(cap),
                    &retention,
                    &to_i32(aging),
                    &s.paused,
                    &concurrency,
                    &s.durability.map(|d| d == Durability::Async),
                ],
            )
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "queue",
                id: name.to_string(),
            })?;
        self.forget_queue(name);
        let ms = |column: &str| Duration::from_millis(row.get::<_, i32>(column) as u64);
        Ok(QueueInfo {
            name: row.get("name"),
            paused: row.get("paused"),
            max_attempts: row.get("max_attempts"),
            lease: ms("lease_ms"),
            backoff_base: ms("backoff_base_ms"),
            backoff_cap: ms("backoff_cap_ms"),
            retention: Duration::from_millis(row.get::<_, i64>("retention_ms") as u64),
            aging: ms("aging_ms"),
            concurrency: row.get::<_, Option<i32>>("concurrency").map(|n| n as u32),
            durability: Durability::from_async_commit(row.get("async_commit")),
        })
    }

    /// Creates the queue with default settings if it does not exist (queues are otherwise
    /// created on first enqueue or claim).
    pub async fn ensure_queue(&self, name: &str) -> Result<()> {
        validate_queue_name(name)?;
        let client = self.pool().get().await?;
        client.execute(QUEUE_ENSURE, &[&name]).await?;
        Ok(())
    }

    /// Stops claims from `queue` (within about a second on every server).
    pub async fn pause_queue(&self, name: &str) -> Result<QueueInfo> {
        let s = QueueSettings {
            paused: Some(true),
            ..Default::default()
        };
        self.update_queue(name, &s).await
    }

    pub async fn resume_queue(&self, name: &str) -> Result<QueueInfo> {
        let s = QueueSettings {
            paused: Some(false),
            ..Default::default()
        };
        self.update_queue(name, &s).await
    }
}
