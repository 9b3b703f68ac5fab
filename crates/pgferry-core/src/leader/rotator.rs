//! Rotator: opens the next segment on a timer and frees the oldest sealed one (architecture.md §3.5).
//!
//! Freeing never takes a lock that the hot path would queue behind. A plain `TRUNCATE` of a
//! partition needs ACCESS EXCLUSIVE on it, and every claim and completion holds ACCESS SHARE
//! on all partitions of `ready`; under load such a lock request waits, and every new claim
//! queues behind the waiting request. Instead each partition of the segment is
//! `DETACH … CONCURRENTLY` (waits for transactions that may use it, blocks no one), then the
//! detached tables — unreachable through the parents — are checked again and truncated. They
//! stay detached while the segment is free (ADR 0009): every hot statement is a generic plan
//! that locks and starts a scan on each attached partition, so only the segments in use and
//! the next one to open are attached. The next one is `ATTACH`ed (SHARE UPDATE EXCLUSIVE on
//! the parents: compatible with all DML) a segment ahead of its opening (see [`advance`]). A
//! COPY that names any other free segment fails and is retried in the current one.
//!
//! A segment is freed only when (1) its retention has passed, (2) no transaction holds a write
//! lock on its ready partition (an early exit: detaching would wait for that transaction),
//! (3) every attempt in it has an outcome — checked before detaching and, decisively, again
//! on the detached tables, where nothing can be added any more. If that last check finds an
//! open attempt the partitions are attached back untouched.
//!
//! The segment is marked 'freeing' first; a crash part-way is finished by the next pass.
//!
//! An attempt that heartbeats for hours would keep its segment, and so the whole ring, from
//! turning: when the oldest segment is still open, its attempts with a live long lease are
//! handed over to `long_leases` (ADR 0008), which then counts them closed for the segment;
//! the truncating transaction forgets that count (`handed_seg`) as the number is reused.

use std::time::Duration;

use tokio_postgres::Client;

use super::duty::{Duty, DutyFuture, Next};
use super::LeaderConfig;
use crate::error::Result;

const ADVANCE: &str = include_str!("../sql/advance_segment.sql");
const NEXT_FREE: &str = include_str!("../sql/segment_next_free.sql");
const OLDEST_SEALED: &str = include_str!("../sql/segment_oldest_sealed.sql");
const WRITERS: &str = include_str!("../sql/segment_writers.sql");
const OPEN_JOBS: &str = include_str!("../sql/segment_open_jobs.sql");
const CARRY_LOCK: &str = include_str!("../sql/carry_cursors_lock.sql");
const CARRY_CURSORS: &str = include_str!("../sql/carry_cursors.sql");
const MARK: &str = include_str!("../sql/segment_mark.sql");
const PARTITION_STATE: &str = include_str!("../sql/partition_state.sql");
const FREEING: &str = include_str!("../sql/segments_freeing.sql");
const HAND_OVER: &str = include_str!("../sql/hand_over.sql");

/// Hot tables of a segment, all freed together.
const SEGMENT_TABLES: [&str; 5] = ["ready", "receipts", "completions", "results", "ticks"];

/// What happened to the oldest sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeResult {
    Freed(i16),
    NoneSealed,
    RetentionPending(i16),
    WriterInProgress(i16),
    OpenJobs(i16),
}

/// Seals the current segment and opens the next if it is older than `segment_duration`, then
/// attaches the segment after it ahead of time.
///
/// A segment must be attached well before it becomes current. A session takes in an
/// `ATTACH` only when it next acquires a lock it did not hold (that is when invalidations are
/// read), while a new snapshot sees the attaching transaction committed at once: a claim
/// already holding its locks, whose next statement read the new current segment, found no
/// partition for its receipt (seen with 60 ms segments). So the next segment is attached one
/// whole segment (or at least one rotation pass) before it opens, and a segment that is not
/// attached yet is attached now and opened on a later pass.
pub async fn advance(client: &Client, segment_duration: Duration) -> Result<bool> {
    if attach_next(client).await? {
        return Ok(false);
    }
    let ms = i64::try_from(segment_duration.as_millis()).unwrap_or(i64::MAX);
    let advanced = !client.query(ADVANCE, &[&ms]).await?.is_empty();
    if advanced {
        attach_next(client).await?;
    }
    Ok(advanced)
}

