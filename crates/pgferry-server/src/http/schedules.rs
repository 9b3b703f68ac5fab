//! Schedules of the caller's tenant (docs/schedules.md): create, list, get, delete,
//! pause/resume, preview the next fires, list fires, backfill a past range.
//!
//! Thin: validation and storage are `pgferry_schedules`; this maps queue names through the
//! tenant namespace, errors to the API's shape, and writes the audit log.

use std::time::SystemTime;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use pgferry_schedules::schedule::{format_time, parse_time, validate_name};
use pgferry_schedules::{Missed, NewSchedule, Overlap, Schedule, ScheduleError, Schedules, Target};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, no_nul_json, Authed, JsonBody, Objects};
use super::monitors::present;
use super::paging::{name_page, page};
use crate::auth::namespace::user_queue;
use crate::auth::{admin, Principal, Scope};
use crate::AppState;

fn api(e: ScheduleError) -> ApiError {
    match e {
        ScheduleError::Invalid { field, reason } => ApiError::bad_request(field, reason),
        ScheduleError::NotFound(_) => ApiError::not_found("schedule"),
        ScheduleError::Exists(name) => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("a schedule named {name:?} already exists"),
        )
        .field("name"),
        ScheduleError::Engine(e) => {
            let err = ApiError::from_engine(&e);
            // The engine names `kind` / `queue`: they sit in `target`.
            if err.status == StatusCode::BAD_REQUEST {
                err.within("target")
            } else {
                err
            }
        }
        ScheduleError::Db(e) => ApiError::from(pgferry_core::Error::from(e)),
        other => ApiError::internal(other.to_string()),
    }
}

fn store(state: &AppState) -> Schedules {
    Schedules::new(state.engine.clone())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetBody {
    #[serde(rename = "type")]
    kind_of: String,
    queue: String,
    kind: String,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    priority: Option<u8>,
    #[serde(default, deserialize_with = "present")]
    max_attempts: Option<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: String,
    #[serde(default, deserialize_with = "present")]
    cron: Option<String>,
    #[serde(default, deserialize_with = "present")]
    interval_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    timezone: Option<String>,
    #[serde(default, deserialize_with = "present")]
    jitter_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    start_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    end_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    paused: Option<bool>,
    target: TargetBody,
    #[serde(default, deserialize_with = "present")]
    missed: Option<String>,
    #[serde(default, deserialize_with = "present")]
    catchup_window_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    catchup_max: Option<i32>,
    #[serde(default, deserialize_with = "present")]
    overlap: Option<String>,
    #[serde(default, deserialize_with = "present")]
    grace_ms: Option<i64>,
}

impl Objects for CreateBody {
    const OBJECTS: &'static [&'static str] = &["", "target"];
}

fn target(
    p: &Principal,
    t: TargetBody,
    http_allow: &pgferry_http_jobs::Allow,
) -> ApiResult<Target> {
    no_nul("target.kind", &t.kind)?;
    let queue = p
        .queue(&t.queue)
        .map_err(|e| ApiError::from(e).within("target"))?;
    if t.priority.is_some_and(|n| n > 9) {
        return Err(ApiError::bad_request("target.priority", "must be 0 to 9"));
    }
    match t.kind_of.as_str() {
        "job" => {
            if t.input.is_some() {
                return Err(ApiError::bad_request(
                    "target.input",
                    "only for type workflow",
                ));
            }
            let args = t.args.unwrap_or(json!({}));
            no_nul_json("target.args", &args)?;
            // Fires on the `http` queue are HTTP jobs: checked now as a job would be.
            if t.queue == super::http_jobs::QUEUE {
                super::http_jobs::check(http_allow, &args).map_err(|e| e.within("target"))?;
            }
            Ok(Target::Job {
                queue,
                kind: t.kind,
                args,
                priority: t.priority.unwrap_or(0),
                max_attempts: t.max_attempts,
            })
        }
        "workflow" => {
            if t.args.is_some() || t.priority.is_some() || t.max_attempts.is_some() {
                return Err(ApiError::bad_request(
                    "target.type",
                    "a workflow target takes queue, kind and input only",
                ));
            }
            let input = t.input.unwrap_or(json!({}));
            no_nul_json("target.input", &input)?;
            Ok(Target::Workflow {
                queue,
                kind: t.kind,
                input,
            })
        }
        _ => Err(ApiError::bad_request(
            "target.type",
            "must be job or workflow",
        )),
    }
}

