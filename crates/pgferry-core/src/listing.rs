//! `list_jobs`: a queue's jobs filtered by state, kind and age, in keyset pages with
//! `has_more` — never a `count(*)` over history, never a statement per candidate.
//!
//! The log has no per-queue job index (it would cost every enqueue another index entry), so
//! a queue's jobs are found where each state lives, per lane, through indexes that exist for
//! other reasons. A listing walks up to four phases, in this order (newest first in each):
//!   1. scheduled — `scheduled` by job id (index scheduled_lane); without a kind or text
//!      filter one walk per lane merged by the engine (listing_scheduled_lanes.rs);
//!   2. pending — log rows the lane's cursor has not passed, by claim order (ready_claim);
//!   3. claimed — attempts handed out, newest receipt first (receipts_cursor), with their
//!      outcomes (completions_receipt): running, completed, dead, cancelled;
//!   4. cancelled before their first run (`cancels`, index cancels_unscheduled).
//!
//! A state filter visits only the phases that can hold that state; `dead` has a phase of
//! its own, the dead-letter table (index dead_lane), since a job is dead exactly when it
//! has a row there: a few dead jobs among millions of claimed attempts are read directly. Each phase statement
//! derives states set-based, filters and pages in the database, and reads a bounded number
//! of rows (see list_pending.sql for the "mark" that keeps that exact); then the page's jobs
//! are read as `get_job` reads one, on the same connection (`jobs_detail.sql`, and for
//! claimed attempts `jobs_outcomes.sql` and `jobs_extras.sql`). A page
//! may come back short with `has_more` when the scan budget of a call ran out.
//!
//! Jobs move between phases while someone pages (a pending job gets claimed): a listing is a
//! live view, so such a job may show up twice or not at all across pages.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::validate_queue_name;
use crate::listing_first_runs;
use crate::listing_scheduled_lanes;
use crate::lookup::{JobInfo, JobState};

const LIST_SCHEDULED: &str = include_str!("sql/list_scheduled.sql");
const LIST_PENDING: &str = include_str!("sql/list_pending.sql");
const LIST_CLAIMED: &str = include_str!("sql/list_claimed.sql");
const LIST_UNLOGGED_CANCELS: &str = include_str!("sql/list_unlogged_cancels.sql");
const LIST_DEAD: &str = include_str!("sql/list_dead.sql");
const SET_GENERIC: &str = include_str!("sql/list_generic_plans.sql");

/// Largest page of `list_jobs`.
pub const MAX_LIST_PAGE: u32 = 100;
/// Phase statements one call may run: with the page's detail statements (jobs_detail.sql;
/// jobs_outcomes.sql and jobs_extras.sql when some attempt was claimed), the most
/// statements a page costs.
pub const MAX_ROUNDS: usize = 5;
/// Growth of a call's scan from one round to the next (see [`round_rows`]).
const ROUND_GROWTH: i64 = 64;

/// Rows the phase statement of round `round` (0-based) of one call may read, given the
/// engine's cap `max_rows` and the answers wanted (`want`, the page and one more).
///
/// The first round reads only `want` rows per lane (the statements take the larger of
/// their answers wanted and this budget spread over the lanes): an unfiltered page, or a
/// filter most rows match, is answered from the first rows of each lane. Each later round
/// reads ROUND_GROWTH times more, up to `max_rows`, so a rare match is still searched
/// through the full budget. Reading the full budget in every round made every page pay for
/// the rarest filter's scan (4,000 attempts and their outcomes, for 50 rows shown).
pub fn round_rows(max_rows: i64, want: i64, round: usize) -> i64 {
    let mut rows = want;
    for _ in 0..round {
        rows = rows.saturating_mul(ROUND_GROWTH);
        if rows >= max_rows {
            break;
        }
    }
    rows.min(max_rows)
}

