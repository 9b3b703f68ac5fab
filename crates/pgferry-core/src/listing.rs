//! `list_jobs`: a queue's jobs filtered by state, kind and age, in keyset pages with
//! `has_more` — never a `count(*)` over history, never a statement per candidate.
//!
//! The log has no per-queue job index (it would cost every enqueue another index entry), so
//! a queue's jobs are found where each state lives, per lane, through indexes that exist for
//! other reasons. A listing walks up to four phases, in this order (newest first in each):
//!   1. scheduled — `scheduled` by job id (index scheduled_lane);
//!   2. pending — log rows the lane's cursor has not passed, by claim order (ready_claim);
//!   3. claimed — attempts handed out, newest receipt first (receipts_cursor), with their
//!      outcomes (completions_receipt): running, completed, dead, cancelled;
//!   4. cancelled before their first run (`cancels`, index cancels_unscheduled).
//!
//! A state filter visits only the phases that can hold that state. Each phase statement
//! derives states set-based, filters and pages in the database, and reads a bounded number
//! of rows (see list_pending.sql for the "mark" that keeps that exact); then two statements
//! fetch the page's jobs (`jobs_detail.sql` and `jobs_extras.sql`, as `get_job`). A page
//! may come back short with `has_more` when the scan budget of a call ran out.
//!
//! Jobs move between phases while someone pages (a pending job gets claimed): a listing is a
//! live view, so such a job may show up twice or not at all across pages.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::validate_queue_name;
use crate::lookup::{JobInfo, JobState};

const LIST_SCHEDULED: &str = include_str!("sql/list_scheduled.sql");
const LIST_PENDING: &str = include_str!("sql/list_pending.sql");
const LIST_CLAIMED: &str = include_str!("sql/list_claimed.sql");
const LIST_UNLOGGED_CANCELS: &str = include_str!("sql/list_unlogged_cancels.sql");

/// Largest page of `list_jobs`.
pub const MAX_LIST_PAGE: u32 = 100;
/// Phase statements one call may run: with the page's two detail statements
/// (jobs_detail.sql, jobs_extras.sql), the most statements a page costs.
pub const MAX_ROUNDS: usize = 5;

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub kind: Option<String>,
    /// Jobs that entered the log at or after this instant. Jobs never in the log (waiting
    /// for their first run, or cancelled there) have no enqueue time and are not filtered.
    pub since: Option<SystemTime>,
}

#[derive(Debug, Clone)]
pub struct JobPage {
    pub jobs: Vec<JobInfo>,
    pub has_more: bool,
    /// Pass back as `cursor` for the next page (set when `has_more`).
    pub next: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Scheduled,
    Pending,
    Claimed,
    Unlogged,
}

impl Phase {
    fn tag(self) -> &'static str {
        match self {
            Phase::Scheduled => "s",
            Phase::Pending => "p",
            Phase::Claimed => "r",
            Phase::Unlogged => "c",
        }
    }
}

/// Where a phase continues: below this position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pos {
    Start,
    /// Job id (scheduled, unlogged cancels).
    Id(i64),
    /// Claim order in the log: xid (as text) and seq.
    Log(String, i64),
    /// Receipt id and position of the attempt in it.
    Receipt(i64, i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub phase: Phase,
    pub pos: Pos,
}

impl Cursor {
    /// Opaque text: `<phase>` or `<phase>.<a>[.<b>]`.
    fn encode(&self) -> String {
        let t = self.phase.tag();
        match &self.pos {
            Pos::Start => t.to_string(),
            Pos::Id(id) => format!("{t}.{id}"),
            Pos::Log(xid, seq) => format!("{t}.{xid}.{seq}"),
            Pos::Receipt(r, i) => format!("{t}.{r}.{i}"),
        }
    }

    fn decode(s: &str) -> Result<Cursor> {
        let bad = || Error::InvalidArgument {
            field: "cursor",
            reason: "not a cursor returned by a previous page".into(),
        };
        let mut parts = s.split('.');
        let phase = match parts.next() {
            Some("s") => Phase::Scheduled,
            Some("p") => Phase::Pending,
            Some("r") => Phase::Claimed,
            Some("c") => Phase::Unlogged,
            _ => return Err(bad()),
        };
        let nums: Vec<&str> = parts.collect();
        let int = |v: &str| v.parse::<i64>().map_err(|_| bad());
        let pos = match (phase, nums.as_slice()) {
            (_, []) => Pos::Start,
            (Phase::Scheduled | Phase::Unlogged, [id]) => Pos::Id(int(id)?),
            (Phase::Pending, [xid, seq]) => {
                // xid8 is an unsigned 64-bit number; parsed here so the database never sees
                // anything else.
                let x: u64 = xid.parse().map_err(|_| bad())?;
                Pos::Log(x.to_string(), int(seq)?)
            }
            (Phase::Claimed, [r, i]) => Pos::Receipt(int(r)?, int(i)?),
            _ => return Err(bad()),
        };
        Ok(Cursor { phase, pos })
    }
}