fn spec(
    p: &Principal,
    b: CreateBody,
    http_allow: &pgferry_http_jobs::Allow,
) -> ApiResult<NewSchedule> {
    no_nul("name", &b.name)?;
    validate_name(&b.name).map_err(api)?;
    let target = target(p, b.target, http_allow)?;
    let mut s = NewSchedule::cron(b.name, "@hourly", target);
    s.cron = b.cron;
    if let Some(c) = &s.cron {
        no_nul("cron", c)?;
    }
    s.interval_ms = b.interval_ms;
    if let Some(tz) = b.timezone {
        no_nul("timezone", &tz)?;
        s.timezone = tz;
    }
    s.jitter_ms = b.jitter_ms.unwrap_or(0);
    let time = |field, v: Option<String>| -> ApiResult<Option<SystemTime>> {
        v.map(|t| parse_time(field, &t).map_err(api)).transpose()
    };
    s.start_at = time("start_at", b.start_at)?;
    s.end_at = time("end_at", b.end_at)?;
    s.paused = b.paused.unwrap_or(false);
    if let Some(m) = b.missed {
        s.missed = Missed::parse(&m).map_err(api)?;
    }
    if let Some(o) = b.overlap {
        s.overlap = Overlap::parse(&o).map_err(api)?;
    }
    s.catchup_window_ms = b.catchup_window_ms.unwrap_or(s.catchup_window_ms);
    s.catchup_max = b.catchup_max.unwrap_or(s.catchup_max);
    s.grace_ms = b.grace_ms.unwrap_or(s.grace_ms);
    s.validate().map_err(api)?;
    Ok(s)
}

/// A schedule as the API shows it (user queue names).
fn schedule_json(p: &Principal, s: &Schedule) -> Value {
    let t = |v: Option<SystemTime>| v.map(format_time);
    let target = match &s.spec.target {
        Target::Job {
            queue,
            kind,
            args,
            priority,
            max_attempts,
        } => json!({
            "type": "job",
            "queue": user_queue(p.tenant_id, queue).unwrap_or(queue),
            "kind": kind,
            "args": args,
            "priority": priority,
            "max_attempts": max_attempts,
        }),
        Target::Workflow { queue, kind, input } => json!({
            "type": "workflow",
            "queue": user_queue(p.tenant_id, queue).unwrap_or(queue),
            "kind": kind,
            "input": input,
        }),
    };
    json!({
        "name": s.spec.name,
        "cron": s.spec.cron,
        "interval_ms": s.spec.interval_ms,
        "timezone": s.spec.timezone,
        "jitter_ms": s.spec.jitter_ms,
        "start_at": t(s.spec.start_at),
        "end_at": t(s.spec.end_at),
        "paused": s.spec.paused,
        "target": target,
        "missed": s.spec.missed.as_str(),
        "catchup_window_ms": s.spec.catchup_window_ms,
        "catchup_max": s.spec.catchup_max,
        "overlap": s.spec.overlap.as_str(),
        "grace_ms": s.spec.grace_ms,
        "next_fire_at": t(s.next_fire_at),
        "last_fire_at": t(s.last_fire_at),
        "last_job_id": s.last_job_id,
        "created_at": format_time(s.created_at),
    })
}

async fn audit(state: &AppState, p: &Principal, action: &str, name: &str) -> ApiResult<()> {
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))?;
    admin::audit_api(
        &**client,
        p,
        action,
        name,
        json!({"via": crate::service::transport::current_name()}),
    )
    .await
    .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))
}

fn name_ok(name: &str) -> ApiResult<()> {
    validate_name(name).map_err(api)
}

