//! Looking at instances: one instance with its step history, and pages of a queue's
//! instances (keyset pagination, newest first, never a count over history).

use std::time::SystemTime;

use serde_json::Value;

use super::client::{instance_error, Workflows};
use crate::error::{Error, Result};

const GET: &str = include_str!("../sql/workflow/get.sql");
const LIST: &str = include_str!("../sql/workflow/list.sql");
const LIST_ENDED: &str = include_str!("../sql/workflow/list_ended.sql");
const LIST_CORRELATED: &str = include_str!("../sql/workflow/list_correlated.sql");
const LIST_ACTIVE: &str = include_str!("../sql/workflow/list_active.sql");

/// Most active instances one list call reads when filtering by an active status
/// (list_active.sql): the page may come back short with `has_more`, and `next` goes on
/// below the last instance read.
pub(crate) const ACTIVE_SCAN_ROWS: i32 = 5_000;

/// One step's outcome in an instance's history.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct StepRecord {
    pub step_seq: i32,
    pub step: String,
    pub attempt: i32,
    /// next, retry, sleep, await, spawn, done, fail or cancelled
    pub outcome: String,
    pub error: Option<String>,
    pub worker: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: String,
}

/// An instance as `get` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InstanceInfo {
    pub id: i64,
    pub kind: String,
    pub queue: String,
    pub step: String,
    pub status: String,
    pub state: Value,
    pub input: Value,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub attempt: i32,
    pub max_attempts: i32,
    pub priority: i16,
    pub awaits: Option<Vec<String>>,
    pub await_deadline: Option<SystemTime>,
    pub parent_id: Option<i64>,
    pub children_pending: i32,
    pub correlation_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub rate_key: Option<String>,
    pub worker: Option<String>,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    pub finished_at: Option<SystemTime>,
    /// Signals waiting in the inbox (not consumed by an await yet).
    pub inbox_pending: i64,
    pub history: Vec<StepRecord>,
}

/// An instance as a list shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InstanceSummary {
    pub id: i64,
    pub kind: String,
    pub queue: String,
    pub step: String,
    pub status: String,
    pub attempt: i32,
    pub parent_id: Option<i64>,
    pub correlation_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub error: Option<String>,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    pub finished_at: Option<SystemTime>,
}

/// Which instances of a queue to list.
#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    pub queue: String,
    pub kind: Option<String>,
    pub status: Option<String>,
    pub correlation_key: Option<String>,
    pub created_after: Option<SystemTime>,
    /// The `next` of the previous page.
    pub before: Option<i64>,
    /// Page size, 1..=1000 (50 if 0).
    pub limit: usize,
}

/// A page of instances, newest first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InstancePage {
    pub instances: Vec<InstanceSummary>,
    pub has_more: bool,
    /// Pass as `before` for the next page.
    pub next: Option<i64>,
}

/// Every status an instance can have (and be listed by).
pub const STATUSES: [&str; 9] = [
    "runnable",
    "running",
    "sleeping",
    "awaiting",
    "waiting_children",
    "queued",
    "done",
    "failed",
    "cancelled",
];

impl Workflows {
    /// One instance with its step history, in one statement.
    pub async fn get(&self, id: i64) -> Result<InstanceInfo> {
        let client = self.pool().get().await?;
        let row = client
            .query_opt(GET, &[&id])
            .await
            .map_err(|e| instance_error(e, &id.to_string()))?
            .ok_or_else(|| Error::NotFound {
                what: "workflow instance",
                id: id.to_string(),
            })?;
        let history: Value = row.try_get("history")?;
        Ok(InstanceInfo {
            id: row.try_get("id")?,
            kind: row.try_get("kind")?,
            queue: row.try_get("queue")?,
            step: row.try_get("step")?,
            status: row.try_get("status")?,
            state: row.try_get("state")?,
            input: row.try_get("input")?,
            result: row.try_get("result")?,
            error: row.try_get("error")?,
            attempt: row.try_get("attempt")?,
            max_attempts: row.try_get("max_attempts")?,
            priority: row.try_get("priority")?,
            awaits: row.try_get("awaits")?,
            await_deadline: row.try_get("await_deadline")?,
            parent_id: row.try_get("parent_id")?,
            children_pending: row.try_get("children_pending")?,
            correlation_key: row.try_get("correlation_key")?,
            concurrency_key: row.try_get("concurrency_key")?,
            rate_key: row.try_get("rate_key")?,
            worker: row.try_get("worker")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            finished_at: row.try_get("finished_at")?,
            inbox_pending: row.try_get("inbox_pending")?,
            history: serde_json::from_value(history).map_err(|e| Error::InvalidArgument {
                field: "history",
                reason: e.to_string(),
            })?,
        })
    }