/// The phases that can hold jobs in `state`, in listing order.
pub(crate) fn phases(state: Option<JobState>) -> &'static [Phase] {
    use Phase::*;
    match state {
        None => &[Scheduled, Pending, Claimed, Unlogged],
        Some(JobState::Scheduled) => &[Scheduled],
        Some(JobState::Pending) => &[Pending],
        Some(JobState::Running | JobState::Completed | JobState::Dead) => &[Claimed],
        Some(JobState::Cancelled) => &[Pending, Claimed, Unlogged],
    }
}

fn parse_state(s: &str) -> Option<JobState> {
    [
        JobState::Pending,
        JobState::Scheduled,
        JobState::Running,
        JobState::Completed,
        JobState::Dead,
        JobState::Cancelled,
    ]
    .into_iter()
    .find(|st| st.as_str() == s)
}

/// Job ids of one listing call, with the state each phase derived and where to go on.
pub(crate) struct Ids {
    pub jobs: Vec<(i64, JobState)>,
    /// Set when more may follow.
    pub next: Option<Cursor>,
}

/// One phase statement's answer.
struct Round {
    jobs: Vec<(i64, JobState, Cursor)>,
    mark: Option<Pos>,
}

impl Engine {
    pub async fn list_jobs(
        &self,
        queue: &str,
        f: &JobFilter,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<JobPage> {
        validate_queue_name(queue)?;
        if limit == 0 || limit > MAX_LIST_PAGE {
            return Err(Error::InvalidArgument {
                field: "limit",
                reason: format!("{limit} is not in 1..={MAX_LIST_PAGE}"),
            });
        }
        let cursor = cursor
            .filter(|c| !c.is_empty())
            .map(Cursor::decode)
            .transpose()?;
        let ids = self.list_ids(queue, f, cursor, limit as usize).await?;
        let wanted: Vec<i64> = ids.jobs.iter().map(|(id, _)| *id).collect();
        let mut found: HashMap<i64, JobInfo> = if wanted.is_empty() {
            HashMap::new()
        } else {
            let mut details = self.jobs_detail(&wanted).await?;
            self.add_extras(&mut details).await?;
            details.into_iter().map(|d| (d.info.id, d.info)).collect()
        };
        // The details are read after the ids: a job that changed state in between (or was
        // truncated with its segment) no longer matches and is left out of this page.
        let jobs = ids
            .jobs
            .iter()
            .filter_map(|(id, _)| found.remove(id))
            .filter(|j| f.state.is_none_or(|s| s == j.state))
            .collect();
        Ok(JobPage {
            jobs,
            has_more: ids.next.is_some(),
            next: ids.next.map(|c| c.encode()),
        })
    }

    /// Up to `limit` job ids matching `f`, in listing order, in at most [`MAX_ROUNDS`]
    /// statements.
    pub(crate) async fn list_ids(
        &self,
        queue: &str,
        f: &JobFilter,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Ids> {
        let phases = phases(f.state);
        let mut cur = match cursor {
            Some(c) if phases.contains(&c.phase) => c,
            Some(_) => {
                return Err(Error::InvalidArgument {
                    field: "cursor",
                    reason: "not a cursor of a listing with this state filter".into(),
                })
            }
            None => Cursor {
                phase: phases[0],
                pos: Pos::Start,
            },
        };
        let mut jobs: Vec<(i64, JobState, Cursor)> = Vec::new();
        let client = self.pool().get().await?;
        for _ in 0..MAX_ROUNDS {
            let want = (limit + 1 - jobs.len()) as i64;
            let round = self.list_round(&client, queue, f, &cur, want).await?;
            jobs.extend(round.jobs);
            if jobs.len() > limit {
                // One match past the page: there is more, below the page's last job.
                jobs.truncate(limit);
                let next = jobs.last().map(|j| j.2.clone());
                return Ok(Ids {
                    jobs: jobs.into_iter().map(|(id, s, _)| (id, s)).collect(),
                    next,
                });
            }
            match round.mark {
                Some(mark) => cur.pos = mark,
                None => {
                    let i = phases.iter().position(|p| *p == cur.phase).expect("listed");
                    match phases.get(i + 1) {
                        Some(p) => {
                            cur = Cursor {
                                phase: *p,
                                pos: Pos::Start,
                            }
                        }
                        None => {
                            return Ok(Ids {
                                jobs: jobs.into_iter().map(|(id, s, _)| (id, s)).collect(),
                                next: None,
                            })
                        }
                    }
                }
            }
        }
        Ok(Ids {
            jobs: jobs.into_iter().map(|(id, s, _)| (id, s)).collect(),
            next: Some(cur),
        })
    }

    async fn list_round(
        &self,
        client: &deadpool_postgres::Client,
        queue: &str,
        f: &JobFilter,
        cur: &Cursor,
        want: i64,
    ) -> Result<Round> {
        let state = f.state.map(|s| s.as_str());
        let id_pos = |p: &Pos| match p {
            Pos::Id(id) => Some(*id),
            _ => None,
        };
        let mut round = Round {
            jobs: Vec::new(),
            mark: None,
        };
        let at = |pos: Pos| Cursor {
            phase: cur.phase,
            pos,
        };
        match cur.phase {
            Phase::Scheduled | Phase::Unlogged => {
                let sql = if cur.phase == Phase::Scheduled {
                    LIST_SCHEDULED
                } else {
                    LIST_UNLOGGED_CANCELS
                };
                let stmt = client.prepare_cached(sql).await?;
                let rows = client
                    .query(
                        &stmt,
                        &[
                            &queue,
                            &id_pos(&cur.pos),
                            &self.config().list_round_rows,
                            &f.kind,
                            &want,
                        ],
                    )
                    .await?;
                for r in &rows {
                    let id: i64 = r.get("job_id");
                    if r.get::<_, bool>("is_mark") {
                        round.mark = Some(Pos::Id(id));
                    } else {
                        round
                            .jobs
                            .push((id, state_of(r.get("state"))?, at(Pos::Id(id))));
                    }
                }
            }
            Phase::Pending => {
                let (xid, seq) = match &cur.pos {
                    Pos::Log(x, s) => (Some(x.as_str()), Some(*s)),
                    _ => (None, None),
                };
                let stmt = client.prepare_cached(LIST_PENDING).await?;
                let rows = client
                    .query(
                        &stmt,
                        &[
                            &queue,
                            &xid,
                            &seq,
                            &self.config().list_round_rows,
                            &f.kind,
                            &f.since,
                            &state,
                            &want,
                        ],
                    )
                    .await?;
                for r in &rows {
                    let pos = Pos::Log(r.get("xid"), r.get("seq"));
                    if r.get::<_, bool>("is_mark") {
                        round.mark = Some(pos);
                    } else {
                        round
                            .jobs
                            .push((r.get("job_id"), state_of(r.get("state"))?, at(pos)));
                    }
                }
            }
            Phase::Claimed => {
                let (rid, i) = match &cur.pos {
                    Pos::Receipt(r, i) => (Some(*r), Some(*i)),
                    _ => (None, None),
                };
                let running_only = f.state == Some(JobState::Running);
                let stmt = client.prepare_cached(LIST_CLAIMED).await?;
                let rows = client
                    .query(
                        &stmt,
                        &[
                            &queue,
                            &rid,
                            &i,
                            &self.config().list_round_rows,
                            &f.kind,
                            &f.since,
                            &state,
                            &want,
                            &running_only,
                        ],
                    )
                    .await?;
                for r in &rows {
                    let pos = Pos::Receipt(r.get("receipt_id"), r.get("i"));
                    if r.get::<_, bool>("is_mark") {
                        round.mark = Some(pos);
                    } else {
                        round
                            .jobs
                            .push((r.get("job_id"), state_of(r.get("state"))?, at(pos)));
                    }
                }
            }
        }
        Ok(round)
    }
}

fn state_of(s: Option<String>) -> Result<JobState> {
    s.as_deref().and_then(parse_state).ok_or_else(|| {
        Error::Conflict(format!(
            "listing produced an unknown state {s:?} (a bug: the phase statements and \
             JobState disagree)"
        ))
    })
}