/// Rows one call of `list_jobs` reads at most over all its statements, given the
/// per-statement cap `max_rows` (`EngineConfig::list_round_rows`): one and a half times it
/// (6,000 by default). A filter that matches rarely (a kind, a time, a text) is searched
/// through this many of the newest rows per call, newest first; the page comes back short
/// or empty with `has_more` and its cursor continues the search below (ADR 0022). Without
/// this cap a call ran all [`MAX_ROUNDS`] rounds at the full cap (15,300 rows), which put
/// a sparse filter's page over 100 ms (docs/performance.md, issue 24).
pub fn call_rows(max_rows: i64) -> i64 {
    max_rows.saturating_mul(3) / 2
}

/// The budgets of one phase's rounds in a call, in order: [`round_rows`] of each round,
/// the last one cut so that they add up to at most [`call_rows`] (a phase exhausted early
/// hands what is left to the next one, which starts again at the page's size).
pub fn round_budgets(max_rows: i64, want: i64) -> Vec<i64> {
    let total = call_rows(max_rows);
    let mut spent = 0i64;
    let mut out = Vec::new();
    for r in 0..MAX_ROUNDS {
        let rows = round_rows(max_rows, want, r).min(total - spent);
        if rows <= 0 {
            break;
        }
        out.push(rows);
        spent += rows;
    }
    out
}

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub kind: Option<String>,
    /// Jobs that entered the log at or after this instant. Jobs never in the log (waiting
    /// for their first run, or cancelled there) have no enqueue time and are not filtered.
    pub since: Option<SystemTime>,
}

/// Substring filters of [`Engine::list_jobs_matching`], matched case-insensitively, which
/// no index answers: they are tested on the rows a listing reads anyway, so a search costs
/// what the same listing without it costs per statement, and a rare match comes back in
/// short pages with `has_more` (search older) rather than as a scan of the whole history.
#[derive(Debug, Clone, Default)]
pub struct TextFilter {
    /// In the job's args or meta, as JSON text (jsonb's form: `{"key": "value"}`).
    pub contains: Option<String>,
    /// In a dead job's last error; only with the `dead` state filter.
    pub error_contains: Option<String>,
}

/// Longest substring a [`TextFilter`] takes.
pub const MAX_SEARCH_CHARS: usize = 200;

impl TextFilter {
    fn check(&self, state: Option<JobState>) -> Result<()> {
        for (field, v) in [
            ("contains", &self.contains),
            ("error_contains", &self.error_contains),
        ] {
            if let Some(v) = v {
                if v.is_empty() || v.chars().count() > MAX_SEARCH_CHARS {
                    return Err(Error::InvalidArgument {
                        field,
                        reason: format!("must be 1 to {MAX_SEARCH_CHARS} characters"),
                    });
                }
            }
        }
        if self.error_contains.is_some() && state != Some(JobState::Dead) {
            return Err(Error::InvalidArgument {
                field: "error_contains",
                reason: "searches dead jobs' last errors: only with state dead".into(),
            });
        }
        Ok(())
    }
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
    Dead,
}

impl Phase {
    fn tag(self) -> &'static str {
        match self {
            Phase::Scheduled => "s",
            Phase::Pending => "p",
            Phase::Claimed => "r",
            Phase::Unlogged => "c",
            Phase::Dead => "d",
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
            Some("d") => Phase::Dead,
            _ => return Err(bad()),
        };
        let nums: Vec<&str> = parts.collect();
        let int = |v: &str| v.parse::<i64>().map_err(|_| bad());
        let pos = match (phase, nums.as_slice()) {
            (_, []) => Pos::Start,
            (Phase::Scheduled | Phase::Unlogged | Phase::Dead, [id]) => Pos::Id(int(id)?),
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
        Some(JobState::Running | JobState::Completed) => &[Claimed],
        Some(JobState::Dead) => &[Dead],
        Some(JobState::Cancelled) => &[Pending, Claimed, Unlogged],
    }
}

/// Job ids of one listing call, with the state each phase derived and where to go on.
pub(crate) struct Ids {
    pub jobs: Vec<(i64, JobState)>,
    /// Jobs of `jobs` the phase statements read whole (first runs, listing_first_runs.rs):
    /// not read again through jobs_detail.sql.
    pub whole: HashMap<i64, JobInfo>,
    /// Set when more may follow.
    pub next: Option<Cursor>,
}

