//! Unique jobs: enqueue that answers duplicates with the holder's id.
//!
//! The key table is only written by enqueue; claim and complete never touch it. A key is
//! released lazily: when an enqueue meets a held key, it asks whether the holder still holds
//! it (pending, scheduled, running, or completed within its period) and, if not, removes the
//! key and enqueues again. So finishing a job costs nothing extra, and a duplicate costs one
//! lookup of its holder.

use std::time::{Duration, SystemTime};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::lookup::JobState;

pub(crate) const ENQUEUE_UNIQUE: &str = include_str!("sql/enqueue_unique.sql");
const UNIQUE_HOLDER: &str = include_str!("sql/unique_holder.sql");
const UNIQUE_RELEASE: &str = include_str!("sql/unique_release.sql");

/// Rounds of key takeover before a batch gives up (a key flapping between enqueuers).
const TAKEOVER_ROUNDS: usize = 3;

/// The answer for one job of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The new job's id, or the id of the job holding the unique key.
    pub id: i64,
    pub duplicate: bool,
}

impl Engine {
    /// Enqueues a batch in which jobs may carry unique keys. Duplicates do not abort the
    /// batch: each answers the holder's id with `duplicate: true`.
    pub async fn enqueue_many(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let mut out: Vec<Option<Enqueued>> = vec![None; jobs.len()];
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        for round in 0..=TAKEOVER_ROUNDS {
            if pending.is_empty() {
                break;
            }
            let batch_jobs: Vec<NewJob> = pending.iter().map(|&i| jobs[i].clone()).collect();
            let client = self.pool().get().await?;
            let refs: Vec<&NewJob> = batch_jobs.iter().collect();
            let batch = self.enqueue_batch(&**client, &refs, false).await?;
            let client = self
                .writer(client, self.lanes_commit_async(batch.lanes.iter().copied()))
                .await?;
            let stmt = client.prepare_cached(ENQUEUE_UNIQUE).await?;
            let rows = client.query(&stmt, &batch.params_unique()).await?;
            drop(client);
            self.signals().growth().grew();
            let mut retry = Vec::new();
            self.counters().enqueued(
                rows.iter()
                    .enumerate()
                    .filter(|(_, r)| !r.get::<_, bool>("duplicate"))
                    .map(|(k, _)| batch.job_at(k)),
            );
            for (&i, row) in pending.iter().zip(rows.iter()) {
                let (id, duplicate): (Option<i64>, bool) =
                    (row.get("job_id"), row.get("duplicate"));
                if !duplicate {
                    out[i] = id.map(|id| Enqueued { id, duplicate });
                    continue;
                }
                let job = &jobs[i];
                let key = job
                    .unique_key
                    .as_deref()
                    .expect("only keyed jobs are duplicates");
                // The holder as of now (primary key), with the period it was enqueued with.
                let holder = match self.unique_holder(&job.queue, key).await? {
                    Some((h, period)) => Some((h, period)),
                    None => id.map(|h| (h, None)),
                };
                match holder {
                    Some((h, period))
                        if round == TAKEOVER_ROUNDS || self.still_holds(h, period).await? =>
                    {
                        out[i] = Some(Enqueued {
                            id: h,
                            duplicate: true,
                        });
                    }
                    Some((h, _)) => {
                        let client = self.pool().get().await?;
                        client
                            .execute(UNIQUE_RELEASE, &[&job.queue, &key, &h])
                            .await?;
                        retry.push(i);
                    }
                    // Released between the statement and the lookup: try again.
                    None => retry.push(i),
                }
            }
            pending = retry;
        }
        out.into_iter()
            .enumerate()
            .map(|(i, e)| {
                e.ok_or_else(|| {
                    Error::Conflict(format!(
                        "unique key of job {i} changed hands too often to enqueue it"
                    ))
                })
            })
            .collect()
    }

    async fn unique_holder(
        &self,
        queue: &str,
        key: &str,
    ) -> Result<Option<(i64, Option<Duration>)>> {
        let client = self.pool().get().await?;
        Ok(client
            .query_opt(UNIQUE_HOLDER, &[&queue, &key])
            .await?
            .map(|r| {
                let period: Option<i64> = r.get("period_ms");
                (
                    r.get("job_id"),
                    period.map(|ms| Duration::from_millis(ms.max(0) as u64)),
                )
            }))
    }

    /// Whether job `h` still holds its unique key: not finished, or completed within the
    /// period recorded with the key.
    async fn still_holds(&self, h: i64, period: Option<Duration>) -> Result<bool> {
        let info = match self.get_job(h).await {
            Ok(info) => info,
            Err(Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        Ok(match info.state {
            JobState::Pending | JobState::Scheduled | JobState::Running => true,
            JobState::Dead | JobState::Cancelled => false,
            JobState::Completed => {
                let finished = info.attempts.last().and_then(|a| a.finished_at);
                match (period, finished) {
                    (Some(p), Some(at)) => SystemTime::now()
                        .duration_since(at)
                        .map_or(true, |age| age < p),
                    _ => false,
                }
            }
        })
    }
}
