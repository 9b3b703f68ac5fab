//! The admin use cases: a caller's jobs (cancel, retry), its dead letters (which ones,
//! retry, purge) and its queues (pause, resume, cancel matching jobs, workflow retention).
//! Both transports call these after checking the caller's scope; what is decided here —
//! that a job or queue of another tenant is "not found", which filters are valid, what is
//! audited and how — is decided once. Errors are engine errors; each transport renders them in its own form.

use std::time::Duration;

use pgferry_core::dlq::MAX_PAGE;
use pgferry_core::workflow::Workflows;
use pgferry_core::{
    CancelFilter, CancelMatched, DeadFilter, Engine, Error, JobInfo, JobState, Result,
};
use serde_json::{json, Value};

use crate::auth::namespace::tenant_prefix;
use crate::auth::{admin, user_queue, Principal};

const QUEUES_LIST: &str = include_str!("../http/sql/queues_list.sql");
const QUEUE_GET: &str = include_str!("../http/sql/queue_get.sql");

/// Which transport an audited action came through (recorded with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Http,
    Grpc,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Http => "http",
            Via::Grpc => "grpc",
        }
    }
}

/// Records an admin action of `p` in the audit log (after the action committed).
pub async fn audit(
    engine: &Engine,
    p: &Principal,
    via: Via,
    action: &str,
    target: &str,
    mut detail: Value,
) -> Result<()> {
    if let Value::Object(m) = &mut detail {
        m.insert("via".into(), json!(via.as_str()));
    }
    let client = engine.pool().get().await?;
    admin::audit_api(&**client, p, action, target, detail).await?;
    Ok(())
}

/// The job, if it is in one of the caller's tenant's queues; otherwise `NotFound`, exactly
/// as an unknown id (a caller learns nothing about other tenants' ids).
pub async fn own_job(engine: &Engine, p: &Principal, id: i64) -> Result<JobInfo> {
    let job = engine.get_job(id).await?;
    if user_queue(p.tenant_id, &job.queue).is_none() {
        return Err(not_found_job(id));
    }
    Ok(job)
}

fn not_found_job(id: i64) -> Error {
    Error::NotFound {
        what: "job",
        id: id.to_string(),
    }
}

/// Cancels one of the caller's jobs (a scheduled or pending job never runs; a running one's
/// worker is told) and answers the job as it is now.
pub async fn cancel_job(engine: &Engine, p: &Principal, id: i64, reason: &str) -> Result<JobInfo> {
    own_job(engine, p, id).await?;
    engine.cancel(id, Some(reason)).await?;
    own_job(engine, p, id).await
}

/// Runs one of the caller's dead-lettered jobs again (same id, history kept). Any other
/// state is a conflict: pending, scheduled and running jobs will run anyway; completed and
/// cancelled ones are final.
pub async fn retry_job(engine: &Engine, p: &Principal, id: i64) -> Result<JobInfo> {
    let job = own_job(engine, p, id).await?;
    if job.state != JobState::Dead {
        return Err(Error::Conflict(format!(
            "job {id} is {}; only dead-lettered jobs can be retried",
            job.state.as_str()
        )));
    }
    let filter = DeadFilter {
        queues: Some(vec![job.queue.clone()]),
        ids: Some(vec![id]),
        ..DeadFilter::default()
    };
    if engine.retry_dead(&filter, 1).await? == 0 {
        return Err(Error::Conflict(format!(
            "job {id} is no longer dead-lettered"
        )));
    }
    own_job(engine, p, id).await
}

/// The engine names of the caller's tenant's queues.
pub async fn tenant_queues(engine: &Engine, p: &Principal) -> Result<Vec<String>> {
    let client = engine.pool().get().await?;
    let rows = client
        .query(QUEUES_LIST, &[&tenant_prefix(p.tenant_id)])
        .await?;
    Ok(rows.iter().map(|r| r.get("name")).collect())
}

/// Which dead letters, as a caller names them (user-facing queue name; `None`: any).
#[derive(Debug, Default, Clone)]
pub struct DeadQuery {
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub error_contains: Option<String>,
    pub ids: Option<Vec<i64>>,
}

/// The engine filter for a caller's query: always limited to the caller's queues (one, or
/// every queue of the tenant — never "all queues"), every field checked.
pub async fn dead_filter(engine: &Engine, p: &Principal, q: DeadQuery) -> Result<DeadFilter> {
    if let Some(k) = &q.kind {
        pgferry_core::job::validate_kind(k)?;
    }
    if let Some(e) = &q.error_contains {
        if e.contains('\0') {
            return Err(invalid("error_contains", "may not contain U+0000"));
        }
        if e.len() > 1024 {
            return Err(invalid("error_contains", "must be at most 1024 bytes"));
        }
    }
    if let Some(ids) = &q.ids {
        if ids.len() > MAX_PAGE as usize {
            return Err(invalid("ids", "at most 1000 ids"));
        }
        if let Some(i) = ids.iter().position(|id| *id < 1) {
            return Err(invalid("ids", &format!("ids[{i}]: job ids are positive")));
        }
    }
    let queues = match &q.queue {
        Some(name) => vec![p.queue(name)?],
        None => tenant_queues(engine, p).await?,
    };
    Ok(DeadFilter {
        queues: Some(queues),
        kind: q.kind,
        error_contains: q.error_contains,
        ids: q.ids,
    })
}