/// What one phase statement may do: answers wanted, rows it may read.
#[derive(Debug, Clone, Copy)]
struct Budget {
    want: i64,
    rows: i64,
}

/// One phase statement's answer.
struct Round {
    jobs: Vec<(i64, JobState, Cursor)>,
    mark: Option<Pos>,
    /// Jobs of `jobs` read whole (first runs of the scheduled phase).
    whole: Vec<JobInfo>,
}

impl Ids {
    /// The call's answer: its jobs in order, those of them read whole, where to go on.
    fn of(
        jobs: Vec<(i64, JobState, Cursor)>,
        mut whole: HashMap<i64, JobInfo>,
        next: Option<Cursor>,
    ) -> Ids {
        let jobs: Vec<(i64, JobState)> = jobs.into_iter().map(|(id, s, _)| (id, s)).collect();
        // A job read whole past the page (the match that says there is more) is dropped.
        whole.retain(|id, _| jobs.iter().any(|(j, _)| j == id));
        Ids { jobs, whole, next }
    }
}

impl Round {
    /// The rows of a phase whose position is a job id: the mark (where the next round of
    /// the phase resumes) and the jobs.
    fn take_id_rows(&mut self, rows: &[tokio_postgres::Row], phase: Phase) -> Result<()> {
        for r in rows {
            let id: i64 = r.get("job_id");
            if r.get::<_, bool>("is_mark") {
                self.mark = Some(Pos::Id(id));
            } else {
                let cur = Cursor {
                    phase,
                    pos: Pos::Id(id),
                };
                self.jobs.push((id, state_of(r.get("state"))?, cur));
            }
        }
        Ok(())
    }
}

