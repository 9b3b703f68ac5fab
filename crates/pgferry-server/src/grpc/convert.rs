//! Protocol messages ↔ engine types.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgferry_core::{ClaimedJob, NewJob};
use serde_json::Value;

use super::{engine_error, pb_error};
use crate::auth::Principal;
use crate::proto::v1 as pb;

/// JSON text as sent by clients; empty means null.
pub(crate) fn parse_json(text: &str) -> Result<Value, serde_json::Error> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text)
}

/// A job spec of the caller's tenant as an engine job (queue name namespaced), fully
/// validated; the error names the field under `prefix` (e.g. `jobs[3]`).
pub(crate) fn new_job(
    p: &Principal,
    spec: pb::JobSpec,
    prefix: &str,
    index: usize,
    max_payload: usize,
) -> Result<NewJob, pb::Error> {
    let f = |name: &str| format!("{prefix}.{name}");
    let queue = p.queue(&spec.queue).map_err(|e| engine_error(&e, prefix))?;
    let args = parse_json(&spec.args).map_err(|e| {
        pb_error(
            "invalid_argument",
            format!("args is not JSON: {e}"),
            f("args"),
        )
    })?;
    let priority = u8::try_from(spec.priority).unwrap_or(u8::MAX);
    let mut job = NewJob::new(queue, spec.kind, args);
    job.priority = priority;
    job.max_attempts = spec.max_attempts;
    if !spec.meta.is_empty() {
        job.meta = Some(Value::Object(
            spec.meta
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        ));
    }
    match (spec.run_at_unix_ms, spec.delay_ms) {
        (Some(_), Some(_)) => {
            return Err(pb_error(
                "invalid_argument",
                "run_at_unix_ms and delay_ms are exclusive",
                f("delay_ms"),
            ))
        }
        (Some(ms), None) => {
            let at = u64::try_from(ms).map_err(|_| {
                pb_error(
                    "invalid_argument",
                    "run_at_unix_ms is negative",
                    f("run_at_unix_ms"),
                )
            })?;
            job.run_at = Some(UNIX_EPOCH + Duration::from_millis(at));
        }
        (None, Some(ms)) => job.run_at = Some(SystemTime::now() + Duration::from_millis(ms)),
        (None, None) => {}
    }
    if let Some(k) = spec.unique_key {
        if k.contains('\0') {
            return Err(pb_error(
                "invalid_argument",
                "unique_key contains U+0000",
                f("unique_key"),
            ));
        }
        job = job.unique(k);
    }
    job.validate(index, max_payload)
        .map_err(|e| engine_error(&e, prefix))?;
    Ok(job)
}

pub(crate) fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn unix_us(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Headers as the string map of the protocol (non-string JSON values as JSON text).
pub(crate) fn meta_map(meta: &Option<Value>) -> HashMap<String, String> {
    match meta {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
        _ => HashMap::new(),
    }
}

/// The Job message for a claimed job.
pub(crate) fn job_message(
    job: &ClaimedJob,
    user_queue: &str,
    token: String,
    lease_until: SystemTime,
) -> pb::Job {
    pb::Job {
        r#ref: Some(pb::AttemptRef {
            id: job.job_id,
            attempt: job.attempt,
            token,
        }),
        queue: user_queue.to_string(),
        kind: job.kind.clone(),
        args: job.args.to_string(),
        meta: meta_map(&job.meta),
        max_attempts: job.max_attempts,
        // ClaimedJob does not carry its priority (the lane's); reported as 0 until it does.
        priority: 0,
        enqueued_at_unix_ms: unix_ms(job.enqueued_at),
        lease_until_unix_ms: unix_ms(lease_until),
        enqueued_at_unix_us: unix_us(job.enqueued_at),
    }
}
