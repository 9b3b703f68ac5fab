//! Cancelling every job of a queue that matches a filter (kind, states): the jobs are found
//! by the listing's phases (one bounded statement per page, see listing.rs) and cancelled a
//! page at a time (`cancel_many.sql`, one statement per batch of at most
//! [`CANCEL_BATCH`]). A call stops after `limit` jobs and says whether more may match.

use std::collections::HashMap;

use crate::counters::Delta;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::{validate_kind, validate_queue_name};
use crate::listing::{Cursor, JobFilter, TextFilter};
use crate::lookup::JobState;

const CANCEL_MANY: &str = include_str!("sql/cancel_many.sql");

/// Jobs cancelled per statement.
pub const CANCEL_BATCH: usize = 1000;
/// Most jobs one `cancel_matching` call cancels.
pub const MAX_CANCEL: u32 = 100_000;
/// Listing statements one call may run looking for matches (a queue with a long history and
/// few matches): then it answers `has_more`.
const MAX_PAGES: usize = 1000;

/// Which of a queue's jobs to cancel. Empty `states`: pending, scheduled and running.
#[derive(Debug, Clone, Default)]
pub struct CancelFilter {
    pub kind: Option<String>,
    pub states: Vec<JobState>,
}

/// What `cancel_matching` did, by the state each job was in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CancelMatched {
    /// Removed from `scheduled`: they never run.
    pub scheduled: i64,
    /// Closed by the next claim that meets them; never handed out.
    pub pending: i64,
    /// Their workers are told (NOTIFY, heartbeats); their outcome decides.
    pub running: i64,
    /// The call stopped at its limit (or its scan budget): call again for the rest.
    pub has_more: bool,
}

impl Engine {
    /// Cancels up to `limit` jobs of `queue` matching `f` (see [`CancelFilter`]), as
    /// [`Engine::cancel`] does for one job. Nothing is written when the filter is invalid.
    pub async fn cancel_matching(
        &self,
        queue: &str,
        f: &CancelFilter,
        reason: Option<&str>,
        limit: u32,
    ) -> Result<CancelMatched> {
        validate_queue_name(queue)?;
        if let Some(k) = &f.kind {
            validate_kind(k)?;
        }
        if limit == 0 || limit > MAX_CANCEL {
            return Err(Error::InvalidArgument {
                field: "limit",
                reason: format!("{limit} is not in 1..={MAX_CANCEL}"),
            });
        }
        if let Some(s) = f.states.iter().find(|s| {
            !matches!(
                s,
                JobState::Pending | JobState::Scheduled | JobState::Running
            )
        }) {
            return Err(Error::InvalidArgument {
                field: "states",
                reason: format!(
                    "{} jobs cannot be cancelled; use pending, scheduled or running",
                    s.as_str()
                ),
            });
        }
        let mut out = CancelMatched::default();
        let mut done: usize = 0;
        let mut pages = 0;
        for state in [JobState::Scheduled, JobState::Pending, JobState::Running] {
            if !f.states.is_empty() && !f.states.contains(&state) {
                continue;
            }
            let filter = JobFilter {
                state: Some(state),
                kind: f.kind.clone(),
                since: None,
            };
            let mut cursor: Option<Cursor> = None;
            loop {
                if done >= limit as usize || pages >= MAX_PAGES {
                    out.has_more = true;
                    return Ok(out);
                }
                let want = CANCEL_BATCH.min(limit as usize - done);
                let page = self
                    .list_ids(queue, &filter, &TextFilter::default(), cursor, want)
                    .await?;
                pages += 1;
                if !page.jobs.is_empty() {
                    let ids: Vec<i64> = page.jobs.iter().map(|(id, _)| *id).collect();
                    let n = self.cancel_many(&ids, state, reason).await?;
                    done += ids.len();
                    match state {
                        JobState::Scheduled => out.scheduled += n,
                        JobState::Pending => out.pending += n,
                        _ => out.running += n,
                    }
                }
                match page.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// Cancels one batch of jobs listed in `state`; returns how many were recorded.
    async fn cancel_many(&self, ids: &[i64], state: JobState, reason: Option<&str>) -> Result<i64> {
        let client = self.pool().get().await?;
        let rows = client.query(CANCEL_MANY, &[&ids, &reason]).await?;
        let mut per_lane: HashMap<i32, Delta> = HashMap::new();
        let mut n = 0;
        for r in &rows {
            let (lane, was_scheduled, recorded): (Option<i32>, bool, bool) =
                (r.get("lane"), r.get("was_scheduled"), r.get("recorded"));
            n += i64::from(recorded);
            let Some(lane) = lane.filter(|_| recorded) else {
                continue;
            };
            // A running job is counted by its outcome, like a single cancel.
            let d = per_lane.entry(lane).or_default();
            if was_scheduled {
                d.scheduled -= 1;
                d.cancelled += 1;
            } else if state != JobState::Running {
                d.pending -= 1;
                d.cancelled += 1;
            }
        }
        for (lane, d) in per_lane {
            self.counters().add(lane, d);
        }
        Ok(n)
    }
}
