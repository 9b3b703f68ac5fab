//! Workflow steps for HTTP workers (docs/workflows.md#remote-workers): claim a batch of
//! due steps, answer each with one outcome, extend long steps' leases, declare what kinds
//! load. Thin: the checks and the engine calls are in [`crate::wfsteps`].

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pgferry_core::workflow::{Caps, Workflows};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, Authed, JsonBody, Objects};
use super::jobs::unix_ms;
use crate::auth::Scope;
use crate::wfsteps::{self, OutcomeBody, StepToken};
use crate::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    queue: String,
    #[serde(default)]
    max: Option<u32>,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    lease_ms: Option<u64>,
    /// Longest wait for a step when none is due (long poll); 0: answer at once.
    #[serde(default)]
    wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    tokens: Vec<String>,
    #[serde(default)]
    lease_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindsBody {
    kinds: Vec<KindCaps>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindCaps {
    kind: String,
    #[serde(default)]
    inbox: Option<bool>,
    #[serde(default)]
    children: Option<bool>,
}

impl Objects for ClaimBody {}
impl Objects for HeartbeatBody {}
impl Objects for KindsBody {
    const OBJECTS: &'static [&'static str] = &["", "kinds[]"];
}
impl Objects for OutcomeBody {
    const OBJECTS: &'static [&'static str] = &["", "children[]"];
}

fn lease(ms: Option<u64>) -> ApiResult<Duration> {
    let ms = ms.unwrap_or(wfsteps::DEFAULT_LEASE_MS);
    if !(wfsteps::MIN_LEASE_MS..=wfsteps::MAX_LEASE_MS).contains(&ms) {
        return Err(ApiError::bad_request(
            "lease_ms",
            format!(
                "must be {} to {}",
                wfsteps::MIN_LEASE_MS,
                wfsteps::MAX_LEASE_MS
            ),
        ));
    }
    Ok(Duration::from_millis(ms))
}

/// Claims up to `max` due steps of a queue (one statement); each comes with its token.
pub async fn claim(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<ClaimBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Consume)?;
    let engine_queue = p.queue(&b.queue)?;
    let max = b.max.unwrap_or(1) as usize;
    if max == 0 || max > wfsteps::MAX_STEPS {
        return Err(ApiError::bad_request(
            "max",
            format!("must be 1 to {}", wfsteps::MAX_STEPS),
        ));
    }
    let worker = b.worker.unwrap_or_else(|| "http".to_string());
    if worker.is_empty() || worker.chars().count() > 128 {
        return Err(ApiError::bad_request(
            "worker",
            "must be 1 to 128 characters",
        ));
    }
    no_nul("worker", &worker)?;
    let lease = lease(b.lease_ms)?;
    let wait = Duration::from_millis(b.wait_ms.unwrap_or(0));
    if wait > state.http.config.max_claim_wait {
        return Err(ApiError::bad_request(
            "wait_ms",
            format!(
                "must be at most {}",
                state.http.config.max_claim_wait.as_millis()
            ),
        ));
    }
    // Before claiming: claimed steps must never be left without their tokens.
    let keys = super::token_key(&state).await?;
    let wf = Workflows::of(&state.engine);
    // Long poll: steps become due by time and by other instances' outcomes, which notify
    // nothing, so an empty claim is tried again after a pause that grows from 1 to 20 ms
    // (as an idle WorkflowWorker stream does) until a step comes or the wait is over.
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    let steps = loop {
        let steps = wfsteps::claim(&wf, keys, &p, &engine_queue, max, &worker, lease).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !steps.is_empty() || left.is_zero() {
            break steps;
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(wfsteps::MAX_IDLE_POLL);
    };
    let out: Vec<Value> = steps
        .iter()
        .map(|d| {
            let s = &d.step;
            json!({
                "token": d.token,
                "id": s.id,
                "seq": s.seq,
                "kind": s.kind,
                "step": s.step,
                "state": s.state,
                "input": s.input,
                "attempt": s.attempt,
                "max_attempts": s.max_attempts,
                "wake": wfsteps::wake_str(s),
                "parent_id": s.parent_id,
                "inbox": s.inbox.as_ref().map(|sigs| sigs.iter().map(|g| json!({
                    "signal_id": g.signal_id, "name": g.name, "payload": g.payload,
                })).collect::<Vec<_>>()),
                "children": s.children.as_ref().map(|cs| cs.iter().map(|c| json!({
                    "id": c.id, "kind": c.kind, "status": c.status,
                    "result": c.result, "error": c.error,
                })).collect::<Vec<_>>()),
                "queue": b.queue,
                "lease_until_unix_ms": unix_ms(d.lease_until),
            })
        })
        .collect();
    Ok(Json(json!({ "steps": out })))
}

