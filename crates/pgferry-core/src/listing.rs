//! `list_jobs`: a queue's jobs, newest first, filtered by state, kind and age, in pages
//! with `has_more` — never a `count(*)` over history.
//!
//! The log has no per-queue job index (it would cost every enqueue a third index entry), so a
//! page is found by walking job ids backwards with a bounded scan budget per call; a page
//! may come back short with `has_more` and a cursor to continue from. Each candidate's state
//! is derived like `get_job`. This is an operator's path: pages are at most 100 jobs.

use std::time::SystemTime;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::validate_queue_name;
use crate::lookup::{JobInfo, JobState};

const LIST_JOBS: &str = include_str!("sql/list_jobs.sql");
const LIST_SCHEDULED: &str = include_str!("sql/list_scheduled.sql");
const QUEUE_LANES: &str = include_str!("sql/queue_lanes.sql");

/// Largest page of `list_jobs`.
pub const MAX_LIST_PAGE: u32 = 100;
/// Ready rows one call may read looking for matches.
const SCAN_BUDGET: i64 = 20_000;

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub kind: Option<String>,
    pub since: Option<SystemTime>,
}

#[derive(Debug, Clone)]
pub struct JobPage {
    pub jobs: Vec<JobInfo>,
    pub has_more: bool,
    /// Pass back as `cursor` for the next page (set when `has_more`).
    pub next: Option<String>,
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
        let mut below: Option<i64> = match cursor.filter(|c| !c.is_empty()) {
            Some(c) => Some(c.parse().map_err(|_| Error::InvalidArgument {
                field: "cursor",
                reason: "not a cursor returned by a previous page".into(),
            })?),
            None => None,
        };
        let client = self.pool().get().await?;
        let lanes: Vec<i32> = client
            .query(QUEUE_LANES, &[&queue])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        drop(client);
        let mut jobs = Vec::new();
        if lanes.is_empty() {
            return Ok(JobPage {
                jobs,
                has_more: false,
                next: None,
            });
        }
        let client = self.pool().get().await?;
        if f.state == Some(JobState::Scheduled) {
            // Jobs waiting in `scheduled` (those never promoted are not in the log at all).
            let rows = client
                .query(
                    LIST_SCHEDULED,
                    &[&lanes, &f.kind, &below, &(i64::from(limit) + 1)],
                )
                .await?;
            drop(client);
            let has_more = rows.len() > limit as usize;
            for r in rows.iter().take(limit as usize) {
                jobs.push(self.get_job(r.get(0)).await?);
            }
            let next = has_more
                .then(|| jobs.last().map(|j| j.id.to_string()))
                .flatten();
            return Ok(JobPage {
                jobs,
                has_more,
                next,
            });
        }
        let rows = client
            .query(
                LIST_JOBS,
                &[&lanes, &f.kind, &f.since, &below, &SCAN_BUDGET],
            )
            .await?;
        drop(client);
        let (scanned_to, scanned): (Option<i64>, i64) = rows
            .first()
            .map(|r| (r.get(1), r.get(2)))
            .unwrap_or((None, 0));
        for r in &rows {
            let id: i64 = r.get(0);
            let info = match self.get_job(id).await {
                Ok(info) => info,
                // Truncated with its segment between the scan and the lookup.
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            if f.state.is_none_or(|s| s == info.state) {
                jobs.push(info);
                if jobs.len() > limit as usize {
                    // One match past the page: there is more, and it starts below the
                    // page's last job.
                    jobs.pop();
                    below = jobs.last().map(|j| j.id);
                    return Ok(JobPage {
                        jobs,
                        has_more: true,
                        next: below.map(|b| b.to_string()),
                    });
                }
            }
        }
        // Page not full: more only if the scan stopped at its budget.
        let has_more = scanned >= SCAN_BUDGET;
        Ok(JobPage {
            jobs,
            has_more,
            next: if has_more {
                scanned_to.map(|b| b.to_string())
            } else {
                None
            },
        })
    }
}