/// Attaches the tables of the segment after the current one if it is free and detached;
/// true when it attached any.
async fn attach_next(client: &Client) -> Result<bool> {
    let Some(row) = client.query_opt(NEXT_FREE, &[]).await? else {
        return Ok(false);
    };
    let next: i16 = row.get("segment");
    let mut attached = false;
    for table in SEGMENT_TABLES {
        attached |= attach(client, table, next).await?;
    }
    Ok(attached)
}

/// Name of one partition. Segment numbers come from our own table, never from input; DDL
/// cannot take identifiers as parameters, hence the formatting.
fn partition(table: &str, segment: i16) -> String {
    format!("pgferry.{table}_{segment:02}")
}

/// Tries to free the oldest sealed segment (after finishing any half-freed one).
pub async fn free_oldest(client: &mut Client, retention: Duration) -> Result<FreeResult> {
    repair(client).await?;
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let Some(row) = client.query_opt(OLDEST_SEALED, &[&retention_ms]).await? else {
        return Ok(FreeResult::NoneSealed);
    };
    let (segment, retention_passed): (i16, bool) =
        (row.get("segment"), row.get("retention_passed"));
    if !retention_passed {
        return Ok(FreeResult::RetentionPending(segment));
    }
    let writers: bool = client
        .query_one(WRITERS, &[&partition("ready", segment)])
        .await?
        .get("writing");
    if writers {
        return Ok(FreeResult::WriterInProgress(segment));
    }
    let open: bool = client
        .query_one(OPEN_JOBS, &[&segment])
        .await?
        .get("has_open_jobs");
    if open
        && (hand_over(client, segment).await? == 0
            || client
                .query_one(OPEN_JOBS, &[&segment])
                .await?
                .get("has_open_jobs"))
    {
        return Ok(FreeResult::OpenJobs(segment));
    }
    if client
        .execute(MARK, &[&segment, &"sealed", &"freeing"])
        .await?
        == 0
    {
        // Another rotator (a previous leader still finishing) got here first.
        return Ok(FreeResult::NoneSealed);
    }
    carry_cursors(client, segment).await?;
    finish_freeing(client, segment).await
}

/// Hands the segment's open long-leased attempts over to `long_leases`; returns how many.
pub async fn hand_over(client: &Client, segment: i16) -> Result<i32> {
    Ok(client
        .query_one(HAND_OVER, &[&segment])
        .await?
        .get("handed"))
}

/// Copies lane cursors out of the segment while holding those lanes' claim locks.
async fn carry_cursors(client: &mut Client, segment: i16) -> Result<()> {
    let tx = client.transaction().await?;
    tx.query_one(CARRY_LOCK, &[&segment]).await?;
    tx.execute(CARRY_CURSORS, &[&segment]).await?;
    tx.commit().await?;
    Ok(())
}

