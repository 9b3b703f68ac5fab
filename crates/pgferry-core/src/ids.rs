//! Job ids, reserved in blocks, and the segment fresh rows are written to.
//!
//! The hot enqueue is a binary COPY (ADR 0006), which cannot return generated ids, so the
//! engine hands out ids itself: each value of `job_id_seq` is a multiple of [`BLOCK`] and
//! owns the [`BLOCK`] ids from it. A batch takes one block per lane (more for a lane with more
//! than [`BLOCK`] jobs), and the first row of each block is the block's anchor — the only
//! fresh row indexed by id (`ready_by_id`); the others are found through it
//! (`pgferry.ready_rows`). Blocks are reserved [`REFILL`] at a time, so a reservation costs one
//! statement per dozens of batches, and it is made in the background on a pooled connection
//! of its own once fewer than [`LOW`] are left, so that no enqueue waits for it (a lone
//! producer of single jobs used to pay a second round trip once every 65 requests: its p99).
//!
//! COPY also cannot compute the current segment per statement the way an INSERT's InitPlan
//! does, so the engine remembers it: every claim returns it (the receipt's segment), and a
//! process that only enqueues re-reads it after [`SEGMENT_TTL`]. A row written to a segment sealed
//! meanwhile is still counted and claimed normally; the rotator frees a segment only after
//! re-checking it once it is detached, and a COPY into a detached segment fails and is
//! retried with a fresh segment (`enqueue/log_write.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio_postgres::GenericClient;

use crate::error::Result;

/// Ids per block; must match the INCREMENT of `pgferry.job_id_seq` (migrations/0001_baseline.sql).
pub const BLOCK: i64 = 256;
/// Extra blocks reserved with each refill.
const REFILL: usize = 64;
/// Blocks left below which a take starts a refill in the background.
const LOW: usize = 16;
/// How long the engine trusts its idea of the current segment.
const SEGMENT_TTL: Duration = Duration::from_secs(5);

const RESERVE: &str = include_str!("sql/reserve_id_blocks.sql");
const CURRENT_SEGMENT: &str = include_str!("sql/current_segment.sql");

/// Reserved, unused block bases of this process (oldest first).
#[derive(Default)]
pub(crate) struct IdBlocks {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    free: Mutex<VecDeque<i64>>,
    /// A background refill is under way (at most one at a time).
    refilling: AtomicBool,
}

impl IdBlocks {
    /// Takes `n` block bases, reserving more on `client` first if this process has too few;
    /// when few are left, refills in the background on a connection of `pool`.
    pub(crate) async fn take<C: GenericClient>(
        &self,
        client: &C,
        pool: &Pool,
        n: usize,
    ) -> Result<Vec<i64>> {
        if let Some((bases, left)) = self.try_take(n) {
            if left < LOW {
                self.refill_behind(pool);
            }
            return Ok(bases);
        }
        let fresh = reserve(client, n + REFILL).await?;
        let mut free = self.shared.free.lock().expect("id blocks");
        free.extend(fresh);
        Ok(free.drain(..n).collect())
    }

    /// `n` bases and how many are left, if there are `n`.
    fn try_take(&self, n: usize) -> Option<(Vec<i64>, usize)> {
        let mut free = self.shared.free.lock().expect("id blocks");
        (free.len() >= n).then(|| {
            let bases = free.drain(..n).collect();
            (bases, free.len())
        })
    }

    /// Reserves [`REFILL`] blocks on a connection of `pool` without anyone waiting for it.
    /// A refill that fails costs nothing but the next take that runs short reserving itself.
    fn refill_behind(&self, pool: &Pool) {
        if self.shared.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (shared, pool) = (self.shared.clone(), pool.clone());
        tokio::spawn(async move {
            let fresh = async {
                let client = pool.get().await?;
                reserve(&**client, REFILL).await
            }
            .await;
            match fresh {
                Ok(bases) => shared.free.lock().expect("id blocks").extend(bases),
                Err(e) => tracing::debug!(error = %e, "background id block refill failed"),
            }
            shared.refilling.store(false, Ordering::Release);
        });
    }
}

/// Reserves `n` fresh blocks of ids (one statement).
async fn reserve<C: GenericClient>(client: &C, n: usize) -> Result<Vec<i64>> {
    let want = i32::try_from(n).unwrap_or(i32::MAX);
    let rows = client.query(RESERVE, &[&want]).await?;
    Ok(rows.iter().map(|r| r.get::<_, i64>("base")).collect())
}

/// This process's idea of the current segment.
#[derive(Default)]
pub(crate) struct SegmentCache {
    current: Mutex<Option<(i16, Instant)>>,
}

impl SegmentCache {
    pub(crate) async fn get<C: GenericClient>(&self, client: &C) -> Result<i16> {
        if let Some((segment, at)) = *self.current.lock().expect("segment cache") {
            if at.elapsed() < SEGMENT_TTL {
                return Ok(segment);
            }
        }
        let segment: i16 = client.query_one(CURRENT_SEGMENT, &[]).await?.get("segment");
        *self.current.lock().expect("segment cache") = Some((segment, Instant::now()));
        Ok(segment)
    }

    /// A statement just told us the current segment (a claim's receipt segment).
    pub(crate) fn observe(&self, segment: i16) {
        *self.current.lock().expect("segment cache") = Some((segment, Instant::now()));
    }

    pub(crate) fn forget(&self) {
        *self.current.lock().expect("segment cache") = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (a generous bound, not a timing assertion) until `blocks` has more than `n`.
    async fn until_more_than(blocks: &IdBlocks, n: usize) {
        for _ in 0..500 {
            if blocks.shared.free.lock().unwrap().len() > n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no background refill landed");
    }

    #[tokio::test]
    async fn blocks_running_low_are_refilled_behind_the_takes() {
        let db = pgferry_testkit::test_db().await;
        let setup = db.connect().await;
        setup
            .batch_execute(
                "CREATE SCHEMA pgferry;
                 CREATE SEQUENCE pgferry.job_id_seq START 256 INCREMENT 256 MINVALUE 256",
            )
            .await
            .unwrap();
        let pool = db.pool(2);
        let blocks = IdBlocks::default();
        // The first take finds nothing and reserves on the caller's connection.
        let first = blocks.take(&setup, &pool, 1).await.unwrap();
        assert_eq!(first, vec![256]);
        // From here the caller's connection is dead: a take that reserved on it would fail.
        let (broken, conn) = db.config.connect(tokio_postgres::NoTls).await.unwrap();
        let task = tokio::spawn(conn);
        task.abort();
        let _ = task.await;
        let mut taken = first;
        for round in 0..3 {
            // Down to LOW - 1 left: the take that gets there starts a refill.
            while blocks.shared.free.lock().unwrap().len() >= LOW {
                taken.extend(blocks.take(&broken, &pool, 1).await.unwrap());
            }
            until_more_than(&blocks, LOW).await;
            assert!(
                blocks.shared.free.lock().unwrap().len() <= LOW + REFILL,
                "round {round}: one refill at a time"
            );
        }
        let mut unique = taken.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), taken.len(), "a block handed out twice");
        assert!(taken.iter().all(|b| b % BLOCK == 0));
    }
}
