//! Lane cache: queue name -> its lanes (priority x shard) and defaults.
//!
//! Lane ids never change, so producers and claimers resolve them from memory; only a cache
//! miss costs statements. A priority's lanes are created on the first enqueue at that
//! priority, so claimers only visit lanes that can hold jobs; a claimer's view is refreshed
//! every second to pick up priorities first used by other processes.
//!
//! The cache also remembers, per lane, the tick at which a claim found it empty: until a
//! newer tick is known the lane cannot have anything new, and claims skip it. Skipping can
//! only delay a job until the next tick, never lose it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_postgres::GenericClient;

use crate::error::Result;

const QUEUE_ENSURE: &str = include_str!("sql/queue_ensure.sql");
const LANES_ENSURE: &str = include_str!("sql/lanes_ensure.sql");
const LANES_SELECT: &str = include_str!("sql/lanes_select.sql");

/// How stale a claimer's list of lanes may get.
const REFRESH: Duration = Duration::from_secs(1);

/// The lanes of one queue.
#[derive(Debug)]
pub struct QueueLanes {
    /// `by_priority[p]` = lane ids of priority p, one per shard (empty: never used).
    pub by_priority: [Vec<i32>; 4],
    pub max_attempts: i32,
    pub lease_ms: i32,
    /// A paused queue hands out nothing (claims see it within [`REFRESH`]).
    pub paused: bool,
    pub backoff: crate::job::Backoff,
    /// A lower priority's oldest waiting job, once older than this, is served before higher
    /// priorities (claim-time aging).
    pub aging: Duration,
    pub queue_id: i32,
    /// At most this many attempts running at once across servers (None: no limit).
    pub concurrency: Option<i32>,
    /// The queue's hot-path writes commit asynchronously (`Durability::Async`).
    pub async_commit: bool,
    loaded: Instant,
    next_shard: AtomicUsize,
    /// Lane -> tick at which a claim last found it empty.
    dry_at: Mutex<HashMap<i32, i64>>,
    /// Per priority: when a claim last visited its lanes (claim-time aging).
    visited: Mutex<[Instant; 4]>,
    /// Per priority: what the last head-age probe found (claim-time aging).
    heads: Mutex<[Head; 4]>,
}

/// The head of a priority's lanes as last probed.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    /// When the probe ran.
    checked: Option<Instant>,
    /// When the oldest waiting job reaches the queue's `aging` (None: nothing waits).
    aged_at: Option<Instant>,
}

impl QueueLanes {
    /// The priority `lane` belongs to (None: not a lane of this queue).
    pub fn priority_of(&self, lane: i32) -> Option<usize> {
        (0..4).find(|&p| self.by_priority[p].contains(&lane))
    }

    /// Picks the lane of `priority` for the next job (round-robin over shards).
    pub fn lane_for(&self, priority: u8) -> Option<i32> {
        let shards = &self.by_priority[priority as usize];
        if shards.is_empty() {
            return None;
        }
        Some(shards[self.next_shard.fetch_add(1, Ordering::Relaxed) % shards.len()])
    }

    /// Lanes worth visiting at `tick`, in claim order: priority 0 first — except that a
    /// priority whose oldest waiting job has waited longer than the queue's `aging` goes first
    /// (the longest-waiting first), so a flood of urgent jobs delays a lower-priority job by
    /// about `aging`, and never serves it before that. Within a priority, shards are rotated
    /// by a per-call offset so concurrent claimers spread out.
    pub fn claim_order(&self, tick: i64) -> Vec<i32> {
        let offset = self.next_shard.fetch_add(1, Ordering::Relaxed);
        let dry = self.dry_at.lock().expect("dry lanes");
        let heads = *self.heads.lock().expect("heads");
        let now = Instant::now();
        let aged = |p: usize| heads[p].aged_at.filter(|at| *at <= now);
        let mut prios: Vec<usize> = (0..4).collect();
        // Stable sort: aged priorities first, the longest-waiting of them first.
        prios.sort_by_key(|&p| match aged(p) {
            Some(at) if !self.by_priority[p].is_empty() => (0, Some(at)),
            _ => (1, None),
        });
        let mut order = Vec::new();
        for shards in prios.iter().map(|&p| &self.by_priority[p]) {
            let n = shards.len();
            order.extend(
                (0..n)
                    .map(|i| shards[(offset + i) % n])
                    .filter(|lane| tick == 0 || dry.get(lane).is_none_or(|&at| at < tick)),
            );
        }
        order
    }

