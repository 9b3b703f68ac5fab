//! Rescuer: closes attempts whose lease expired without an outcome (retry or DLQ).

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::duty::{Duty, DutyFuture, Next};
use super::LeaderConfig;
use crate::error::Result;

const RESCUE_LOCK: &str = include_str!("../sql/rescue_lock.sql");
const RESCUE: &str = include_str!("../sql/rescue.sql");
const RESCUE_LONG_LOCK: &str = include_str!("../sql/rescue_long_lock.sql");
const LONG_LEASES_DROP: &str = include_str!("../sql/long_leases_drop.sql");
const RESCUE_HANDED: &str = include_str!("../sql/rescue_handed.sql");
const RESCUE_MARK: &str = include_str!("../sql/rescue_mark.sql");
const READ_MARK: &str = "SELECT rescue_mark FROM pgferry.leader_state";
/// Receipts examined per statement.
const RECEIPTS_PER_PASS: i64 = 500;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RescueReport {
    /// Expired receipts looked at.
    pub receipts: i64,
    /// Attempts in those of them that still had an attempt without an outcome (a receipt
    /// whose attempts all have one is dismissed whole, its attempts not examined).
    pub examined: i64,
    pub retried: i64,
    pub dead: i64,
    /// Rescued attempts (retried + dead) per engine queue name, for metrics.
    pub per_queue: Vec<(String, i64)>,
}

impl RescueReport {
    /// Adds one statement's answer (rescue.sql's columns).
    fn add(&mut self, receipts: usize, row: &tokio_postgres::Row) {
        self.receipts += receipts as i64;
        self.examined += row.get::<_, i64>("examined");
        self.retried += row.get::<_, i64>("retried");
        self.dead += row.get::<_, i64>("dead");
        let names: Vec<String> = row.get("queues");
        let counts: Vec<i64> = row.get("queue_counts");
        for (name, n) in names.into_iter().zip(counts) {
            match self.per_queue.iter_mut().find(|(q, _)| *q == name) {
                Some((_, m)) => *m += n,
                None => self.per_queue.push((name, n)),
            }
        }
    }
}

/// Where the rescuer reports what it rescued (the leader's subscribers: server metrics).
pub type RescueFeed = tokio::sync::broadcast::Sender<Arc<RescueReport>>;

/// One pass: lock the expired receipts after the mark, rescue their open attempts, then
/// advance the mark. Locking first is what makes the first outcome win against a worker's
/// completion of the same receipt (see pgferry.complete()).
///
/// Both statements run in one transaction so they share `now()`: a receipt whose lease was
/// still running when the pass looked is still running for the mark. (As two transactions,
/// a lease expiring in between let the mark step over a receipt nobody had examined, and its
/// jobs were never rescued — found by a test that hung waiting for the rescue.)
pub async fn rescue(client: &mut Client, settle: Duration) -> Result<RescueReport> {
    let tx = client.transaction().await?;
    // Every read here has an index made for it (receipts_id, BRIN). The current segment's
    // partitions were empty when last analyzed (opened fresh, ADR 0009) and grow faster than
    // autoanalyze follows, so statistics would pick a Seq Scan of the whole current segment.
    tx.batch_execute("SET LOCAL enable_seqscan = off").await?;
    let mark: i64 = tx.query_one(READ_MARK, &[]).await?.get("rescue_mark");
    let locked = tx
        .query_one(RESCUE_LOCK, &[&mark, &RECEIPTS_PER_PASS])
        .await?;
    let ids: Vec<i64> = locked.get("ids");
    let mut report = RescueReport::default();
    if !ids.is_empty() {
        let (lo, hi): (i64, i64) = (locked.get("lo"), locked.get("hi"));
        let row = tx.query_one(RESCUE, &[&ids, &lo, &hi]).await?;
        report.add(ids.len(), &row);
    }
    // Without expired receipts the mark may still move over receipts closed normally.
    let upto: i64 = locked.get::<_, Option<i64>>("hi").unwrap_or(i64::MAX);
    let settle_ms = i64::try_from(settle.as_millis()).unwrap_or(i64::MAX);
    tx.execute(RESCUE_MARK, &[&upto, &settle_ms]).await?;
    tx.commit().await?;

    // Attempts whose heartbeats stopped: the mark has passed their receipts, so they are
    // found through long_leases instead.
    let tx = client.transaction().await?;
    let locked = tx
        .query_one(RESCUE_LONG_LOCK, &[&RECEIPTS_PER_PASS])
        .await?;
    let ids: Vec<i64> = locked.get("ids");
    if !ids.is_empty() {
        let (lo, hi): (i64, i64) = (locked.get("lo"), locked.get("hi"));
        let row = tx.query_one(RESCUE, &[&ids, &lo, &hi]).await?;
        report.add(ids.len(), &row);
        tx.execute(LONG_LEASES_DROP, &[&ids]).await?;
    }
    tx.commit().await?;

    // Handed-over attempts (ADR 0008) whose heartbeats stopped: their receipt may be gone,
    // their long_leases row decides (first outcome wins on the row itself).
    let row = client
        .query_one(RESCUE_HANDED, &[&RECEIPTS_PER_PASS])
        .await?;
    let examined = row.get::<_, i64>("examined");
    if examined > 0 {
        report.add(0, &row);
    }
    Ok(report)
}

/// The rescuer duty; every pass that rescued something is reported on `feed`.
pub struct Rescuer {
    pub settle: Duration,
    pub every: Duration,
    pub feed: RescueFeed,
}

impl Rescuer {
    pub fn new(config: &LeaderConfig, feed: RescueFeed) -> Rescuer {
        Rescuer {
            settle: config.claim_settle,
            every: config.rescue_interval,
            feed,
        }
    }
}

impl Duty for Rescuer {
    fn name(&self) -> &'static str {
        "rescuer"
    }

    fn interval(&self) -> Duration {
        self.every
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            let rep = rescue(client, self.settle).await?;
            let more = rep.receipts >= RECEIPTS_PER_PASS;
            if rep.retried + rep.dead > 0 {
                tracing::info!(
                    retried = rep.retried,
                    dead = rep.dead,
                    "rescued expired leases"
                );
                // No subscriber is fine (an embedding application without metrics).
                let _ = self.feed.send(Arc::new(rep));
            }
            Ok(if more { Next::Now } else { Next::Idle })
        })
    }
}