/// Detach, recheck, truncate; the partitions stay detached until the segment is opened
/// again (`advance`). Idempotent: every step looks at the catalog first.
async fn finish_freeing(client: &Client, segment: i16) -> Result<FreeResult> {
    for table in SEGMENT_TABLES {
        detach(client, table, segment).await?;
    }
    let (ready, completions) = (
        partition("ready", segment),
        partition("completions", segment),
    );
    let recheck = format!(
        "SELECT (SELECT count(*) FROM {ready}) > (SELECT coalesce(sum(cardinality(job_ids)), 0) FROM {completions}) \
         + (SELECT count(*) FROM pgferry.long_leases WHERE handed_seg = {segment}) AS has_open_jobs"
    );
    let open: bool = client.query_one(&recheck, &[]).await?.get("has_open_jobs");
    if open {
        tracing::warn!(
            segment,
            "an attempt reached a segment after its checks; keeping it"
        );
        for table in SEGMENT_TABLES {
            attach(client, table, segment).await?;
        }
        client
            .execute(MARK, &[&segment, &"freeing", &"sealed"])
            .await?;
        return Ok(FreeResult::OpenJobs(segment));
    }
    let tables: Vec<String> = SEGMENT_TABLES
        .iter()
        .map(|t| partition(t, segment))
        .collect();
    // One transaction (a multi-statement simple query): the hand-overs this segment counted
    // closed must stop counting exactly when its number is free for reuse, and outcomes
    // naming the old incarnation become stale (segments.reuse_floor).
    client
        .batch_execute(&format!(
            "TRUNCATE {}; UPDATE pgferry.long_leases SET handed_seg = NULL WHERE handed_seg = {segment}; \
             UPDATE pgferry.segments SET reuse_floor = (SELECT last_value FROM pgferry.receipt_seq) \
             WHERE segment = {segment}",
            tables.join(", ")
        ))
        .await?;
    client
        .execute(MARK, &[&segment, &"freeing", &"free"])
        .await?;
    tracing::debug!(segment, "segment freed");
    Ok(FreeResult::Freed(segment))
}

/// Finishes segments a crash left in 'freeing'.
async fn repair(client: &Client) -> Result<()> {
    for row in client.query(FREEING, &[]).await? {
        let segment: i16 = row.get("segment");
        tracing::info!(segment, "finishing an interrupted segment rotation");
        finish_freeing(client, segment).await?;
    }
    Ok(())
}

async fn detach(client: &Client, table: &str, segment: i16) -> Result<()> {
    let part = partition(table, segment);
    let state = client.query_opt(PARTITION_STATE, &[&part]).await?;
    let sql = match state.map(|r| r.get::<_, bool>("inhdetachpending")) {
        None => return Ok(()),
        Some(false) => format!("ALTER TABLE pgferry.{table} DETACH PARTITION {part} CONCURRENTLY"),
        Some(true) => format!("ALTER TABLE pgferry.{table} DETACH PARTITION {part} FINALIZE"),
    };
    client.batch_execute(&sql).await?;
    Ok(())
}

/// Attaches one partition unless it is attached; true when it did.
async fn attach(client: &Client, table: &str, segment: i16) -> Result<bool> {
    let part = partition(table, segment);
    if client.query_opt(PARTITION_STATE, &[&part]).await?.is_some() {
        return Ok(false);
    }
    client
        .batch_execute(&format!(
            "ALTER TABLE pgferry.{table} ATTACH PARTITION {part} FOR VALUES IN ({segment})"
        ))
        .await?;
    Ok(true)
}

/// One rotation: advance if due, then free as many old segments as possible.
pub async fn rotate(client: &mut Client, config: &LeaderConfig) -> Result<Vec<FreeResult>> {
    advance(client, config.segment_duration).await?;
    let mut results = Vec::new();
    loop {
        let r = free_oldest(client, config.retention).await?;
        results.push(r);
        if !matches!(r, FreeResult::Freed(_)) {
            return Ok(results);
        }
    }
}

/// The rotator duty.
pub struct Rotator {
    pub config: LeaderConfig,
}

impl Duty for Rotator {
    fn name(&self) -> &'static str {
        "rotator"
    }

    fn interval(&self) -> std::time::Duration {
        self.config.rotate_interval
    }

    fn run_once<'a>(&'a mut self, client: &'a mut Client) -> DutyFuture<'a, Next> {
        Box::pin(async move {
            rotate(client, &self.config).await?;
            Ok(Next::Idle)
        })
    }
}
