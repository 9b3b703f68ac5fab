//! Starting a batch of instances in one transaction (`Workflows::start_many`).
//!
//! An instance without a correlation, concurrency or rate key touches no shared row at its
//! start: its row and its picker row are all there is, so a batch of them is one set-based
//! statement (`sql/workflow/start_many.sql`), as a batch of jobs is one enqueue. Through
//! `wf_start` each instance cost several statements inside a plpgsql call, about 150 µs of
//! database time per instance against about 35 µs set-based (docs/performance.md,
//! "Starting instances in batches"). Instances with a key go through `wf_start` one by one,
//! in the same transaction, since their start reads and changes the key's rows.

use std::time::SystemTime;

use serde_json::Value;

use super::{Start, Started, Workflows};
use crate::error::{Error, Result};

const START_MANY: &str = include_str!("../sql/workflow/start_many.sql");

/// Most instances one `start_many` starts.
pub const MAX_START_BATCH: usize = 10_000;

impl Start {
    /// Starts with no key are set-based in a batch.
    fn plain(&self) -> bool {
        self.correlation_key.is_none() && self.concurrency_key.is_none() && self.rate_key.is_none()
    }
}

impl Workflows {
    /// Starts `starts` in one transaction: all of them, or (on any error) none. Returns
    /// them in the given order; one with a correlation key whose active instance exists is
    /// that instance, `duplicate`. Every start is validated before anything is written.
    pub async fn start_many(&self, starts: &[Start]) -> Result<Vec<Started>> {
        if starts.len() > MAX_START_BATCH {
            return Err(Error::BatchTooLarge {
                size: starts.len(),
                limit: MAX_START_BATCH,
            });
        }
        for s in starts {
            s.validate()?;
        }
        if starts.is_empty() {
            return Ok(Vec::new());
        }
        // Keyed starts lock their keys' rows in the batch's order, outcomes in their
        // instances' order: should Postgres abort the batch as a deadlock victim, nothing
        // of it was written, and it runs again (up to three times in all).
        super::client::again_if_deadlocked(|| self.start_many_once(starts)).await
    }

    async fn start_many_once(&self, starts: &[Start]) -> Result<Vec<Started>> {
        let plain: Vec<&Start> = starts.iter().filter(|s| s.plain()).collect();
        let mut client = self.pool().get().await?;
        let tx = client.transaction().await?;
        let mut ids = Vec::with_capacity(plain.len());
        if !plain.is_empty() {
            let kinds: Vec<&str> = plain.iter().map(|s| s.kind.as_str()).collect();
            let queues: Vec<&str> = plain.iter().map(|s| s.queue.as_str()).collect();
            let steps: Vec<&str> = plain.iter().map(|s| s.step.as_str()).collect();
            let inputs: Vec<&Value> = plain.iter().map(|s| &s.input).collect();
            let states: Vec<Option<&Value>> = plain.iter().map(|s| s.state.as_ref()).collect();
            let priorities: Vec<i16> = plain.iter().map(|s| i16::from(s.priority)).collect();
            let run_ats: Vec<Option<SystemTime>> = plain.iter().map(|s| s.run_at).collect();
            let attempts: Vec<Option<i32>> = plain.iter().map(|s| s.max_attempts).collect();
            let stmt = tx.prepare_cached(START_MANY).await?;
            let rows = tx
                .query(
                    &stmt,
                    &[
                        &kinds,
                        &queues,
                        &steps,
                        &inputs,
                        &states,
                        &priorities,
                        &run_ats,
                        &attempts,
                    ],
                )
                .await?;
            for r in &rows {
                ids.push(r.try_get::<_, i64>("id")?);
            }
        }
        // The statement returned one id per plain start, in their order.
        let mut plain_ids = ids.into_iter();
        let mut out = Vec::with_capacity(starts.len());
        for s in starts {
            let started = match s.plain() {
                true => plain_ids.next().map(|id| Started {
                    id,
                    duplicate: false,
                }),
                false => Some(Self::start_tx(&*tx, s).await?),
            };
            out.extend(started);
        }
        if out.len() != starts.len() {
            return Err(Error::Conflict(format!(
                "{} instances started of {}; nothing committed",
                out.len(),
                starts.len()
            )));
        }
        tx.commit().await?;
        Ok(out)
    }
}
