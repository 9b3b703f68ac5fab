//! Job lookup (`get_job`) and cancellation: the cold paths that find a job by id.
//!
//! The log is append-only, so a job's state is derived, not stored: its attempts in `ready`,
//! their outcomes in `completions`, the lane cursor (claimed or not), and the small mutable
//! tables (`scheduled`, `dead`, `cancels`).

use std::time::SystemTime;

use serde_json::Value;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::outcome_code as oc;

const JOB_ATTEMPTS: &str = include_str!("sql/job_attempts.sql");
const JOB_SIDE: &str = include_str!("sql/job_side.sql");
const JOB_CLAIMED: &str = include_str!("sql/job_claimed.sql");
const CANCEL: &str = include_str!("sql/cancel.sql");
const JOB_RESULT: &str = include_str!("sql/job_result.sql");

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// In the log, not claimed yet.
    Pending,
    /// Waiting for its run time (first run, delayed retry or snooze).
    Scheduled,
    /// Claimed by a worker, no outcome yet.
    Running,
    Completed,
    /// Dead-lettered after its last attempt (or a non-retryable error).
    Dead,
    Cancelled,
}

impl JobState {
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Scheduled => "scheduled",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// One attempt and how it ended.
#[derive(Debug, Clone)]
pub struct AttemptInfo {
    pub attempt: i32,
    /// completed | failed | dead | cancelled | rescued | snoozed | running | pending
    pub outcome: &'static str,
    pub error: Option<String>,
    pub duration_ms: Option<i32>,
    pub finished_at: Option<SystemTime>,
}

#[derive(Debug, Clone)]
pub struct JobInfo {
    pub id: i64,
    pub queue: String,
    pub kind: String,
    pub state: JobState,
    pub args: Value,
    pub meta: Option<Value>,
    pub priority: i16,
    pub max_attempts: i32,
    pub enqueued_at: Option<SystemTime>,
    pub run_at: Option<SystemTime>,
    pub attempts: Vec<AttemptInfo>,
    pub cancel_requested: bool,
    /// What the completed attempt returned (only jobs that return a value have one).
    pub result: Option<Value>,
}

/// What a cancel request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    /// Removed from `scheduled`: it will never run.
    Unscheduled,
    /// Recorded: a pending job is closed by the next claim that meets it; a running worker
    /// is notified and its outcome decides (a worker may still finish it).
    Requested,
    /// A cancellation was already recorded.
    AlreadyRequested,
}

fn outcome_name(code: i16) -> &'static str {
    match code {
        oc::COMPLETED => "completed",
        oc::RETRY => "failed",
        oc::DEAD => "dead",
        oc::CANCELLED => "cancelled",
        oc::RESCUED_RETRY | oc::RESCUED_DEAD => "rescued",
        oc::SNOOZED => "snoozed",
        _ => "unknown",
    }
}