    /// A page of a queue's instances, newest first, in one statement.
    pub async fn list(&self, f: &InstanceFilter) -> Result<InstancePage> {
        crate::job::validate_queue_name(&f.queue)?;
        if let Some(s) = &f.status {
            if !STATUSES.contains(&s.as_str()) {
                return Err(Error::InvalidArgument {
                    field: "status",
                    reason: format!("{s:?} is not one of {}", STATUSES.join(", ")),
                });
            }
        }
        let limit = match f.limit {
            0 => 50,
            n if n > 1000 => {
                return Err(Error::InvalidArgument {
                    field: "limit",
                    reason: format!("{n} is not in 1..=1000"),
                })
            }
            n => n,
        };
        let fetch = (limit + 1) as i32;
        // A filter that can match rarely reads through its own index (migration 0017), so
        // that a page costs its matches and not the queue's history: the correlation key
        // first (a handful of instances), then a terminal status.
        let statement = match (&f.correlation_key, f.status.as_deref()) {
            (Some(_), _) => LIST_CORRELATED,
            (None, Some("done" | "failed" | "cancelled")) => LIST_ENDED,
            // An active status: the queue's active instances only, a bounded walk.
            (None, Some(_)) => return self.list_active(f, limit).await,
            _ => LIST,
        };
        let client = self.pool().get().await?;
        let rows = client
            .query(
                statement,
                &[
                    &f.queue,
                    &f.kind,
                    &f.status,
                    &f.correlation_key,
                    &f.created_after,
                    &f.before,
                    &fetch,
                ],
            )
            .await?;
        let has_more = rows.len() > limit;
        let instances = rows
            .iter()
            .take(limit)
            .map(summary)
            .collect::<Result<Vec<_>>>()?;
        let next = if has_more {
            instances.last().map(|i| i.id)
        } else {
            None
        };
        Ok(InstancePage {
            instances,
            has_more,
            next,
        })
    }

    /// [`Workflows::list`] by an active status: at most [`ACTIVE_SCAN_ROWS`] of the queue's
    /// active instances are read, newest first. A page holds the matches among them; when
    /// the read stopped at that bound before the page was full, the page is short (even
    /// empty) with `has_more`, and `next` is the last instance read.
    async fn list_active(&self, f: &InstanceFilter, limit: usize) -> Result<InstancePage> {
        let client = self.pool().get().await?;
        let rows = client
            .query(
                LIST_ACTIVE,
                &[
                    &f.queue,
                    &f.kind,
                    &f.status,
                    &f.correlation_key,
                    &f.created_after,
                    &f.before,
                    &((limit + 1) as i32),
                    &ACTIVE_SCAN_ROWS,
                ],
            )
            .await?;
        let mut hits = Vec::new();
        // The last instance read, when the read stopped at its bound (the marker row).
        let mut bound_at = None;
        for r in &rows {
            if r.try_get::<_, bool>("hit")? {
                hits.push(summary(r)?);
            }
            if r.try_get::<_, i64>("pos")? == i64::from(ACTIVE_SCAN_ROWS) {
                bound_at = Some(r.try_get::<_, i64>("id")?);
            }
        }
        let (has_more, next) = if hits.len() > limit {
            hits.truncate(limit);
            (true, hits.last().map(|i| i.id))
        } else if bound_at.is_some() {
            (true, bound_at)
        } else {
            (false, None)
        };
        Ok(InstancePage {
            instances: hits,
            has_more,
            next,
        })
    }
}

/// One row of a list statement.
fn summary(r: &tokio_postgres::Row) -> Result<InstanceSummary> {
    Ok(InstanceSummary {
        id: r.try_get("id")?,
        kind: r.try_get("kind")?,
        queue: r.try_get("queue")?,
        step: r.try_get("step")?,
        status: r.try_get("status")?,
        attempt: r.try_get("attempt")?,
        parent_id: r.try_get("parent_id")?,
        correlation_key: r.try_get("correlation_key")?,
        concurrency_key: r.try_get("concurrency_key")?,
        error: r.try_get("error")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        finished_at: r.try_get("finished_at")?,
    })
}
