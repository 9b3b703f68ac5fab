//! Lane cache: queue name -> its lanes (priority x shard) and defaults.
//!
//! Lanes are created once per queue and never change id, so producers and claimers resolve
//! them from memory; only a cache miss costs statements. Shard choice is round-robin so a
//! producer spreads a batch over all shards of a priority.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tokio_postgres::GenericClient;

use crate::error::Result;

const QUEUE_ENSURE: &str = include_str!("sql/queue_ensure.sql");
const LANES_ENSURE: &str = include_str!("sql/lanes_ensure.sql");
const LANES_SELECT: &str = include_str!("sql/lanes_select.sql");

/// The lanes of one queue.
#[derive(Debug)]
pub struct QueueLanes {
    /// `by_priority[p]` = lane ids of priority p, one per shard.
    pub by_priority: [Vec<i32>; 4],
    pub max_attempts: i32,
    pub lease_ms: i32,
    next_shard: AtomicUsize,
}

impl QueueLanes {
    /// Picks the lane of `priority` for the next job (round-robin over shards).
    pub fn lane_for(&self, priority: u8) -> i32 {
        let shards = &self.by_priority[priority as usize];
        shards[self.next_shard.fetch_add(1, Ordering::Relaxed) % shards.len()]
    }

    /// Every lane in claim order: priority 0 first; within a priority, shards rotated by a
    /// per-call offset.
    pub fn claim_order(&self) -> Vec<i32> {
        let offset = self.next_shard.fetch_add(1, Ordering::Relaxed);
        let mut order = Vec::with_capacity(4 * self.shards());
        for shards in &self.by_priority {
            let n = shards.len();
            order.extend((0..n).map(|i| shards[(offset + i) % n]));
        }
        order
    }

    pub fn shards(&self) -> usize {
        self.by_priority[0].len()
    }
}

#[derive(Default)]
pub struct LaneCache {
    queues: RwLock<HashMap<String, Arc<QueueLanes>>>,
}

impl LaneCache {
    /// The lanes of `queue`, creating the queue on first use.
    pub async fn get<C: GenericClient>(&self, client: &C, queue: &str) -> Result<Arc<QueueLanes>> {
        if let Some(q) = self.queues.read().expect("lane cache poisoned").get(queue) {
            return Ok(q.clone());
        }
        client.execute(QUEUE_ENSURE, &[&queue]).await?;
        client.execute(LANES_ENSURE, &[&queue]).await?;
        let rows = client.query(LANES_SELECT, &[&queue]).await?;
        let mut by_priority: [Vec<i32>; 4] = Default::default();
        let (mut max_attempts, mut lease_ms) = (25, 60_000);
        for row in &rows {
            let priority: i16 = row.get(1);
            by_priority[priority as usize].push(row.get(0));
            max_attempts = row.get(3);
            lease_ms = row.get(4);
        }
        let lanes = Arc::new(QueueLanes {
            by_priority,
            max_attempts,
            lease_ms,
            next_shard: AtomicUsize::new(0),
        });
        self.queues
            .write()
            .expect("lane cache poisoned")
            .insert(queue.to_string(), lanes.clone());
        Ok(lanes)
    }

    /// Forgets a queue (after its settings or shard count changed).
    pub fn invalidate(&self, queue: &str) {
        self.queues
            .write()
            .expect("lane cache poisoned")
            .remove(queue);
    }
}