impl Engine {
    /// The job with this id, its state and attempts. `NotFound` for an unknown id (or one
    /// whose history was truncated away after its retention).
    pub async fn get_job(&self, id: i64) -> Result<JobInfo> {
        let client = self.pool().get().await?;
        let rows = client.query(JOB_ATTEMPTS, &[&id]).await?;
        let side = client.query_one(JOB_SIDE, &[&id]).await?;
        let run_at: Option<SystemTime> = side.get(0);
        let dead_attempt: Option<i32> = side.get(8);
        let cancel_requested: bool = side.get(10);
        let not_found = || Error::NotFound {
            what: "job",
            id: id.to_string(),
        };
        let Some(last) = rows.last() else {
            // Never promoted into the log: scheduled, cancelled while scheduled, or unknown.
            let kind: Option<String> = side.get(2);
            let Some(kind) = kind else {
                return Err(not_found());
            };
            return Ok(JobInfo {
                id,
                queue: side.get(6),
                kind,
                state: if run_at.is_some() {
                    JobState::Scheduled
                } else {
                    JobState::Cancelled
                },
                args: side.get(3),
                meta: side.get(4),
                priority: side.get(7),
                max_attempts: side.get(5),
                enqueued_at: None,
                run_at,
                attempts: Vec::new(),
                cancel_requested,
                result: None,
            });
        };
        let mut attempts: Vec<AttemptInfo> = rows
            .iter()
            .map(|r| AttemptInfo {
                attempt: r.get(0),
                outcome: r.get::<_, Option<i16>>(10).map_or("pending", outcome_name),
                error: r.get(11),
                duration_ms: r.get(12),
                finished_at: r.get(13),
            })
            .collect();
        let last_outcome: Option<i16> = last.get(10);
        let state = match last_outcome {
            Some(oc::COMPLETED) => JobState::Completed,
            Some(oc::CANCELLED) => JobState::Cancelled,
            Some(oc::DEAD | oc::RESCUED_DEAD) => JobState::Dead,
            // A retry or snooze whose next attempt is not in the log yet.
            Some(_) if run_at.is_some() => JobState::Scheduled,
            Some(_) if dead_attempt.is_some() => JobState::Dead,
            // Cancelled while waiting for its retry (cancel removed it from `scheduled`).
            Some(_) if cancel_requested => JobState::Cancelled,
            Some(_) => JobState::Scheduled,
            None => {
                let claimed: Option<bool> = client
                    .query_opt(
                        JOB_CLAIMED,
                        &[
                            &last.get::<_, i32>(2),
                            &last.get::<_, String>(3),
                            &last.get::<_, i64>(4),
                        ],
                    )
                    .await?
                    .map(|r| r.get(0));
                if claimed == Some(true) {
                    if let Some(a) = attempts.last_mut() {
                        a.outcome = "running";
                    }
                    JobState::Running
                } else if cancel_requested {
                    // Closed by the next claim that meets it; never handed out.
                    JobState::Cancelled
                } else {
                    JobState::Pending
                }
            }
        };
        let result: Option<Value> = if state == JobState::Completed {
            client
                .query_opt(JOB_RESULT, &[&id, &last.get::<_, i32>(0)])
                .await?
                .map(|r| r.get(0))
        } else {
            None
        };
        Ok(JobInfo {
            id,
            queue: last.get(15),
            kind: last.get(5),
            state,
            args: last.get(6),
            meta: last.get(7),
            priority: last.get(16),
            max_attempts: last.get(8),
            enqueued_at: rows.first().map(|r| r.get(9)),
            run_at,
            attempts,
            cancel_requested,
            result,
        })
    }

    /// Cancels a job: a scheduled one never runs, a pending one is never handed to a worker,
    /// a running one's worker is told (NOTIFY `pgferry_cancel`, heartbeat answers) and may
    /// stop. `NotFound` for an unknown id; `Conflict` for a job already dead.
    pub async fn cancel(&self, id: i64, reason: Option<&str>) -> Result<CancelResult> {
        // A finished job cannot be cancelled. (Checked first; a job finishing in between is
        // harmless: its cancellation request is simply never acted on.)
        let state = match self.get_job(id).await {
            Ok(info) => Some(info.state),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(s @ (JobState::Completed | JobState::Dead | JobState::Cancelled)) = state {
            return Err(Error::Conflict(format!(
                "job {id} is already {}",
                s.as_str()
            )));
        }
        let client = self.pool().get().await?;
        let row = client.query_one(CANCEL, &[&id, &reason]).await?;
        let (was_scheduled, in_log, is_dead, recorded): (bool, bool, bool, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        if is_dead {
            return Err(Error::Conflict(format!("job {id} is dead-lettered")));
        }
        if !was_scheduled && !in_log {
            return Err(Error::NotFound {
                what: "job",
                id: id.to_string(),
            });
        }
        Ok(match (was_scheduled, recorded) {
            (true, _) => CancelResult::Unscheduled,
            (false, true) => CancelResult::Requested,
            (false, false) => CancelResult::AlreadyRequested,
        })
    }
}
