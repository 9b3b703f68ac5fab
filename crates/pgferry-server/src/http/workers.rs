//! HTTP workers, for languages without an SDK: claim (with long-poll), complete, heartbeat.
//!
//! A claim answers each job with a signed token (auth::token); completion takes the token
//! back, so it needs no lookup and works on any server of the database.

use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::extract::State;
use axum::Json;
use pgferry_core::{OutcomeKind, Report};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, no_nul_json, Authed, JsonBody, Objects};
use crate::auth::token::Attempt;
use crate::auth::Scope;
use crate::metrics::{JobCounter, Latency};
use crate::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    queue: String,
    /// Jobs wanted at most (default 1).
    #[serde(default)]
    max: Option<u32>,
    /// Shown in job history; defaults to "http".
    #[serde(default)]
    worker: Option<String>,
    /// Wait up to this long for a job when none is ready (long-poll; default 0).
    #[serde(default)]
    wait_ms: Option<u64>,
}

impl Objects for ClaimRequest {}
impl Objects for CompleteRequest {
    const OBJECTS: &'static [&'static str] = &["", "results[]", "results[].error"];
}
impl Objects for HeartbeatRequest {}

pub async fn claim(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(req): JsonBody<ClaimRequest>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Consume)?;
    let cfg = &state.http.config;
    let engine_queue = p.queue(&req.queue)?;
    let max = req.max.unwrap_or(1) as usize;
    if max == 0 || max > cfg.max_claim {
        return Err(ApiError::bad_request(
            "max",
            format!("must be 1 to {}", cfg.max_claim),
        ));
    }
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(0));
    if wait > cfg.max_claim_wait {
        return Err(ApiError::bad_request(
            "wait_ms",
            format!("must be at most {}", cfg.max_claim_wait.as_millis()),
        ));
    }
    let worker = req.worker.unwrap_or_else(|| "http".to_string());
    if worker.is_empty() || worker.len() > 128 {
        return Err(ApiError::bad_request("worker", "must be 1 to 128 bytes"));
    }
    no_nul("worker", &worker)?;
    // Before claiming: claimed jobs must never be left without their tokens.
    let tokens = super::token_key(&state).await?;
    let deadline = Instant::now() + wait;
    let mut ticks = state.engine.signals().subscribe_ticks();
    let jobs = loop {
        // Mark the current tick seen *before* claiming: a tick published while the claim
        // runs then wakes the wait below instead of being missed.
        ticks.borrow_and_update();
        let started = Instant::now();
        let jobs = state.engine.claim(&engine_queue, max, &worker).await?;
        state.metrics.observe(Latency::Claim, started.elapsed());
        state.receipts.register(&jobs);
        let left = deadline.saturating_duration_since(Instant::now());
        if !jobs.is_empty() || left.is_zero() {
            break jobs;
        }
        let _waiting = state.engine.signals().waiting_for_tick();
        match tokio::time::timeout(left, ticks.changed()).await {
            Ok(Ok(())) => continue,
            // Timed out, or the engine is shutting down: answer empty.
            _ => break Vec::new(),
        }
    };
    state.metrics.add(
        JobCounter::Claimed,
        &p.tenant,
        &req.queue,
        jobs.len() as u64,
    );
    let out: Vec<Value> = jobs
        .iter()
        .map(|j| {
            let token = tokens.sign(&Attempt::from_claimed(p.tenant_id, &req.queue, j));
            json!({
                "id": j.job_id,
                "attempt": j.attempt,
                "max_attempts": j.max_attempts,
                "kind": j.kind,
                "args": j.args,
                "meta": j.meta.clone().unwrap_or_else(|| json!({})),
                "enqueued_at_unix_ms": j.enqueued_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                "enqueued_at_unix_us": j.enqueued_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64),
                "queue": req.queue,
                "priority": j.priority,
                "lease_until_unix_ms": j.lease_until
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                "token": token,
            })
        })
        .collect();
    Ok(Json(json!({ "jobs": out })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureSpec {
    message: String,
    /// false: dead-letter now. true (default): retry while attempts remain.
    #[serde(default)]
    retryable: Option<bool>,
    /// Delay before the retry; default: the queue's backoff (exponential with jitter).
    #[serde(default)]
    retry_delay_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultSpec {
    token: String,
    /// Present: the attempt failed. Absent (with no snooze/cancel): it succeeded.
    #[serde(default)]
    error: Option<FailureSpec>,
    /// Run again after this long without using up an attempt.
    #[serde(default)]
    snooze_ms: Option<u64>,
    /// The worker stopped because the job was cancelled.
    #[serde(default)]
    cancelled: Option<bool>,
    /// Value to keep for a successful job.
    #[serde(default)]
    result: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    results: Vec<ResultSpec>,
}

const MAX_RETRY_DELAY_MS: u64 = 7 * 24 * 3600 * 1000;

pub async fn complete(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(req): JsonBody<CompleteRequest>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Consume)?;
    let max = state.http.config.max_batch;
    if req.results.is_empty() || req.results.len() > max {
        return Err(ApiError::bad_request(
            "results",
            format!("must hold 1 to {max} results"),
        ));
    }
    // Check every token before writing anything: never a partial batch.
    let tokens = super::token_key(&state).await?;
    let mut outcomes = Vec::with_capacity(req.results.len());
    // The queue of each outcome, for the metrics of the outcomes that win.
    let mut labels: Vec<String> = Vec::with_capacity(req.results.len());
    for (i, r) in req.results.into_iter().enumerate() {
        let a = tokens
            .verify(&r.token)
            .filter(|a| a.tenant_id == p.tenant_id)
            .ok_or_else(|| ApiError::not_found("attempt").field(format!("results[{i}].token")))?;
        let cancelled = r.cancelled.unwrap_or(false);
        let given = [r.error.is_some(), r.snooze_ms.is_some(), cancelled];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(ApiError::bad_request(
                format!("results[{i}]"),
                "give at most one of error, snooze_ms, cancelled",
            ));
        }
        let report = match (r.error, r.snooze_ms) {
            (None, Some(ms)) => {
                if ms > MAX_RETRY_DELAY_MS {
                    return Err(ApiError::bad_request(
                        format!("results[{i}].snooze_ms"),
                        "must be at most 604800000 (7 days)",
                    ));
                }
                Report::Snoozed {
                    delay: Duration::from_millis(ms),
                }
            }
            (None, None) if cancelled => Report::Cancelled { reason: None },
            (None, None) => {
                if let Some(v) = &r.result {
                    no_nul_json(format!("results[{i}].result"), v)?;
                }
                Report::Completed { result: r.result }
            }
            (Some(f), _) => {
                no_nul(format!("results[{i}].error.message"), &f.message)?;
                if f.message.len() > 64 * 1024 {
                    return Err(ApiError::bad_request(
                        format!("results[{i}].error.message"),
                        "must be at most 65536 bytes",
                    ));
                }
                if f.retry_delay_ms.is_some_and(|d| d > MAX_RETRY_DELAY_MS) {
                    return Err(ApiError::bad_request(
                        format!("results[{i}].error.retry_delay_ms"),
                        "must be at most 604800000 (7 days)",
                    ));
                }
                Report::Failed {
                    error: f.message,
                    retryable: f.retryable.unwrap_or(true),
                    retry_delay: f.retry_delay_ms.map(Duration::from_millis),
                }
            }
        };
        labels.push(a.queue.clone());
        outcomes.push(crate::service::outcome(&a, report));
    }
    let kinds: Vec<OutcomeKind> = outcomes.iter().map(|o| o.kind).collect();
    let done = super::write_complete(&state, outcomes).await?;
    crate::service::count_recorded(
        &state.metrics,
        &p.tenant,
        done.iter()
            .zip(labels.iter().zip(&kinds))
            .map(|(c, (q, k))| (q.as_str(), k, !c.stale)),
    );
    let out: Vec<Value> = done
        .iter()
        .map(|c| json!({ "id": c.job_id, "attempt": c.attempt, "stale": c.stale }))
        .collect();
    Ok(Json(json!({ "results": out })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    tokens: Vec<String>,
    /// New lease from now (default 60 s).
    #[serde(default)]
    lease_ms: Option<u64>,
    #[serde(default)]
    worker: Option<String>,
}

/// Extends the leases of held attempts. Per token: still held (false: finished or rescued,
/// stop working on it) and whether a cancellation was requested.
pub async fn heartbeat(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(req): JsonBody<HeartbeatRequest>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Consume)?;
    let max = state.http.config.max_batch;
    if req.tokens.is_empty() || req.tokens.len() > max {
        return Err(ApiError::bad_request(
            "tokens",
            format!("must hold 1 to {max} tokens"),
        ));
    }
    let lease = req.lease_ms.unwrap_or(60_000);
    if !(100..=86_400_000).contains(&lease) {
        return Err(ApiError::bad_request("lease_ms", "must be 100 to 86400000"));
    }
    let worker = req.worker.unwrap_or_else(|| "http".to_string());
    if worker.is_empty() || worker.len() > 128 {
        return Err(ApiError::bad_request("worker", "must be 1 to 128 bytes"));
    }
    no_nul("worker", &worker)?;
    let tokens = super::token_key(&state).await?;
    let mut refs = Vec::with_capacity(req.tokens.len());
    for (i, t) in req.tokens.iter().enumerate() {
        let a = tokens
            .verify(t)
            .filter(|a| a.tenant_id == p.tenant_id)
            .ok_or_else(|| ApiError::not_found("attempt").field(format!("tokens[{i}]")))?;
        refs.push(a.attempt_ref());
    }
    let beats = state
        .engine
        .heartbeat(&refs, Duration::from_millis(lease), &worker)
        .await?;
    let out: Vec<Value> = beats
        .iter()
        .map(|b| {
            json!({
                "id": b.job_id,
                "attempt": b.attempt,
                "held": b.held,
                "cancelled": b.cancelled,
                "lease_until_unix_ms": super::jobs::unix_ms(b.lease_until),
            })
        })
        .collect();
    Ok(Json(json!({ "results": out })))
}
