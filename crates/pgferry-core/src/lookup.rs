//! Job lookup (`get_job`) and cancellation: the cold paths that find a job by id.
//!
//! The log is append-only, so a job's state is derived, not stored: its attempts in `ready`,
//! their outcomes in `completions`, the lane cursor (claimed or not), and the small mutable
//! tables (`scheduled`, `dead`, `cancels`).

use std::collections::HashMap;
use std::time::SystemTime;

use serde_json::Value;
use tokio_postgres::Row;

use crate::counters::Delta;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::outcome_code as oc;
use crate::json_text::JsonText;

const JOBS_DETAIL: &str = include_str!("sql/jobs_detail.sql");
const JOBS_EXTRAS: &str = include_str!("sql/jobs_extras.sql");
const JOBS_OUTCOMES: &str = include_str!("sql/jobs_outcomes.sql");
const CANCEL: &str = include_str!("sql/cancel.sql");

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
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Scheduled,
        JobState::Running,
        JobState::Completed,
        JobState::Dead,
        JobState::Cancelled,
    ];

    /// The state named `s` ([`JobState::as_str`]'s names); `None` for any other text. Every
    /// API (HTTP, gRPC, the dashboard, listing cursors) parses states through this.
    pub fn from_name(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

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
    /// When the claim that handed this attempt out was made, and by which worker.
    pub claimed_at: Option<SystemTime>,
    pub worker: Option<String>,
    pub finished_at: Option<SystemTime>,
}

#[derive(Debug, Clone)]
pub struct JobInfo {
    pub id: i64,
    pub queue: String,
    pub kind: String,
    pub state: JobState,
    /// As Postgres keeps it, as text (json_text.rs).
    pub args: JsonText,
    pub meta: Option<JsonText>,
    pub priority: i16,
    pub max_attempts: i32,
    pub enqueued_at: Option<SystemTime>,
    pub run_at: Option<SystemTime>,
    pub attempts: Vec<AttemptInfo>,
    pub cancel_requested: bool,
    /// What the completed attempt returned (only jobs that return a value have one).
    pub result: Option<Value>,
    /// The unique key the job holds (while it holds it: a finished job's key is released
    /// after its period, and then no longer shown).
    pub unique_key: Option<String>,
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
        oc::RELEASED => "released",
        _ => "unknown",
    }
}

/// One job as read by `jobs_detail.sql`, with the lane it lives in (counters).
pub(crate) struct Detail {
    pub info: JobInfo,
    pub lane: Option<i32>,
    /// Its claimed attempts, for `jobs_extras.sql`: (index in `info.attempts`, receipt id
    /// when the attempt has an outcome, wants the result).
    claimed: Vec<(usize, Option<i64>, bool)>,
}