    /// Priorities whose heads should be probed now: lower priorities no claim has reached
    /// for aging/2, not probed for aging/4, whose head's age is not known yet. In a steady
    /// flood that is one small statement per queue and process every aging/4; a queue whose
    /// lower priorities get served normally never probes.
    pub fn heads_to_probe(&self) -> Vec<(usize, Vec<i32>)> {
        if self.aging.is_zero() {
            return Vec::new();
        }
        let visited = *self.visited.lock().expect("visited");
        let heads = *self.heads.lock().expect("heads");
        let now = Instant::now();
        (1..4)
            .filter(|&p| {
                !self.by_priority[p].is_empty()
                    && now.duration_since(visited[p]) >= self.aging / 2
                    && heads[p].aged_at.is_none()
                    && heads[p]
                        .checked
                        .is_none_or(|at| now.duration_since(at) >= self.aging / 4)
            })
            .map(|p| (p, self.by_priority[p].clone()))
            .collect()
    }

    /// Records a head-age probe of priority `p`: its oldest job had waited `waited` (None:
    /// nothing waits).
    pub fn record_head(&self, p: usize, waited: Option<Duration>) {
        let now = Instant::now();
        self.heads.lock().expect("heads")[p] = Head {
            checked: Some(now),
            aged_at: waited.map(|w| now + self.aging.saturating_sub(w)),
        };
    }

    /// Records which lanes a claim found empty. `asked` in order, `got` rows per lane, the
    /// claim wanted `max` and the process knew tick `tick` before it ran. Lanes visited and
    /// left short are dry; the lane that filled the batch and those after it are unknown.
    pub fn record_claim(&self, asked: &[i32], got: &HashMap<i32, usize>, max: usize, tick: i64) {
        let total: usize = got.values().sum();
        let mut dry = self.dry_at.lock().expect("dry lanes");
        let mut visited = self.visited.lock().expect("visited");
        let now = Instant::now();
        let mut heads = self.heads.lock().expect("heads");
        for lane in asked {
            if let Some(p) = self.priority_of(*lane) {
                visited[p] = now;
                // Served: its head moved, its age must be probed again if it starves again.
                heads[p] = Head::default();
            }
            let n = got.get(lane).copied().unwrap_or(0);
            if total >= max && n > 0 {
                // This lane filled the batch; it may hold more. Later lanes were not visited.
                dry.remove(lane);
                break;
            }
            dry.insert(*lane, tick);
        }
    }
}

#[derive(Default)]
pub struct LaneCache {
    queues: RwLock<HashMap<String, Arc<QueueLanes>>>,
    /// Lanes of the cached queues that chose async durability: completions name lanes, not
    /// queues. A lane not cached counts as synchronous.
    async_lanes: RwLock<HashSet<i32>>,
}

impl LaneCache {
    /// The lanes of `queue` for enqueueing at `priority` (created if missing).
    ///
    /// `in_txn`: `client` is inside a transaction that may still roll back (a caller's
    /// `enqueue_tx`). Nothing read or created through it is cached then: other connections
    /// must not learn of a queue or lanes that may never commit (they would write jobs to
    /// lanes that do not exist, which no claimer visits). Their own `ON CONFLICT DO NOTHING`
    /// waits for the creating transaction instead. `Engine::enqueue_tx` first reads a queue
    /// it has not cached as committed, on a pooled connection, so this is the fallback.
    pub async fn for_enqueue<C: GenericClient>(
        &self,
        client: &C,
        queue: &str,
        priority: u8,
        in_txn: bool,
    ) -> Result<(Arc<QueueLanes>, i32)> {
        let cache = !in_txn;
        let mut q = self.get(client, queue, false, cache).await?;
        if q.loaded.elapsed() >= REFRESH {
            // Settings an enqueue applies (max_attempts, durability) follow changes made by
            // other processes within a second, as claims do.
            q = self.get(client, queue, true, cache).await?;
        }
        if let Some(lane) = q.lane_for(priority) {
            return Ok((q, lane));
        }
        // Twice: the first may find the queue itself gone (its creator rolled back after
        // this process had seen it); `get` then creates it again, and its lanes follow.
        for _ in 0..2 {
            client
                .execute(LANES_ENSURE, &[&queue, &i16::from(priority)])
                .await?;
            let q = self.get(client, queue, true, cache).await?;
            if let Some(lane) = q.lane_for(priority) {
                return Ok((q, lane));
            }
        }
        Err(crate::error::Error::NotFound {
            what: "queue lanes",
            id: format!("{queue} priority {priority}"),
        })
    }

    /// The lanes of `queue` at `priority` if cached and fresh: no statement.
    pub fn cached_for_enqueue(&self, queue: &str, priority: u8) -> Option<(Arc<QueueLanes>, i32)> {
        let q = self
            .queues
            .read()
            .expect("lane cache poisoned")
            .get(queue)
            .cloned()?;
        let lane = q.lane_for(priority)?;
        (q.loaded.elapsed() < REFRESH).then_some((q, lane))
    }

