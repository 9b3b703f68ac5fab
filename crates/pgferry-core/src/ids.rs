//! Job ids, reserved in blocks, and the segment fresh rows are written to.
//!
//! The hot enqueue is a binary COPY (ADR 0006), which cannot return generated ids, so the
//! engine hands out ids itself: each value of `job_id_seq` is a multiple of [`BLOCK`] and
//! owns the [`BLOCK`] ids from it. A batch takes one block per lane (more for a lane with more
//! than [`BLOCK`] jobs), and the first row of each block is the block's anchor — the only
//! fresh row indexed by id (`ready_by_id`); the others are found through it
//! (`pgferry.ready_rows`). Blocks are reserved [`REFILL`] at a time, so a reservation costs one
//! statement per dozens of batches.
//!
//! COPY also cannot compute the current segment per statement the way an INSERT's InitPlan
//! does, so the engine remembers it: every claim returns it (the receipt's segment), and a
//! process that only enqueues re-reads it after [`SEGMENT_TTL`]. A row written to a segment sealed
//! meanwhile is still counted and claimed normally; the rotator frees a segment only after
//! re-checking it once it is detached, and a COPY into a detached segment fails and is
//! retried with a fresh segment (`enqueue/log_write.rs`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_postgres::GenericClient;

use crate::error::Result;

/// Ids per block; must match the INCREMENT of `pgferry.job_id_seq` (migrations/0001_baseline.sql).
pub const BLOCK: i64 = 256;
/// Extra blocks reserved with each refill.
const REFILL: usize = 64;
/// How long the engine trusts its idea of the current segment.
const SEGMENT_TTL: Duration = Duration::from_secs(5);

const RESERVE: &str = include_str!("sql/reserve_id_blocks.sql");
const CURRENT_SEGMENT: &str = include_str!("sql/current_segment.sql");

/// Reserved, unused block bases of this process (oldest first).
#[derive(Default)]
pub(crate) struct IdBlocks {
    free: Mutex<VecDeque<i64>>,
}

impl IdBlocks {
    /// Takes `n` block bases, reserving more first if this process has too few.
    pub(crate) async fn take<C: GenericClient>(&self, client: &C, n: usize) -> Result<Vec<i64>> {
        if let Some(bases) = self.try_take(n) {
            return Ok(bases);
        }
        let want = i32::try_from(n + REFILL).unwrap_or(i32::MAX);
        let rows = client.query(RESERVE, &[&want]).await?;
        let mut free = self.free.lock().expect("id blocks");
        free.extend(rows.iter().map(|r| r.get::<_, i64>("base")));
        Ok(free.drain(..n).collect())
    }

    fn try_take(&self, n: usize) -> Option<Vec<i64>> {
        let mut free = self.free.lock().expect("id blocks");
        (free.len() >= n).then(|| free.drain(..n).collect())
    }
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
