//! Rescuer: closes attempts whose lease expired without an outcome (retry or DLQ).

use std::time::Duration;

use tokio_postgres::{Client, Config};

use super::{duty_loop, LeaderConfig};
use crate::error::Result;

const RESCUE_LOCK: &str = include_str!("../sql/rescue_lock.sql");
const RESCUE: &str = include_str!("../sql/rescue.sql");
const RESCUE_LONG_LOCK: &str = include_str!("../sql/rescue_long_lock.sql");
const LONG_LEASES_DROP: &str = include_str!("../sql/long_leases_drop.sql");
const RESCUE_MARK: &str = include_str!("../sql/rescue_mark.sql");
const READ_MARK: &str = "SELECT rescue_mark FROM pgferry.leader_state";
/// Receipts examined per statement.
const RECEIPTS_PER_PASS: i64 = 500;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RescueReport {
    /// Expired receipts looked at.
    pub receipts: i64,
    /// Attempts in them.
    pub examined: i64,
    pub retried: i64,
    pub dead: i64,
}

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
    let mark: i64 = tx.query_one(READ_MARK, &[]).await?.get(0);
    let locked = tx
        .query_one(RESCUE_LOCK, &[&mark, &RECEIPTS_PER_PASS])
        .await?;
    let ids: Vec<i64> = locked.get(0);
    let mut report = RescueReport::default();
    if !ids.is_empty() {
        let (lo, hi): (i64, i64) = (locked.get(1), locked.get(2));
        let row = tx.query_one(RESCUE, &[&ids, &lo, &hi]).await?;
        report = RescueReport {
            receipts: ids.len() as i64,
            examined: row.get(0),
            retried: row.get(1),
            dead: row.get(2),
        };
    }
    // Without expired receipts the mark may still move over receipts closed normally.
    let upto: i64 = locked.get::<_, Option<i64>>(2).unwrap_or(i64::MAX);
    let settle_ms = i64::try_from(settle.as_millis()).unwrap_or(i64::MAX);
    tx.execute(RESCUE_MARK, &[&upto, &settle_ms]).await?;
    tx.commit().await?;

    // Attempts whose heartbeats stopped: the mark has passed their receipts, so they are
    // found through long_leases instead.
    let tx = client.transaction().await?;
    let locked = tx
        .query_one(RESCUE_LONG_LOCK, &[&RECEIPTS_PER_PASS])
        .await?;
    let ids: Vec<i64> = locked.get(0);
    if !ids.is_empty() {
        let (lo, hi): (i64, i64) = (locked.get(1), locked.get(2));
        let row = tx.query_one(RESCUE, &[&ids, &lo, &hi]).await?;
        report.receipts += ids.len() as i64;
        report.examined += row.get::<_, i64>(0);
        report.retried += row.get::<_, i64>(1);
        report.dead += row.get::<_, i64>(2);
        tx.execute(LONG_LEASES_DROP, &[&ids]).await?;
    }
    tx.commit().await?;
    Ok(report)
}

pub async fn run(pg: Config, config: LeaderConfig) {
    let settle = config.claim_settle;
    duty_loop(
        pg,
        "rescuer",
        config.rescue_interval,
        move |mut client| async move {
            let r = rescue(&mut client, settle).await.map(|rep| {
                if rep.retried + rep.dead > 0 {
                    tracing::info!(
                        retried = rep.retried,
                        dead = rep.dead,
                        "rescued expired leases"
                    );
                }
                rep.receipts >= RECEIPTS_PER_PASS
            });
            (client, r)
        },
    )
    .await
}