/// Records one step's outcome (one statement): `applied`, `cancelled` (the instance was
/// cancelled: stop) or `stale` (the claim is not current: its lease lapsed).
pub async fn outcome(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<OutcomeBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Consume)?;
    let (token, outcome) =
        wfsteps::parse(&p, b).map_err(|e| ApiError::bad_request(e.field, e.message))?;
    let keys = super::token_key(&state).await?;
    let t = StepToken::verify(keys, p.tenant_id, &token)
        .ok_or_else(|| ApiError::not_found("workflow step").field("token"))?;
    let wf = Workflows::of(&state.engine);
    let answer = wfsteps::finish(&wf, &[(t.step_ref(), outcome)]).await?[0];
    Ok(Json(
        json!({ "id": t.id, "seq": t.seq, "result": answer.as_str() }),
    ))
}

/// Extends the leases of held steps (one statement); per token, whether it is still held
/// and whether its instance was cancelled.
pub async fn heartbeat(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<HeartbeatBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Consume)?;
    if b.tokens.is_empty() || b.tokens.len() > wfsteps::MAX_STEPS {
        return Err(ApiError::bad_request(
            "tokens",
            format!("must hold 1 to {} tokens", wfsteps::MAX_STEPS),
        ));
    }
    let lease = lease(b.lease_ms)?;
    let keys = super::token_key(&state).await?;
    let mut refs = Vec::with_capacity(b.tokens.len());
    for (i, token) in b.tokens.iter().enumerate() {
        if token.is_empty() || token.len() > 1024 {
            return Err(ApiError::bad_request(
                format!("tokens[{i}]"),
                "must be 1 to 1024 characters",
            ));
        }
        let t = StepToken::verify(keys, p.tenant_id, token)
            .ok_or_else(|| ApiError::not_found("workflow step").field(format!("tokens[{i}]")))?;
        refs.push(t.step_ref());
    }
    let wf = Workflows::of(&state.engine);
    let beats = wfsteps::heartbeat(&wf, &refs, lease).await?;
    let out: Vec<Value> = beats
        .iter()
        .map(|b| {
            json!({
                "id": b.id, "seq": b.seq, "held": b.held(), "cancelled": b.cancelled(),
                "lease_until_unix_ms": b.lease_until.map(unix_ms),
            })
        })
        .collect();
    Ok(Json(json!({ "steps": out })))
}

/// Declares what steps of these kinds load: the signals that resumed them (`inbox`) and
/// their joined children's results (`children`). A kind never declared loads neither; a
/// declaration only adds (kinds are names shared by tenants).
pub async fn kinds(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<KindsBody>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Consume)?;
    if b.kinds.is_empty() || b.kinds.len() > 1000 {
        return Err(ApiError::bad_request("kinds", "must hold 1 to 1000 kinds"));
    }
    for (i, k) in b.kinds.iter().enumerate() {
        pgferry_core::job::validate_kind(&k.kind)
            .map_err(|e| ApiError::bad_request(format!("kinds[{i}].kind"), e.public_message()))?;
    }
    let caps: Vec<(&str, Caps)> = b
        .kinds
        .iter()
        .map(|k| {
            let c = Caps {
                inbox: k.inbox == Some(true),
                children: k.children == Some(true),
            };
            (k.kind.as_str(), c)
        })
        .collect();
    Workflows::of(&state.engine).add_caps(&caps).await?;
    Ok(StatusCode::NO_CONTENT)
}
