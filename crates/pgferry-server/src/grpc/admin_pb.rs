//! Admin service helpers: engine values as protocol messages, request fields as engine
//! values, and errors as statuses (`code: message (field)`).

// tonic's service methods return `Status` by value; these helpers feed them directly.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgferry_core::{Durability, Error as EngineError, JobInfo, JobState, QueueCounts};
use tonic::Status;

use crate::auth::{user_queue, Principal};
use crate::proto::v1 as pb;

/// Default page of ListJobs / ListDead.
const DEFAULT_PAGE: u32 = 50;

pub(super) fn status(e: &EngineError, field_prefix: &str) -> Status {
    let pb = super::engine_error(e, field_prefix);
    let msg = if pb.field.is_empty() {
        format!("{}: {}", pb.code, pb.message)
    } else {
        format!("{}: {} ({})", pb.code, pb.message, pb.field)
    };
    match e {
        _ if e.is_unavailable() => Status::unavailable(msg),
        EngineError::NotFound { .. } => Status::not_found(msg),
        EngineError::Conflict(_) => Status::failed_precondition(msg),
        EngineError::PayloadTooLarge { .. } | EngineError::BatchTooLarge { .. } => {
            Status::resource_exhausted(msg)
        }
        EngineError::Db(_) => Status::internal(msg),
        EngineError::Pool(_) => Status::unavailable(msg),
        _ => Status::invalid_argument(msg),
    }
}

pub(super) fn invalid(field: &str, message: &str) -> Status {
    Status::invalid_argument(format!("invalid_argument: {message} ({field})"))
}

pub(super) fn not_found(what: &str) -> Status {
    Status::not_found(format!("not_found: {what} not found"))
}

pub(super) fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(super) fn from_unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}
pub(super) fn job_pb(info: JobInfo, queue: String) -> pb::JobInfo {
    let meta = match info.meta.map(|m| m.to_value()) {
        Some(serde_json::Value::Object(m)) => m
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        _ => Default::default(),
    };
    pb::JobInfo {
        id: info.id,
        queue,
        kind: info.kind,
        state: info.state.as_str().to_string(),
        args: info.args.to_string(),
        meta,
        priority: u32::try_from(info.priority).unwrap_or(0),
        max_attempts: info.max_attempts,
        enqueued_at_unix_ms: info.enqueued_at.map_or(0, unix_ms),
        run_at_unix_ms: info.run_at.map(unix_ms),
        attempts: info
            .attempts
            .into_iter()
            .map(|a| pb::AttemptInfo {
                attempt: a.attempt,
                outcome: a.outcome.to_string(),
                error: a.error.unwrap_or_default(),
                error_kind: String::new(),
                claimed_at_unix_ms: a.claimed_at.map_or(0, unix_ms),
                finished_at_unix_ms: a.finished_at.map_or(0, unix_ms),
                duration_ms: a.duration_ms.map_or(0, |d| d.max(0) as u32),
                worker: a.worker.unwrap_or_default(),
            })
            .collect(),
        result: info.result.map(|r| r.to_string()).unwrap_or_default(),
        unique_key: info.unique_key,
    }
}

/// A row of queues_list.sql / queue_get.sql as the API shows it (user name), with its counts.
pub(super) fn queue_pb(
    p: &Principal,
    row: &tokio_postgres::Row,
    counts: &HashMap<String, QueueCounts>,
) -> Option<pb::QueueInfo> {
    let engine_name: String = row.get("name");
    let name = user_queue(p.tenant_id, &engine_name)?.to_string();
    let c = counts.get(&engine_name).copied().unwrap_or_default();
    let ms = |column: &str| row.get::<_, i32>(column).max(0) as u64;
    let durability = Durability::from_async_commit(row.get("async_commit"))
        .as_str()
        .to_string();
    Some(pb::QueueInfo {
        name,
        paused: row.get("paused"),
        settings: Some(pb::QueueSettings {
            concurrency: row
                .get::<_, Option<i32>>("concurrency")
                .map(|n| n.max(0) as u32),
            max_attempts: Some(row.get("max_attempts")),
            backoff_base_ms: Some(ms("backoff_base_ms")),
            backoff_cap_ms: Some(ms("backoff_cap_ms")),
            lease_ms: Some(ms("lease_ms")),
            retention_ms: Some(row.get::<_, i64>("retention_ms").max(0) as u64),
            aging_ms: Some(ms("aging_ms")),
            durability: Some(durability.clone()),
        }),
        counts: Some(pb::QueueCounts {
            pending: c.pending,
            scheduled: c.scheduled,
            running: c.running,
            completed: c.completed,
            failed: c.failed,
            dead: c.dead,
            cancelled: c.cancelled,
            enqueued: c.enqueued,
        }),
        durability,
    })
}

/// `settings.durability` of an UpdateQueue request: unset keeps the current value.
pub(super) fn durability_setting(v: Option<&str>) -> Result<Option<Durability>, Status> {
    v.map(|s| {
        s.parse()
            .map_err(|_| invalid("settings.durability", "must be \"sync\" or \"async\""))
    })
    .transpose()
}

pub(super) fn parse_state(s: &str) -> Result<Option<JobState>, Status> {
    if s.is_empty() {
        return Ok(None);
    }
    JobState::from_name(s).map(Some).ok_or_else(|| {
        invalid(
            "state",
            "must be pending, scheduled, running, completed, dead or cancelled",
        )
    })
}

pub(super) fn page_limit(limit: u32, max: u32) -> Result<u32, Status> {
    match limit {
        0 => Ok(DEFAULT_PAGE.min(max)),
        n if n <= max => Ok(n),
        _ => Err(invalid("limit", &format!("must be at most {max}"))),
    }
}

pub(super) fn ms_setting(
    field: &str,
    v: Option<u64>,
    lo: u64,
    hi: u64,
) -> Result<Option<Duration>, Status> {
    match v {
        None => Ok(None),
        Some(v) if (lo..=hi).contains(&v) => Ok(Some(Duration::from_millis(v))),
        Some(_) => Err(invalid(field, &format!("must be {lo} to {hi}"))),
    }
}
