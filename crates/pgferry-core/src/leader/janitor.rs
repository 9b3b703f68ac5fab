//! Janitor: releases the unique keys of finished jobs (ADR 0005 "known gap") and drops the
//! cancellation requests nothing needs any more, in bounded batches, one statement per batch
//! (unique_prune.sql, cancels_prune.sql). Enqueue still takes a key over lazily when it meets
//! a finished holder; the janitor keeps the table from growing with keys nobody uses again.
//! `cancels` matters more: while it holds any row, every claim and heartbeat probes it per
//! job, so requests of finished jobs must not stay forever. Finished handed-over attempts
//! (ADR 0008) leave `long_leases` after the retention (long_leases_prune.sql).

use tokio_postgres::Client;

use super::duty::{Duty, DutyFuture, Next};
use super::LeaderConfig;
use crate::error::Result;

const UNIQUE_PRUNE: &str = include_str!("../sql/unique_prune.sql");
const CANCELS_PRUNE: &str = include_str!("../sql/cancels_prune.sql");
const LONG_LEASES_PRUNE: &str = include_str!("../sql/long_leases_prune.sql");
const IDEMPOTENCY_PRUNE: &str = include_str!("../sql/idempotency_prune.sql");

/// Where a pass over `unique_keys` is, and what one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneStep {
    /// The last key of the batch: the next batch starts after it (None: start over).
    pub after: Option<(String, String)>,
    pub scanned: i64,
    pub released: i64,
}

/// Examines up to `batch` keys after `after` and deletes those whose holder finished.
pub async fn prune_unique(
    client: &Client,
    after: Option<&(String, String)>,
    batch: i64,
) -> Result<PruneStep> {
    let stmt = client.prepare(UNIQUE_PRUNE).await?;
    let (q, k) = match after {
        Some((q, k)) => (Some(q.as_str()), Some(k.as_str())),
        None => (None, None),
    };
    let row = client.query_one(&stmt, &[&q, &k, &batch]).await?;
    let scanned: i64 = row.get("scanned");
    Ok(PruneStep {
        // A short batch reached the end: the next pass starts from the first key.
        after: match (
            row.get::<_, Option<String>>("last_queue"),
            row.get("last_key"),
        ) {
            (Some(q), Some(k)) if scanned >= batch => Some((q, k)),
            _ => None,
        },
        scanned,
        released: row.get("released"),
    })
}

/// What one batch of the cancels pruner did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CancelsStep {
    /// The next batch starts after this job id (None: start over).
    pub after: Option<i64>,
    pub scanned: i64,
    pub dropped: i64,
}

/// Examines up to `batch` cancellation requests after job `after` and drops those whose job
/// is finished (or, for jobs cancelled in `scheduled`, whose retention passed).
pub async fn prune_cancels(
    client: &Client,
    after: i64,
    batch: i64,
    retention: std::time::Duration,
) -> Result<CancelsStep> {
    let stmt = client.prepare(CANCELS_PRUNE).await?;
    let ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let row = client.query_one(&stmt, &[&after, &batch, &ms]).await?;
    let scanned: i64 = row.get("scanned");
    Ok(CancelsStep {
        after: row
            .get::<_, Option<i64>>("last_job_id")
            .filter(|_| scanned >= batch),
        scanned,
        dropped: row.get("dropped"),
    })
}

/// Drops up to `batch` finished handed-over attempts (ADR 0008) whose retention passed and
/// whose segment and receipt are gone; returns how many.
pub async fn prune_long_leases(
    client: &Client,
    batch: i64,
    retention: std::time::Duration,
) -> Result<i64> {
    let stmt = client.prepare(LONG_LEASES_PRUNE).await?;
    let ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    Ok(client
        .query_one(&stmt, &[&ms, &batch])
        .await?
        .get("dropped"))
}

/// Deletes up to `batch` idempotency keys older than `retention`; returns how many.
pub async fn prune_idempotency_keys(
    client: &Client,
    batch: i64,
    retention: std::time::Duration,
) -> Result<i64> {
    let stmt = client.prepare(IDEMPOTENCY_PRUNE).await?;
    let ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    Ok(client
        .query_one(&stmt, &[&ms, &batch])
        .await?
        .get("dropped"))
}

/// The janitor duty: unique keys, finished cancellation requests, finished handed-over
/// attempts and old idempotency keys, a batch of each per pass, resuming where it stopped.
pub struct Janitor {
    pub batch: i64,
    pub retention: std::time::Duration,
    pub idempotency_retention: std::time::Duration,
    pub every: std::time::Duration,
    unique: Option<(String, String)>,
    cancels: Option<i64>,
}

impl Janitor {
    pub fn new(config: &LeaderConfig) -> Janitor {
        Janitor {
            batch: config.prune_batch,
            retention: config.retention,
            idempotency_retention: config.idempotency_retention,
            every: config.prune_interval,
            unique: None,
            cancels: None,
        }
    }
}

impl Duty for Janitor {
    fn name(&self) -> &'static str {
        "janitor"
    }

    fn interval(&self) -> std::time::Duration {
        self.every
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            let batch = self.batch;
            let u = prune_unique(client, self.unique.as_ref(), batch).await?;
            let c = prune_cancels(client, self.cancels.unwrap_or(0), batch, self.retention).await?;
            let l = prune_long_leases(client, batch, self.retention).await?;
            let i = prune_idempotency_keys(client, batch, self.idempotency_retention).await?;
            if u.released + c.dropped + l + i > 0 {
                tracing::info!(
                    keys = u.released,
                    cancels = c.dropped,
                    handed_over = l,
                    idempotency_keys = i,
                    "released unique keys, finished cancellation requests, old idempotency keys"
                );
            }
            let more = u.after.is_some() || c.after.is_some() || l >= batch || i >= batch;
            (self.unique, self.cancels) = (u.after, c.after);
            Ok(if more { Next::Now } else { Next::Idle })
        })
    }
}