    /// The lanes of `queue` for claiming, refreshed every second.
    pub async fn for_claim<C: GenericClient>(
        &self,
        client: &C,
        queue: &str,
    ) -> Result<Arc<QueueLanes>> {
        let q = self.get(client, queue, false, true).await?;
        if q.loaded.elapsed() < REFRESH {
            return Ok(q);
        }
        self.get(client, queue, true, true).await
    }

    /// The queue's lanes and settings, from the cache unless `reload`; the queue is created
    /// when this process has not seen it, or when it is gone (a queue whose creating
    /// transaction rolled back after this process had seen it). Stored in the cache when
    /// `cache`.
    async fn get<C: GenericClient>(
        &self,
        client: &C,
        queue: &str,
        reload: bool,
        cache: bool,
    ) -> Result<Arc<QueueLanes>> {
        let cached = self
            .queues
            .read()
            .expect("lane cache poisoned")
            .get(queue)
            .cloned();
        if let (Some(q), false) = (&cached, reload) {
            return Ok(q.clone());
        }
        if cached.is_none() {
            client.execute(QUEUE_ENSURE, &[&queue]).await?;
        }
        let mut rows = client.query(LANES_SELECT, &[&queue]).await?;
        if rows.is_empty() && cached.is_some() {
            client.execute(QUEUE_ENSURE, &[&queue]).await?;
            rows = client.query(LANES_SELECT, &[&queue]).await?;
        }
        self.build(queue, &rows, cached, cache)
    }

    /// The lanes of `queue` at `priority` as committed, read on `client` (not in a caller's
    /// transaction) and cached; `None` when the queue or the priority's lanes are not
    /// committed yet. Never creates, so never waits on another transaction's insert.
    pub async fn committed_for_enqueue<C: GenericClient>(
        &self,
        client: &C,
        queue: &str,
        priority: u8,
    ) -> Result<Option<(Arc<QueueLanes>, i32)>> {
        let rows = client.query(LANES_SELECT, &[&queue]).await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let cached = self
            .queues
            .read()
            .expect("lane cache poisoned")
            .get(queue)
            .cloned();
        let q = self.build(queue, &rows, cached, true)?;
        Ok(q.lane_for(priority).map(|lane| (q, lane)))
    }

    /// A queue's lanes and settings from its LANES_SELECT rows, keeping what the cached
    /// entry learned (dry lanes, visits, heads); stored in the cache when `cache`.
    fn build(
        &self,
        queue: &str,
        rows: &[tokio_postgres::Row],
        cached: Option<Arc<QueueLanes>>,
        cache: bool,
    ) -> Result<Arc<QueueLanes>> {
        let mut by_priority: [Vec<i32>; 4] = Default::default();
        let first = rows.first().ok_or_else(|| crate::error::Error::NotFound {
            what: "queue",
            id: queue.to_string(),
        })?;
        for row in rows {
            if let Some(lane) = row.get::<_, Option<i32>>("lane") {
                let priority: i16 = row.get("priority");
                by_priority[priority as usize].push(lane);
            }
        }
        let (max_attempts, lease_ms, paused) = (
            first.get("max_attempts"),
            first.get("lease_ms"),
            first.get("paused"),
        );
        let backoff = crate::job::Backoff {
            base: Duration::from_millis(first.get::<_, i32>("backoff_base_ms") as u64),
            cap: Duration::from_millis(first.get::<_, i32>("backoff_cap_ms") as u64),
        };
        let aging = Duration::from_millis(first.get::<_, i32>("aging_ms") as u64);
        let (queue_id, concurrency, async_commit) = (
            first.get("queue_id"),
            first.get("concurrency"),
            first.get("async_commit"),
        );
        let dry = cached
            .as_ref()
            .map(|q| q.dry_at.lock().expect("dry lanes").clone())
            .unwrap_or_default();
        let visited = cached
            .as_ref()
            .map(|q| *q.visited.lock().expect("visited"))
            .unwrap_or([Instant::now(); 4]);
        let heads = cached
            .map(|q| *q.heads.lock().expect("heads"))
            .unwrap_or_default();
        let lanes = Arc::new(QueueLanes {
            by_priority,
            max_attempts,
            lease_ms,
            paused,
            backoff,
            aging,
            queue_id,
            concurrency,
            async_commit,
            loaded: Instant::now(),
            next_shard: AtomicUsize::new(0),
            dry_at: Mutex::new(dry),
            visited: Mutex::new(visited),
            heads: Mutex::new(heads),
        });
        if !cache {
            return Ok(lanes);
        }
        self.mark_async(&lanes, async_commit);
        self.queues
            .write()
            .expect("lane cache poisoned")
            .insert(queue.to_string(), lanes.clone());
        Ok(lanes)
    }

