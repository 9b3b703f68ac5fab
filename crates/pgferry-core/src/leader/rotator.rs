//! Rotator: opens the next segment on a timer and frees the oldest sealed one by TRUNCATE
//! (DESIGN §3.4).
//!
//! A segment is freed only when (1) its retention has passed, (2) no transaction still holds
//! a write lock on its ready partition, (3) every attempt in it has an outcome. (2) and (3)
//! are checked without locks; then one short transaction takes ACCESS EXCLUSIVE on the
//! segment's partitions with a small lock_timeout (giving up rather than stalling claims),
//! copies forward lane cursors that live there, truncates and marks the segment free. Under
//! that lock no writer can be in progress, and a row committed between the checks and the
//! lock would need a statement that read the current segment before it was sealed yet had
//! not locked the partition when (2) ran — a window of microseconds against a segment that
//! was sealed for at least the retention period.

use std::time::Duration;

use tokio_postgres::{Client, Config};

use super::{duty_loop, LeaderConfig};
use crate::error::Result;

const ADVANCE: &str = include_str!("../sql/advance_segment.sql");
const OLDEST_SEALED: &str = include_str!("../sql/segment_oldest_sealed.sql");
const WRITERS: &str = include_str!("../sql/segment_writers.sql");
const OPEN_JOBS: &str = include_str!("../sql/segment_open_jobs.sql");
const CARRY_CURSORS: &str = include_str!("../sql/carry_cursors.sql");
const FREE: &str = include_str!("../sql/segment_free.sql");

/// Hot tables of a segment, all truncated together.
const SEGMENT_TABLES: [&str; 5] = ["ready", "receipts", "completions", "results", "ticks"];

/// Why the oldest sealed segment was not freed (or that it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeResult {
    Freed(i16),
    NoneSealed,
    RetentionPending(i16),
    WriterInProgress(i16),
    OpenJobs(i16),
    LockTimeout(i16),
}

/// Seals the current segment and opens the next if it is older than `segment_duration`.
pub async fn advance(client: &Client, segment_duration: Duration) -> Result<bool> {
    let ms = i64::try_from(segment_duration.as_millis()).unwrap_or(i64::MAX);
    Ok(!client.query(ADVANCE, &[&ms]).await?.is_empty())
}

/// Name of one partition. Segment numbers come from our own table, never from input.
fn partition(table: &str, segment: i16) -> String {
    format!("pgferry.{table}_{segment:02}")
}

/// Tries to free the oldest sealed segment.
pub async fn free_oldest(
    client: &mut Client,
    retention: Duration,
    lock_timeout: Duration,
) -> Result<FreeResult> {
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let Some(row) = client.query_opt(OLDEST_SEALED, &[&retention_ms]).await? else {
        return Ok(FreeResult::NoneSealed);
    };
    let (segment, retention_passed): (i16, bool) = (row.get(0), row.get(1));
    if !retention_passed {
        return Ok(FreeResult::RetentionPending(segment));
    }
    // Order matters: writers first, then the content check with a later snapshot.
    let writers: bool = client
        .query_one(WRITERS, &[&partition("ready", segment)])
        .await?
        .get(0);
    if writers {
        return Ok(FreeResult::WriterInProgress(segment));
    }
    let open: bool = client.query_one(OPEN_JOBS, &[&segment]).await?.get(0);
    if open {
        return Ok(FreeResult::OpenJobs(segment));
    }
    let tables: Vec<String> = SEGMENT_TABLES
        .iter()
        .map(|t| partition(t, segment))
        .collect();
    let tables = tables.join(", ");
    let tx = client.transaction().await?;
    let timeout_ms = lock_timeout.as_millis().max(1);
    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{timeout_ms}ms'"))
        .await?;
    if let Err(e) = tx
        .batch_execute(&format!("LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE"))
        .await
    {
        if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
            return Ok(FreeResult::LockTimeout(segment));
        }
        return Err(e.into());
    }
    tx.execute(CARRY_CURSORS, &[&segment]).await?;
    tx.batch_execute(&format!("TRUNCATE {tables}")).await?;
    tx.execute(FREE, &[&segment]).await?;
    tx.commit().await?;
    tracing::debug!(segment, "segment freed");
    Ok(FreeResult::Freed(segment))
}

/// One rotation: advance if due, then free as many old segments as possible.
pub async fn rotate(client: &mut Client, config: &LeaderConfig) -> Result<Vec<FreeResult>> {
    advance(client, config.segment_duration).await?;
    let mut results = Vec::new();
    loop {
        let r = free_oldest(client, config.retention, config.truncate_lock_timeout).await?;
        results.push(r);
        if !matches!(r, FreeResult::Freed(_)) {
            return Ok(results);
        }
    }
}

pub async fn run(pg: Config, config: LeaderConfig) {
    let every = config.rotate_interval;
    duty_loop(pg, "rotator", every, move |mut client| {
        let config = config.clone();
        async move {
            let r = rotate(&mut client, &config).await.map(|_| false);
            (client, r)
        }
    })
    .await
}