impl Engine {
    pub async fn list_jobs(
        &self,
        queue: &str,
        f: &JobFilter,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<JobPage> {
        self.list_jobs_matching(queue, f, &TextFilter::default(), cursor, limit)
            .await
    }

    /// [`Engine::list_jobs`] with substring filters, tested on the rows each phase reads:
    /// bounded per call like any filter (see [`TextFilter`]).
    pub async fn list_jobs_matching(
        &self,
        queue: &str,
        f: &JobFilter,
        text: &TextFilter,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<JobPage> {
        validate_queue_name(queue)?;
        text.check(f.state)?;
        let lower = |s: &Option<String>| s.as_deref().map(str::to_lowercase);
        let text = TextFilter {
            contains: lower(&text.contains),
            error_contains: lower(&text.error_contains),
        };
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
        // One pooled connection for the whole call: the ids, then the details. Taking one
        // per statement queued each list behind the pool again between its statements
        // (16 connections for 64 clients in `bench http-jobs`).
        let mut client = self.pool().get().await?;
        let ids = self
            .list_ids_on(&mut client, queue, f, &text, cursor, limit as usize)
            .await?;
        let wanted: Vec<i64> = ids
            .jobs
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !ids.whole.contains_key(id))
            .collect();
        let mut found: HashMap<i64, JobInfo> = ids.whole;
        if !wanted.is_empty() {
            let mut details = self.jobs_detail_on(&client, &wanted).await?;
            self.add_extras_on(&client, &mut details).await?;
            found.extend(details.into_iter().map(|d| (d.info.id, d.info)));
        }
        // The details are read after the ids: a job that changed state in between (or was
        // truncated with its segment) no longer matches and is left out of this page. A job
        // read whole is as its phase statement saw it.
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
        text: &TextFilter,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Ids> {
        let mut client = self.pool().get().await?;
        self.list_ids_on(&mut client, queue, f, text, cursor, limit)
            .await
    }

    /// [`Engine::list_ids`] on a connection the caller holds.
    async fn list_ids_on(
        &self,
        client: &mut deadpool_postgres::Client,
        queue: &str,
        f: &JobFilter,
        text: &TextFilter,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Ids> {
        let phases = phases(f.state);
        let cur = match cursor {
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
        // Generic plans for the phase statements. Left to itself the plan cache keeps
        // planning list_claimed.sql per call (its generic plan's estimate is above the custom
        // ones'), and planning these CTEs over every partition took 10–50 ms, more than
        // executing them (2–40 ms); their generic plans run as fast (measured on 1M jobs,
        // docs/performance.md). A transaction scopes the setting (SET LOCAL) to this call;
        // each statement still reads its own snapshot (READ COMMITTED), as before.
        // Without bitmap scans: every phase is a walk of an index, newest first, that stops
        // after a budget of rows. A generic plan is made once per connection from the
        // statistics of that moment and kept; made while a table was nearly empty (a fresh
        // database, before autovacuum's first ANALYZE), it read the lane's every row through
        // a bitmap and sorted them, for each page — on the benchmark of issue 22, the
        // scheduled phase read all of a queue's delayed jobs per listing (3,000 and growing,
        // ~3 ms a call instead of ~0.3). With bitmaps off the ordered index scan is the only
        // plan left that reads a lane by its index (tests/listing_plans.rs).
        let tx = client.transaction().await?;
        tx.batch_execute(SET_GENERIC).await?;
        let ids = self.list_rounds(&tx, queue, f, text, cur, limit).await?;
        tx.commit().await?;
        Ok(ids)
    }

    async fn list_rounds(
        &self,
        client: &deadpool_postgres::Transaction<'_>,
        queue: &str,
        f: &JobFilter,
        text: &TextFilter,
        mut cur: Cursor,
        limit: usize,
    ) -> Result<Ids> {
        let phases = phases(f.state);
        let mut jobs: Vec<(i64, JobState, Cursor)> = Vec::new();
        let mut whole: HashMap<i64, JobInfo> = HashMap::new();
        let max_rows = self.config().list_round_rows;
        let (total, mut spent) = (call_rows(max_rows), 0i64);
        // A phase's rounds grow from the page's size (round_budgets); a phase found empty
        // or exhausted hands the rest of the call's budget to the next phase, starting
        // again at the page's size, so a short history is walked through every phase in
        // one call (an unfiltered search of a small queue answers "no match", not "search
        // older"), while the call still reads at most `call_rows` rows in at most
        // MAX_ROUNDS statements.
        let mut r = 0;
        for _ in 0..MAX_ROUNDS {
            let rows = round_rows(max_rows, limit as i64 + 1, r).min(total - spent);
            if rows <= 0 {
                break;
            }
            spent += rows;
            r += 1;
            let want = (limit + 1 - jobs.len()) as i64;
            let round = self
                .list_round(client, queue, f, text, &cur, Budget { want, rows })
                .await?;
            jobs.extend(round.jobs);
            whole.extend(round.whole.into_iter().map(|j| (j.id, j)));
            if jobs.len() > limit {
                // One match past the page: there is more, below the page's last job.
                jobs.truncate(limit);
                let next = jobs.last().map(|j| j.2.clone());
                return Ok(Ids::of(jobs, whole, next));
            }
            match round.mark {
                Some(mark) => cur.pos = mark,
                None => {
                    let i = phases.iter().position(|p| *p == cur.phase).expect("listed");
                    match phases.get(i + 1) {
                        Some(p) => {
                            r = 0;
                            cur = Cursor {
                                phase: *p,
                                pos: Pos::Start,
                            }
                        }
                        None => return Ok(Ids::of(jobs, whole, None)),
                    }
                }
            }
        }
        Ok(Ids::of(jobs, whole, Some(cur)))
    }

    async fn list_round(
        &self,
        client: &deadpool_postgres::Transaction<'_>,
        queue: &str,
        f: &JobFilter,
        text: &TextFilter,
        cur: &Cursor,
        budget: Budget,
    ) -> Result<Round> {
        let Budget {
            want,
            rows: rows_to_read,
        } = budget;
        let state = f.state.map(|s| s.as_str());
        let id_pos = |p: &Pos| match p {
            Pos::Id(id) => Some(*id),
            _ => None,
        };
        let mut round = Round {
            jobs: Vec::new(),
            mark: None,
            whole: Vec::new(),
        };
        let at = |pos: Pos| Cursor {
            phase: cur.phase,
            pos,
        };
        // Without a filter: one index walk per lane (listing_scheduled_lanes.rs).
        if cur.phase == Phase::Scheduled && f.kind.is_none() && text.contains.is_none() {
            let lanes =
                listing_scheduled_lanes::read(client, queue, id_pos(&cur.pos), want).await?;
            round.jobs = (lanes.ids.into_iter())
                .map(|id| (id, JobState::Scheduled, at(Pos::Id(id))))
                .collect();
            round.whole = lanes.whole;
            return Ok(round);
        }
        match cur.phase {
            Phase::Dead => {
                let stmt = client.prepare_cached(LIST_DEAD).await?;
                let rows = client
                    .query(
                        &stmt,
                        &[
                            &queue,
                            &id_pos(&cur.pos),
                            &rows_to_read,
                            &f.kind,
                            &want,
                            &f.since,
                            &text.contains,
                            &text.error_contains,
                        ],
                    )
                    .await?;
                round.take_id_rows(&rows, cur.phase)?;
            }
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
                            &rows_to_read,
                            &f.kind,
                            &want,
                            &text.contains,
                        ],
                    )
                    .await?;
                round.take_id_rows(&rows, cur.phase)?;
                if cur.phase == Phase::Scheduled {
                    round.whole.extend(
                        rows.iter()
                            .filter(|r| !r.get::<_, bool>("is_mark"))
                            .filter_map(|r| listing_first_runs::whole_job(r, queue)),
                    );
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
                            &rows_to_read,
                            &f.kind,
                            &f.since,
                            &state,
                            &want,
                            &text.contains,
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
                            &rows_to_read,
                            &f.kind,
                            &f.since,
                            &state,
                            &want,
                            &running_only,
                            &text.contains,
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
    s.as_deref().and_then(JobState::from_name).ok_or_else(|| {
        Error::Conflict(format!(
            "listing produced an unknown state {s:?} (a bug: the phase statements and \
             JobState disagree)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_rounds_add_up_to_its_budget() {
        // The default cap: the page, then 64 times more, then what is left of 6,000.
        assert_eq!(round_budgets(4000, 51), vec![51, 3264, 2685]);
        assert_eq!(round_budgets(4000, 101), vec![101, 4000, 1899]);
        for (max, want) in [(3, 51), (100, 51), (400, 101), (4000, 51), (10_000, 101)] {
            let b = round_budgets(max, want);
            assert!(
                !b.is_empty() && b.len() <= MAX_ROUNDS,
                "{max} {want}: {b:?}"
            );
            assert!(
                b.iter().sum::<i64>() <= call_rows(max),
                "{max} {want}: {b:?}"
            );
            assert!(b.iter().all(|&r| r > 0 && r <= max), "{max} {want}: {b:?}");
        }
    }

    #[test]
    fn rounds_start_at_the_page_and_grow_to_the_cap() {
        let rows: Vec<i64> = (0..MAX_ROUNDS).map(|r| round_rows(4000, 51, r)).collect();
        assert_eq!(rows, vec![51, 3264, 4000, 4000, 4000]);
        // A cap below the page: the cap (the statements still read the page per lane).
        assert_eq!(round_rows(10, 51, 0), 10);
        assert_eq!(round_rows(i64::MAX, i64::MAX / 2, 3), i64::MAX);
    }

    #[test]
    fn dead_cursors_round_trip_and_belong_to_the_dead_filter() {
        let c = Cursor {
            phase: Phase::Dead,
            pos: Pos::Id(42),
        };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        assert_eq!(phases(Some(JobState::Dead)), &[Phase::Dead]);
        assert!(!phases(None).contains(&Phase::Dead));
    }
}