    /// Forgets a queue (after its settings or shard count changed); its lanes count as
    /// synchronous until it is loaded again.
    pub fn invalidate(&self, queue: &str) {
        let gone = self
            .queues
            .write()
            .expect("lane cache poisoned")
            .remove(queue);
        if let Some(q) = gone {
            self.mark_async(&q, false);
        }
    }

    /// True if `queue` is cached and chose async durability.
    pub fn is_async(&self, queue: &str) -> bool {
        self.queues
            .read()
            .expect("lane cache poisoned")
            .get(queue)
            .is_some_and(|q| q.async_commit)
    }

    /// True if every lane of `lanes` (at least one) belongs to a cached queue that chose
    /// async durability: only then may a batch over them commit asynchronously.
    pub fn all_async(&self, lanes: impl IntoIterator<Item = i32>) -> bool {
        let set = self.async_lanes.read().expect("async lanes poisoned");
        let mut any = false;
        for lane in lanes {
            if !set.contains(&lane) {
                return false;
            }
            any = true;
        }
        any
    }

    fn mark_async(&self, q: &QueueLanes, async_commit: bool) {
        let mut set = self.async_lanes.write().expect("async lanes poisoned");
        for &lane in q.by_priority.iter().flatten() {
            if async_commit {
                set.insert(lane);
            } else {
                set.remove(&lane);
            }
        }
    }
}

/// Lanes this process is claiming right now. A second claim of the same lane from this
/// process could only lose the lane's try-lock in the database (0.7 ms of server CPU for a
/// round trip that returns nothing: cursor and tick probes over every partition), so it
/// skips the lane without asking. Other processes still meet at the database's lock.
#[derive(Default)]
pub struct BusyLanes(Mutex<HashSet<i32>>);

impl BusyLanes {
    /// The lanes of `order` a claim may visit, keeping their order: none that another local
    /// claim holds. Of each priority (`group`) it holds only the first free shard; the other
    /// free shards follow it unheld, visited only if the held one runs short (they may then
    /// lose the database's try-lock to a local claim that takes them meanwhile, which
    /// skips them). Holding every free shard made one claim, usually filled by its first
    /// lane, leave concurrent claimers nothing to do: a queue's claims in one process ran
    /// one at a time, with the CPU a quarter idle (docs/performance.md, 2026-11-23).
    pub fn take(&self, order: Vec<i32>, group: impl Fn(i32) -> Option<usize>) -> BusyGuard<'_> {
        let mut busy = self.0.lock().expect("busy lanes");
        let mut held_group = [false; 4];
        let (mut lanes, mut held) = (Vec::new(), Vec::new());
        for l in order {
            if busy.contains(&l) {
                continue;
            }
            match group(l) {
                Some(g) if held_group[g] => {}
                g => {
                    busy.insert(l);
                    held.push(l);
                    if let Some(g) = g {
                        held_group[g] = true;
                    }
                }
            }
            lanes.push(l);
        }
        BusyGuard {
            busy: self,
            lanes,
            held,
        }
    }
}

/// Lanes one claim visits (`lanes`, in claim order) and holds (`held`, released when
/// dropped, also when the claim fails).
pub struct BusyGuard<'a> {
    busy: &'a BusyLanes,
    pub lanes: Vec<i32>,
    held: Vec<i32>,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        let mut busy = self.busy.0.lock().expect("busy lanes");
        for l in &self.held {
            busy.remove(l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BusyLanes;

    /// Lanes 10, 11 are priority 0's shards, 20, 21 priority 1's.
    fn priority(lane: i32) -> Option<usize> {
        Some((lane / 10 - 1) as usize)
    }

    #[test]
    fn a_claim_holds_one_shard_per_priority_and_visits_the_rest() {
        let busy = BusyLanes::default();
        let a = busy.take(vec![10, 11, 20, 21], priority);
        assert_eq!(a.lanes, vec![10, 11, 20, 21]);
        assert_eq!(a.held, vec![10, 20]);
        // A concurrent claim gets the shards nobody holds, first in its order.
        let b = busy.take(vec![11, 10, 21, 20], priority);
        assert_eq!(b.lanes, vec![11, 21]);
        assert_eq!(b.held, vec![11, 21]);
        // Everything held: nothing to visit, so no round trip.
        assert!(busy.take(vec![10, 11, 20, 21], priority).lanes.is_empty());
        drop(a);
        let c = busy.take(vec![10, 11, 20, 21], priority);
        assert_eq!(
            (c.lanes.clone(), c.held.clone()),
            (vec![10, 20], vec![10, 20])
        );
    }
}