fn invalid(field: &'static str, reason: &str) -> Error {
    Error::InvalidArgument {
        field,
        reason: reason.to_string(),
    }
}

/// Runs the matching dead letters again (at most a page per call); audited.
pub async fn retry_dead(engine: &Engine, p: &Principal, f: &DeadFilter, via: Via) -> Result<i64> {
    let n = engine.retry_dead(f, MAX_PAGE).await?;
    audit(engine, p, via, "dead.retry", "dead", json!({ "count": n })).await?;
    Ok(n)
}

/// Deletes the matching dead letters for good; audited.
pub async fn purge_dead(engine: &Engine, p: &Principal, f: &DeadFilter, via: Via) -> Result<i64> {
    let n = engine.purge_dead(f).await?;
    audit(engine, p, via, "dead.purge", "dead", json!({ "count": n })).await?;
    Ok(n)
}

/// Pauses or resumes one of the caller's queues; audited. Returns its engine name.
pub async fn set_paused(
    engine: &Engine,
    p: &Principal,
    queue: &str,
    paused: bool,
    via: Via,
) -> Result<String> {
    let name = p.queue(queue)?;
    if paused {
        engine.pause_queue(&name).await?;
    } else {
        engine.resume_queue(&name).await?;
    }
    let action = if paused {
        "queue.pause"
    } else {
        "queue.resume"
    };
    audit(engine, p, via, action, queue, json!({})).await?;
    Ok(name)
}

/// Cancels the jobs of one of the caller's queues that match (at most `limit`); audited
/// with the filter and the counts. The queue must exist (else `NotFound`).
pub async fn cancel_matching(
    engine: &Engine,
    p: &Principal,
    queue: &str,
    f: &CancelFilter,
    limit: u32,
    via: Via,
) -> Result<CancelMatched> {
    let name = p.queue(queue)?;
    let exists = {
        let client = engine.pool().get().await?;
        client.query_opt(QUEUE_GET, &[&name]).await?.is_some()
    };
    if !exists {
        return Err(Error::NotFound {
            what: "queue",
            id: queue.to_string(),
        });
    }
    let done = engine.cancel_matching(&name, f, Some("api"), limit).await?;
    let states: Vec<&str> = f.states.iter().map(|s| s.as_str()).collect();
    let detail = json!({
        "kind": f.kind,
        "states": states,
        "cancelled": {
            "scheduled": done.scheduled,
            "pending": done.pending,
            "running": done.running,
        },
    });
    audit(engine, p, via, "queue.cancel", queue, detail).await?;
    Ok(done)
}

/// Longest workflow retention a queue may set: ten years.
pub const MAX_WORKFLOW_RETENTION_MS: u64 = 315_360_000_000;

/// How long ended workflow instances of one of the caller's queues are kept (`None`: the
/// server's default, `LeaderConfig::workflow_retention`), in milliseconds.
pub async fn workflow_retention(
    engine: &Engine,
    p: &Principal,
    queue: &str,
) -> Result<Option<u64>> {
    let name = p.queue(queue)?;
    Ok(retention_ms(Workflows::of(engine).retention(&name).await?))
}

/// Sets (or, with `None`, clears) a queue's workflow retention; audited. Both transports
/// call this so the bound and the field named in the error are the same on each.
pub async fn set_workflow_retention(
    engine: &Engine,
    p: &Principal,
    queue: &str,
    ms: Option<u64>,
    via: Via,
) -> Result<Option<u64>> {
    let name = p.queue(queue)?;
    if ms.is_some_and(|ms| ms > MAX_WORKFLOW_RETENTION_MS) {
        return Err(Error::InvalidArgument {
            field: "retention_ms",
            reason: format!("must be 0 to {MAX_WORKFLOW_RETENTION_MS}"),
        });
    }
    let retention = ms.map(Duration::from_millis);
    Workflows::of(engine)
        .set_retention(&name, retention)
        .await?;
    audit(
        engine,
        p,
        via,
        "workflow.retention",
        queue,
        json!({ "retention_ms": ms }),
    )
    .await?;
    Ok(retention_ms(retention))
}

/// Stored as an interval from seconds: read back to the millisecond that was written.
fn retention_ms(retention: Option<Duration>) -> Option<u64> {
    retention.map(|d| (d.as_secs_f64() * 1000.0).round() as u64)
}