/// Positions of a statement's columns, looked up by name once per statement: reading a
/// row by name (`Row::get(&str)`) compares the name with every column's until it matches,
/// and a page of `jobs_detail.sql` is ~30 columns, ~20 reads per row, 50 to 100 rows.
macro_rules! columns {
    ($(#[$doc:meta])* $name:ident { $($col:ident),* $(,)? }) => {
        $(#[$doc])*
        struct $name {
            $($col: usize,)*
        }

        impl $name {
            fn of(cols: &[tokio_postgres::Column]) -> Result<Self> {
                let at = |name: &str| {
                    cols.iter().position(|c| c.name() == name).ok_or_else(|| {
                        Error::Conflict(format!(
                            "a lookup statement has no column {name} (a bug: the statement \
                             and lookup.rs disagree)"
                        ))
                    })
                };
                Ok($name {
                    $($col: at(stringify!($col))?,)*
                })
            }
        }
    };
}

columns!(
    /// The columns of `jobs_detail.sql` that lookup.rs reads.
    DetailCols {
        job_id, attempt, claimed, last, handed, segment, xid, seq, lane, kind, args, meta,
        max_attempts, enqueued_at, run_at, side_kind, side_args, side_meta,
        side_max_attempts, side_enqueued_at, cancelled_run_at, d_error, d_died_at, queue,
        priority, dead_attempt, cancel_requested, unique_key,
    }
);

columns!(
    /// How an attempt ended, in `jobs_detail.sql` and `jobs_outcomes.sql` alike.
    EndedCols {
        outcome, error, duration_ms, finished_at, receipt_id,
    }
);

columns!(
    /// The attempt a row of `jobs_outcomes.sql` is about.
    OutcomeKey { job_id, attempt }
);

/// How an attempt ended: from `jobs_detail.sql` for an attempt handed over to long_leases,
/// from `jobs_outcomes.sql` for any other claimed attempt; none while it runs or waits.
#[derive(Debug, Clone, Default)]
struct Ended {
    outcome: Option<i16>,
    error: Option<String>,
    duration_ms: Option<i32>,
    finished_at: Option<SystemTime>,
    receipt_id: Option<i64>,
}

impl Ended {
    fn from_row(r: &Row, c: &EndedCols) -> Self {
        Ended {
            outcome: r.get(c.outcome),
            error: r.get(c.error),
            duration_ms: r.get(c.duration_ms),
            finished_at: r.get(c.finished_at),
            receipt_id: r.get(c.receipt_id),
        }
    }
}

/// A claimed attempt whose outcome `jobs_outcomes.sql` finds: claimed, in the log (not
/// handed over).
fn needs_outcome(r: &Row, c: &DetailCols) -> bool {
    r.get::<_, Option<i32>>(c.attempt).is_some()
        && r.get::<_, Option<bool>>(c.claimed) == Some(true)
        && r.get::<_, Option<bool>>(c.handed) != Some(true)
}

/// What one job's rows say.
enum Read {
    Job(Box<Detail>),
    /// Unknown, its history truncated away, or dead-lettered and purged from the DLQ since.
    Gone,
    /// Its attempt's outcome (read by `jobs_outcomes.sql`, a later statement with a later
    /// snapshot) is dead, but `jobs_detail.sql` saw no dead-letter row: it was
    /// dead-lettered between the two statements, not purged. Read it again.
    Moved(i64),
}

/// Builds a job from its rows of `jobs_detail.sql` (one per attempt, attempts ascending),
/// each with how that attempt ended.
fn job_from_rows(rows: &[(&Row, Ended)], c: &DetailCols) -> Read {
    match job_detail_from_rows(rows, c) {
        Ok(Some(d)) => Read::Job(Box::new(d)),
        Ok(None) => Read::Gone,
        Err(id) => Read::Moved(id),
    }
}

/// [`job_from_rows`]: `Err(id)` for [`Read::Moved`].
fn job_detail_from_rows(rows: &[(&Row, Ended)], c: &DetailCols) -> Result<Option<Detail>, i64> {
    let Some((first, _)) = rows.first() else {
        return Ok(None);
    };
    let id: i64 = first.get(c.job_id);
    let run_at: Option<SystemTime> = first.get(c.run_at);
    let dead_attempt: Option<i32> = first.get(c.dead_attempt);
    let cancel_requested: bool = first.get(c.cancel_requested);
    let lane: Option<i32> = first.get(c.lane);
    let attempt: Option<i32> = first.get(c.attempt);
    let unique_key: Option<String> = first.get(c.unique_key);
    if attempt.is_none() {
        // No row in the log: scheduled, cancelled while scheduled, dead-lettered with its
        // segments reused since, or unknown. The side row carries the job and its times.
        let Some(kind) = first.get::<_, Option<String>>(c.side_kind) else {
            return Ok(None);
        };
        let (state, run_at, attempts) = if run_at.is_some() {
            (JobState::Scheduled, run_at, Vec::new())
        } else if let Some(attempt) = dead_attempt {
            let last = AttemptInfo {
                attempt,
                outcome: "dead",
                error: first.get(c.d_error),
                duration_ms: None,
                claimed_at: None,
                worker: None,
                finished_at: first.get(c.d_died_at),
            };
            (JobState::Dead, None, vec![last])
        } else {
            (
                JobState::Cancelled,
                first.get(c.cancelled_run_at),
                Vec::new(),
            )
        };
        return Ok(Some(Detail {
            info: JobInfo {
                id,
                queue: first.get(c.queue),
                kind,
                state,
                args: first.get(c.side_args),
                meta: first.get(c.side_meta),
                priority: first.get(c.priority),
                max_attempts: first.get(c.side_max_attempts),
                enqueued_at: first.get(c.side_enqueued_at),
                run_at,
                attempts,
                cancel_requested,
                result: None,
                unique_key,
            },
            lane,
            claimed: Vec::new(),
        }));
    }
    let (last, last_ended) = rows.last().expect("not empty");
    let mut attempts: Vec<AttemptInfo> = rows
        .iter()
        .map(|(r, e)| AttemptInfo {
            attempt: r.get(c.attempt),
            outcome: e.outcome.map_or("pending", outcome_name),
            error: e.error.clone(),
            duration_ms: e.duration_ms,
            claimed_at: None,
            worker: None,
            finished_at: e.finished_at,
        })
        .collect();
    let last_outcome: Option<i16> = last_ended.outcome;
    let state = match last_outcome {
        Some(oc::COMPLETED) => JobState::Completed,
        Some(oc::CANCELLED) => JobState::Cancelled,
        // Dead-lettered, and no dead-letter row: purged from the DLQ since (gone, as a retry
        // of it would say), or dead-lettered after this job's rows were read and before its
        // outcome was (the caller reads it again to tell which).
        Some(oc::DEAD | oc::RESCUED_DEAD) if dead_attempt.is_none() => return Err(id),
        Some(oc::DEAD | oc::RESCUED_DEAD) => JobState::Dead,
        // A retry or snooze whose next attempt is not in the log yet.
        Some(_) if run_at.is_some() => JobState::Scheduled,
        Some(_) if dead_attempt.is_some() => JobState::Dead,
        // Cancelled while waiting for its retry (cancel removed it from `scheduled`).
        Some(_) if cancel_requested => JobState::Cancelled,
        Some(_) => JobState::Scheduled,
        None if last.get::<_, bool>(c.claimed) => {
            if let Some(a) = attempts.last_mut() {
                a.outcome = "running";
            }
            JobState::Running
        }
        // Closed by the next claim that meets it; never handed out.
        None if cancel_requested => JobState::Cancelled,
        None => JobState::Pending,
    };
    // Cancelled while waiting for a delayed retry: it keeps the time it was due.
    let run_at = match state {
        JobState::Cancelled => run_at.or(first.get(c.cancelled_run_at)),
        _ => run_at,
    };
    if last_outcome.is_none() && !last.get::<_, bool>(c.claimed) {
        // The last row is an attempt waiting in the log, not started: not an attempt yet
        // (a never-claimed job has none). Only the last row can be unclaimed, so the
        // indices of claimed attempts below stay valid.
        attempts.pop();
    }
    Ok(Some(Detail {
        info: JobInfo {
            id,
            queue: last.get(c.queue),
            kind: last.get(c.kind),
            state,
            args: last.get(c.args),
            meta: last.get(c.meta),
            priority: last.get(c.priority),
            max_attempts: last.get(c.max_attempts),
            enqueued_at: Some(first.get(c.enqueued_at)),
            run_at,
            attempts,
            cancel_requested,
            result: None,
            unique_key,
        },
        lane,
        claimed: rows
            .iter()
            .enumerate()
            .filter(|(_, (r, _))| r.get::<_, bool>(c.claimed))
            .map(|(i, (r, e))| {
                let completed = e.outcome == Some(oc::COMPLETED);
                (i, e.receipt_id, completed && r.get::<_, bool>(c.last))
            })
            .collect(),
    }))
}

impl Engine {
    /// The job with this id, its state and attempts. `NotFound` for an unknown id (or one
    /// whose history was truncated away after its retention). One statement.
    pub async fn get_job(&self, id: i64) -> Result<JobInfo> {
        let client = self.pool().get().await?;
        let mut one = self
            .jobs_detail_on(&client, &[id])
            .await?
            .pop()
            .ok_or_else(|| Error::NotFound {
                what: "job",
                id: id.to_string(),
            })?;
        self.add_extras_on(&client, std::slice::from_mut(&mut one))
            .await?;
        Ok(one.info)
    }

    /// Fills in each claimed attempt's claim time and worker, and the completed job's
    /// result: one statement for any number of jobs (none when nothing was claimed).
    /// [`Engine::add_extras`] on a connection the caller holds (a listing's).
    pub(crate) async fn add_extras_on(
        &self,
        client: &deadpool_postgres::Client,
        jobs: &mut [Detail],
    ) -> Result<()> {
        let (mut ids, mut atts, mut lanes, mut receipts, mut want) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut at: Vec<(usize, usize)> = Vec::new();
        for (j, d) in jobs.iter().enumerate() {
            let Some(lane) = d.lane else { continue };
            for &(i, receipt, result) in &d.claimed {
                ids.push(d.info.id);
                atts.push(d.info.attempts[i].attempt);
                lanes.push(lane);
                receipts.push(receipt);
                want.push(result);
                at.push((j, i));
            }
        }
        if ids.is_empty() {
            return Ok(());
        }
        let stmt = client.prepare_cached(JOBS_EXTRAS).await?;
        let rows = client
            .query(&stmt, &[&ids, &atts, &lanes, &receipts, &want])
            .await?;
        for (row, &(j, i)) in rows.iter().zip(&at) {
            let a = &mut jobs[j].info.attempts[i];
            a.claimed_at = row.get("claimed_at");
            a.worker = row.get("worker");
            if let Some(v) = row.get::<_, Option<Value>>("result") {
                jobs[j].info.result = Some(v);
            }
        }
        Ok(())
    }

    pub(crate) async fn job_detail(&self, id: i64) -> Result<Detail> {
        let client = self.pool().get().await?;
        self.jobs_detail_on(&client, &[id])
            .await?
            .pop()
            .ok_or_else(|| Error::NotFound {
                what: "job",
                id: id.to_string(),
            })
    }

    /// Several jobs, ordered by id; unknown ids are left out. One statement
    /// (`jobs_detail.sql`), and a second (`jobs_outcomes.sql`) only when some attempt was
    /// claimed: the receipt search and its scans of every receipts and completions
    /// partition are not started for jobs that are scheduled or pending.
    /// The two statements read two snapshots. A job dead-lettered between them is read
    /// again (its dead-letter row is then visible); a second such change of one job within
    /// a read would take a retry from the DLQ and another death, so three reads are plenty.
    pub(crate) async fn jobs_detail_on(
        &self,
        client: &deadpool_postgres::Client,
        ids: &[i64],
    ) -> Result<Vec<Detail>> {
        let (mut out, mut ask) = self.jobs_detail_once(client, ids).await?;
        if ask.is_empty() {
            return Ok(out);
        }
        // A job still changing after three reads is left out like an unknown id (the
        // caller's next look finds it).
        for _ in 0..2 {
            let (found, moved) = self.jobs_detail_once(client, &ask).await?;
            out.extend(found);
            ask = moved;
            if ask.is_empty() {
                break;
            }
        }
        out.sort_by_key(|d: &Detail| d.info.id);
        Ok(out)
    }

    /// One read of [`Engine::jobs_detail_on`]: the jobs found, and the ids to read again.
    async fn jobs_detail_once(
        &self,
        client: &deadpool_postgres::Client,
        ids: &[i64],
    ) -> Result<(Vec<Detail>, Vec<i64>)> {
        let stmt = client.prepare_cached(JOBS_DETAIL).await?;
        let (c, ec) = (
            DetailCols::of(stmt.columns())?,
            EndedCols::of(stmt.columns())?,
        );
        let rows = client.query(&stmt, &[&ids]).await?;
        let mut ended = self.outcomes_on(client, &rows, &c).await?;
        let (mut out, mut moved) = (Vec::new(), Vec::new());
        let mut take = |read: Read| match read {
            Read::Job(d) => out.push(*d),
            Read::Gone => {}
            Read::Moved(id) => moved.push(id),
        };
        let mut group: Vec<(&Row, Ended)> = Vec::new();
        for row in &rows {
            let id: i64 = row.get(c.job_id);
            if group
                .first()
                .is_some_and(|(g, _)| g.get::<_, i64>(c.job_id) != id)
            {
                take(job_from_rows(&group, &c));
                group.clear();
            }
            let e = match row.get::<_, Option<i32>>(c.attempt) {
                Some(attempt) if needs_outcome(row, &c) => {
                    ended.remove(&(id, attempt)).unwrap_or_default()
                }
                _ => Ended::from_row(row, &ec),
            };
            group.push((row, e));
        }
        take(job_from_rows(&group, &c));
        Ok((out, moved))
    }

    /// The outcomes of the claimed attempts among `rows` (of `jobs_detail.sql`), by job
    /// and attempt; no statement when there is none.
    async fn outcomes_on(
        &self,
        client: &deadpool_postgres::Client,
        rows: &[Row],
        c: &DetailCols,
    ) -> Result<HashMap<(i64, i32), Ended>> {
        let (mut ids, mut atts, mut lanes, mut segs, mut xids, mut seqs) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for r in rows.iter().filter(|r| needs_outcome(r, c)) {
            ids.push(r.get::<_, i64>(c.job_id));
            atts.push(r.get::<_, i32>(c.attempt));
            lanes.push(r.get::<_, i32>(c.lane));
            segs.push(r.get::<_, i16>(c.segment));
            xids.push(r.get::<_, String>(c.xid));
            seqs.push(r.get::<_, i64>(c.seq));
        }
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let stmt = client.prepare_cached(JOBS_OUTCOMES).await?;
        let (oc_cols, ec) = (
            OutcomeKey::of(stmt.columns())?,
            EndedCols::of(stmt.columns())?,
        );
        let found = client
            .query(&stmt, &[&ids, &atts, &lanes, &segs, &xids, &seqs])
            .await?;
        for r in &found {
            // One outcome per attempt (a hand-back, outcome 8, is never one); the first
            // if a pass found two.
            out.entry((r.get(oc_cols.job_id), r.get(oc_cols.attempt)))
                .or_insert_with(|| Ended::from_row(r, &ec));
        }
        Ok(out)
    }

    /// Cancels a job: a scheduled one never runs, a pending one is never handed to a worker,
    /// a running one's worker is told (NOTIFY `pgferry_cancel`, heartbeat answers) and may
    /// stop. `NotFound` for an unknown id; `Conflict` for a job already dead.
    pub async fn cancel(&self, id: i64, reason: Option<&str>) -> Result<CancelResult> {
        // A finished job cannot be cancelled. (Checked first; a job finishing in between is
        // harmless: its cancellation request is simply never acted on.)
        let (state, lane) = match self.job_detail(id).await {
            Ok(d) => (Some(d.info.state), d.lane),
            Err(Error::NotFound { .. }) => (None, None),
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
        let (was_scheduled, in_log, is_dead, recorded): (bool, bool, bool, bool) = (
            row.get("was_scheduled"),
            row.get("in_log"),
            row.get("is_dead"),
            row.get("recorded"),
        );
        if is_dead {
            return Err(Error::Conflict(format!("job {id} is dead-lettered")));
        }
        if !was_scheduled && !in_log {
            return Err(Error::NotFound {
                what: "job",
                id: id.to_string(),
            });
        }
        // A running job's outcome is counted when its worker reports it.
        let moved = match (was_scheduled, recorded, state) {
            (true, _, _) => Some(Delta {
                scheduled: -1,
                ..Delta::default()
            }),
            (false, true, Some(JobState::Pending)) => Some(Delta {
                pending: -1,
                ..Delta::default()
            }),
            _ => None,
        };
        if let (Some(d), Some(lane)) = (moved, lane) {
            self.counters().add(lane, Delta { cancelled: 1, ..d });
        }
        Ok(match (was_scheduled, recorded) {
            (true, _) => CancelResult::Unscheduled,
            (false, true) => CancelResult::Requested,
            (false, false) => CancelResult::AlreadyRequested,
        })
    }
}