pub async fn create(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<CreateBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Admin)?;
    let http = b.target.queue == super::http_jobs::QUEUE;
    let allow = super::http_jobs::allow_for(&state, &p, http).await?;
    let spec = spec(&p, b, &allow)?;
    let s = store(&state)
        .create(p.tenant_id, &spec)
        .await
        .map_err(api)?;
    audit(&state, &p, "schedule.create", &s.spec.name).await?;
    Ok((StatusCode::CREATED, Json(schedule_json(&p, &s))))
}

/// `?after=<name>&limit=<1..1000>`: a page in name order; `next` is the cursor.
pub async fn list(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let (after, limit) = name_page(query)?;
    let rows = store(&state)
        .list(p.tenant_id, &after, limit)
        .await
        .map_err(api)?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|s| s.spec.name.clone()))
        .flatten();
    let items: Vec<Value> = rows.iter().map(|s| schedule_json(&p, s)).collect();
    Ok(Json(json!({ "schedules": items, "next": next })))
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok(&name)?;
    let s = store(&state).get(p.tenant_id, &name).await.map_err(api)?;
    Ok(Json(schedule_json(&p, &s)))
}

pub async fn delete(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    name_ok(&name)?;
    store(&state)
        .delete(p.tenant_id, &name)
        .await
        .map_err(api)?;
    audit(&state, &p, "schedule.delete", &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    state: AppState,
    p: Principal,
    name: String,
    paused: bool,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    name_ok(&name)?;
    let s = store(&state)
        .set_paused(p.tenant_id, &name, paused)
        .await
        .map_err(api)?;
    let action = if paused {
        "schedule.pause"
    } else {
        "schedule.resume"
    };
    audit(&state, &p, action, &name).await?;
    Ok(Json(schedule_json(&p, &s)))
}

pub async fn pause(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(state, p, name, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(state, p, name, false).await
}

/// `?n=<1..1000>` (default 10): the next fires from now.
pub async fn preview(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok(&name)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut n = 10i64;
    for (k, v) in pairs {
        match k.as_str() {
            "n" => n = page("n", &v)?,
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let s = store(&state).get(p.tenant_id, &name).await.map_err(api)?;
    let fires = s
        .upcoming(SystemTime::now(), n as usize)
        .map_err(api)?
        .into_iter()
        .map(format_time)
        .collect::<Vec<_>>();
    Ok(Json(json!({ "fires": fires })))
}

/// `?before=<RFC 3339>&limit=<1..1000>`: recorded fires, newest first.
pub async fn fires(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok(&name)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut limit = 100i64;
    // Far enough ahead for any backfilled or future-dated fire.
    let mut before = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_799);
    for (k, v) in pairs {
        match k.as_str() {
            "limit" => limit = page("limit", &v)?,
            "before" => before = parse_time("before", &v).map_err(api)?,
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let rows = store(&state)
        .fires(p.tenant_id, &name, before, limit)
        .await
        .map_err(api)?;
    let items: Vec<Value> = rows
        .iter()
        .map(|f| {
            json!({
                "fire_at": format_time(f.fire_at),
                "recorded_at": format_time(f.recorded_at),
                "outcome": f.outcome,
                "job_id": f.job_id,
                "reason": f.reason,
            })
        })
        .collect();
    Ok(Json(json!({ "fires": items })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillBody {
    from: String,
    to: String,
}

impl Objects for BackfillBody {}

/// Runs every fire time of [from, to] that has no fire yet (at most 1000).
pub async fn backfill(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    JsonBody(b): JsonBody<BackfillBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    name_ok(&name)?;
    let from = parse_time("from", &b.from).map_err(api)?;
    let to = parse_time("to", &b.to).map_err(api)?;
    let done = store(&state)
        .backfill(p.tenant_id, &name, from, to)
        .await
        .map_err(api)?;
    audit(&state, &p, "schedule.backfill", &name).await?;
    let fired: Vec<Value> = done
        .iter()
        .map(|(t, job)| json!({"fire_at": format_time(*t), "job_id": job}))
        .collect();
    Ok(Json(json!({ "fired": fired })))
}
