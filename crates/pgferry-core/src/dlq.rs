//! The dead-letter queue: list (filtered, keyset-paginated), retry, purge.
//!
//! `dead` is a small mutable table (architecture.md §1.3): jobs land there after their last attempt.
//! A retried dead job keeps its id; its earlier attempts stay in the log's history.

use std::time::SystemTime;

use serde_json::Value;

use crate::engine::Engine;
use crate::error::{Error, Result};

const DEAD_LIST: &str = include_str!("sql/dead_list.sql");
const DEAD_RETRY: &str = include_str!("sql/dead_retry.sql");
const DEAD_PURGE: &str = include_str!("sql/dead_purge.sql");

/// Largest page of `list_dead`, and most jobs one `retry_dead` call moves.
pub const MAX_PAGE: u32 = 1000;

/// Which dead jobs an operation applies to. Empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    /// Engine queue names (servers pass the caller's tenant's queues). None: all queues.
    pub queues: Option<Vec<String>>,
    pub kind: Option<String>,
    /// Substring of the last error.
    pub error_contains: Option<String>,
    /// Only these ids.
    pub ids: Option<Vec<i64>>,
}

#[derive(Debug, Clone)]
pub struct DeadJob {
    pub id: i64,
    pub queue: String,
    pub kind: String,
    pub args: Value,
    pub meta: Option<Value>,
    pub attempt: i32,
    pub max_attempts: i32,
    pub error: Option<String>,
    pub died_at: SystemTime,
    /// When the job was enqueued (its oldest row in the log when it died).
    pub enqueued_at: Option<SystemTime>,
    pub priority: i16,
}

/// A page of dead jobs; `next` is the cursor for the following page when `has_more`.
#[derive(Debug, Clone)]
pub struct DeadPage {
    pub jobs: Vec<DeadJob>,
    pub has_more: bool,
    pub next: Option<String>,
}

/// Cursor text: "<died_at µs since epoch>.<job id>" (opaque to callers).
fn encode_cursor(j: &DeadJob) -> String {
    let us = j
        .died_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!("{us}.{}", j.id)
}

fn decode_cursor(c: &str) -> Result<(SystemTime, i64)> {
    let bad = || Error::InvalidArgument {
        field: "cursor",
        reason: "not a cursor returned by a previous page".into(),
    };
    let (us, id) = c.split_once('.').ok_or_else(bad)?;
    let us: u64 = us.parse().map_err(|_| bad())?;
    let id: i64 = id.parse().map_err(|_| bad())?;
    Ok((
        SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(us),
        id,
    ))
}

fn check_limit(limit: u32) -> Result<i64> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(Error::InvalidArgument {
            field: "limit",
            reason: format!("{limit} is not in 1..={MAX_PAGE}"),
        });
    }
    Ok(i64::from(limit))
}

impl Engine {
    /// Dead jobs newest first, `limit` per page.
    pub async fn list_dead(
        &self,
        f: &DeadFilter,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<DeadPage> {
        let limit = check_limit(limit)?;
        let (at, id) = match cursor.filter(|c| !c.is_empty()) {
            Some(c) => {
                let (at, id) = decode_cursor(c)?;
                (Some(at), Some(id))
            }
            None => (None, None),
        };
        let client = self.pool().get().await?;
        let rows = client
            .query(
                DEAD_LIST,
                &[
                    &f.queues,
                    &f.kind,
                    &f.error_contains,
                    &at,
                    &id,
                    &(limit + 1),
                ],
            )
            .await?;
        let mut jobs: Vec<DeadJob> = rows
            .iter()
            .map(|r| DeadJob {
                id: r.get("job_id"),
                queue: r.get("queue"),
                kind: r.get("kind"),
                args: r.get("args"),
                meta: r.get("meta"),
                attempt: r.get("attempt"),
                max_attempts: r.get("max_attempts"),
                error: r.get("error"),
                died_at: r.get("died_at"),
                enqueued_at: r.get("enqueued_at"),
                priority: r.get("priority"),
            })
            .collect();
        let has_more = jobs.len() as i64 > limit;
        jobs.truncate(limit as usize);
        let next = has_more.then(|| encode_cursor(jobs.last().expect("a full page")));
        Ok(DeadPage {
            jobs,
            has_more,
            next,
        })
    }

    /// Moves up to `limit` matching dead jobs back into the log (oldest deaths first);
    /// returns how many moved. Each gets the next attempt number and a fresh set of attempts.
    pub async fn retry_dead(&self, f: &DeadFilter, limit: u32) -> Result<i64> {
        let limit = check_limit(limit)?;
        let client = self.pool().get().await?;
        let row = client
            .query_one(
                DEAD_RETRY,
                &[&f.queues, &f.kind, &f.error_contains, &f.ids, &limit],
            )
            .await?;
        Ok(row.get("retried"))
    }

    /// Deletes every matching dead job; returns how many.
    pub async fn purge_dead(&self, f: &DeadFilter) -> Result<i64> {
        let client = self.pool().get().await?;
        let row = client
            .query_one(DEAD_PURGE, &[&f.queues, &f.kind, &f.error_contains, &f.ids])
            .await?;
        Ok(row.get("purged"))
    }
}
