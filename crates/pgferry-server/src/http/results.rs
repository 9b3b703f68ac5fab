//! `GET /v1/jobs/{id}/result?wait_ms=N`: a job's result without polling.
//!
//! The answer is the job (as `GET /v1/jobs/{id}`) plus its `result` and `finished`: true
//! once the job is completed, dead or cancelled. While it is not, the request waits up to
//! `wait_ms` (at most the server's long-poll limit, `max_claim_wait`) for it to finish and
//! answers the job as it then is.
//!
//! Waking: every completion this server commits passes through the group-commit
//! coalescer, which calls [`wake`] with the job ids it recorded. A waiter subscribes to its
//! job id *before* it reads the job, so a completion committed before the read is seen by
//! the read, and one committed after it wakes the subscription: none is missed. What does
//! not pass through this server's coalescer (a completion on another server of the same
//! database, an API cancel of a pending job, the leader's rescuer dead-lettering a job) is
//! found by a bounded re-check: the waiter reads the job again after 200 ms, doubling up to
//! 2 s. With no waiter registered, [`wake`] costs one atomic load per completion batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use pgferry_core::JobState;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::error::{ApiError, ApiResult};
use super::extract::Authed;
use super::jobs::{job_id, job_json, own_job};
use crate::auth::{Principal, Scope};
use crate::AppState;

/// Longest `wait_ms` accepted (one minute: longer waits are a loop of requests).
pub const MAX_RESULT_WAIT_MS: u64 = 60_000;
/// First and longest pause between re-reads of a job that no wake has reported.
const RECHECK_FIRST: Duration = Duration::from_millis(200);
const RECHECK_CAP: Duration = Duration::from_secs(2);

/// Job ids someone is waiting on, each with a version counter bumped by every completion
/// of the job this server records.
struct Waiters {
    /// Number of registrations: the completion path skips the map while it is zero.
    count: AtomicUsize,
    map: Mutex<HashMap<i64, watch::Sender<u64>>>,
}

static WAITERS: LazyLock<Waiters> = LazyLock::new(|| Waiters {
    count: AtomicUsize::new(0),
    map: Mutex::new(HashMap::new()),
});

/// Called by the completion path after a batch of outcomes committed.
pub(crate) fn wake(job_ids: impl IntoIterator<Item = i64>) {
    let w = &*WAITERS;
    if w.count.load(Ordering::SeqCst) == 0 {
        return;
    }
    let map = w.map.lock().unwrap_or_else(|e| e.into_inner());
    for id in job_ids {
        if let Some(tx) = map.get(&id) {
            tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// One waiter's subscription to a job id; unregisters on drop.
struct Subscription {
    id: i64,
    rx: Option<watch::Receiver<u64>>,
}

impl Subscription {
    fn new(id: i64) -> Subscription {
        let w = &*WAITERS;
        let rx = {
            let mut map = w.map.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(id)
                .or_insert_with(|| watch::channel(0).0)
                .subscribe()
        };
        w.count.fetch_add(1, Ordering::SeqCst);
        Subscription { id, rx: Some(rx) }
    }

    /// Until a completion of the job was recorded since the last call (or since
    /// subscribing), or `pause` passed.
    async fn wait(&mut self, pause: Duration) {
        if let Some(rx) = self.rx.as_mut() {
            let _ = tokio::time::timeout(pause, rx.changed()).await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let w = &*WAITERS;
        drop(self.rx.take());
        w.count.fetch_sub(1, Ordering::SeqCst);
        let mut map = w.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&self.id).is_some_and(|tx| tx.receiver_count() == 0) {
            map.remove(&self.id);
        }
    }
}

fn finished(state: JobState) -> bool {
    matches!(
        state,
        JobState::Completed | JobState::Dead | JobState::Cancelled
    )
}

fn answer(p: &Principal, job: &pgferry_core::JobInfo) -> Value {
    let mut out = job_json(p, job);
    out["result"] = job.result.clone().unwrap_or(Value::Null);
    out["finished"] = json!(finished(job.state));
    out
}

fn parse_wait(query: Result<Query<Vec<(String, String)>>, QueryRejection>) -> ApiResult<Duration> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut wait = 0;
    for (k, v) in pairs {
        match k.as_str() {
            "wait_ms" => {
                wait = v
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| *ms <= MAX_RESULT_WAIT_MS)
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "wait_ms",
                            format!("must be 0 to {MAX_RESULT_WAIT_MS}"),
                        )
                    })?
            }
            _ => return Err(ApiError::bad_request(k, "unknown query parameter")),
        }
    }
    Ok(Duration::from_millis(wait))
}

/// Scope read or produce: a producer may wait for what it enqueued.
pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    if p.require(Scope::Read).is_err() {
        p.require(Scope::Produce)?;
    }
    let id = job_id(&id)?;
    // Within the server's long-poll limit (the claim's, `--max-claim-wait-ms`): a longer
    // wait_ms is answered when the limit runs out, with `finished` saying where things are.
    let wait = parse_wait(query)?.min(state.http.config.max_claim_wait);
    let deadline = Instant::now() + wait;
    // Subscribed before the first read: see the module comment.
    let mut sub = (!wait.is_zero()).then(|| Subscription::new(id));
    let mut pause = RECHECK_FIRST;
    loop {
        let job = own_job(&state, &p, id).await?;
        let now = Instant::now();
        let Some(sub) = sub
            .as_mut()
            .filter(|_| !finished(job.state) && now < deadline)
        else {
            return Ok(Json(answer(&p, &job)));
        };
        sub.wait(pause.min(deadline - now)).await;
        pause = (pause * 2).min(RECHECK_CAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(sub: &Subscription) -> bool {
        sub.rx.as_ref().unwrap().has_changed().unwrap()
    }

    #[tokio::test]
    async fn a_wake_reaches_a_subscription_taken_before_it_and_unregisters_on_drop() {
        let id = 9_000_000_001;
        let mut sub = Subscription::new(id);
        assert!(!changed(&sub));
        wake([id + 1]);
        assert!(
            !changed(&sub),
            "another job's completion must not mark this one"
        );
        // Woken before the waiter waits: the subscription remembers it, so the wait that
        // follows returns on it (a completion between read and wait is not missed).
        wake([id]);
        assert!(changed(&sub));
        sub.wait(Duration::from_secs(3600)).await;
        assert!(!changed(&sub));
        let other = Subscription::new(id);
        drop(sub);
        assert!(
            WAITERS.map.lock().unwrap().contains_key(&id),
            "still one waiter"
        );
        drop(other);
        assert!(!WAITERS.map.lock().unwrap().contains_key(&id));
    }
}
