//! Completion callbacks of HTTP jobs that died without the worker: the leader's rescuer
//! makes a job dead when its last attempt's lease lapses (the server holding it was killed,
//! or lost its connection for longer than the lease). Only the worker's outcome path
//! enqueues callbacks, so such a job's callback would never be sent (found by the
//! `chaos_scheduler` suite).
//!
//! Each queue's pipeline sweeps its queue's dead jobs that died of `lease expired` and
//! enqueues their callbacks ("failed", the error "lease expired"). A job's callback has a
//! unique key (`worker::callback_job`), so sweeps that overlap each other, several servers
//! sweeping the same queue, and a callback the worker enqueued before its outcome was lost
//! all end in one callback per job.

use std::time::{Duration, SystemTime};

use pgferry_core::{DeadFilter, Engine, Result};

use crate::executor::HttpRequest;
use crate::worker::{callback_job, CallbackFacts, KIND};

/// The rescuer's error of an attempt whose lease lapsed (sql/rescue.sql).
const LEASE_EXPIRED: &str = "lease expired";
/// Dead jobs read per statement.
const PAGE: u32 = 100;
/// How far back the first sweep of a process looks (a server restarted after its peers
/// died). Later sweeps look back to their previous one, with [`OVERLAP`].
pub const LOOKBACK: Duration = Duration::from_secs(3600);
/// Each sweep reads again this much before the previous one began: a job whose rescue
/// committed late is still seen.
pub const OVERLAP: Duration = Duration::from_secs(60);

/// Enqueues the callbacks of `queue`'s HTTP jobs that died of a lapsed lease at or after
/// `since`; returns how many callbacks it enqueued (each answered by its job's first, if
/// one exists already).
pub async fn sweep_once(engine: &Engine, queue: &str, since: SystemTime) -> Result<usize> {
    let filter = DeadFilter {
        queues: Some(vec![queue.to_string()]),
        kind: Some(KIND.to_string()),
        error_contains: None,
        ids: None,
    };
    let mut callbacks = Vec::new();
    let mut cursor: Option<String> = None;
    // Newest first: stop at the first job that died before `since`.
    'pages: loop {
        let page = engine.list_dead(&filter, cursor.as_deref(), PAGE).await?;
        for job in &page.jobs {
            if job.died_at < since {
                break 'pages;
            }
            if job.error.as_deref() != Some(LEASE_EXPIRED) {
                continue;
            }
            let Ok(req) = serde_json::from_value::<HttpRequest>(job.args.clone()) else {
                continue;
            };
            let facts = CallbackFacts {
                job_id: job.id,
                status: "failed",
                attempts: job.attempt,
                response_status: None,
                error: Some(LEASE_EXPIRED.to_string()),
            };
            callbacks.extend(callback_job(queue, &req, facts));
        }
        match page.next {
            Some(next) if page.has_more => cursor = Some(next),
            _ => break,
        }
    }
    if !callbacks.is_empty() {
        engine.enqueue(&callbacks).await?;
    }
    Ok(callbacks.len())
}

/// The sweep's window: [`LOOKBACK`] before the first sweep, then back to [`OVERLAP`] before
/// the previous sweep began.
#[derive(Debug)]
pub struct Window {
    previous: Option<SystemTime>,
}

impl Window {
    pub fn new() -> Window {
        Window { previous: None }
    }

    /// Where a sweep beginning at `now` starts reading.
    pub fn since(&self, now: SystemTime) -> SystemTime {
        match self.previous {
            Some(p) => p.checked_sub(OVERLAP).unwrap_or(SystemTime::UNIX_EPOCH),
            None => now.checked_sub(LOOKBACK).unwrap_or(SystemTime::UNIX_EPOCH),
        }
    }

    /// A sweep that began at `now` succeeded.
    pub fn swept(&mut self, now: SystemTime) {
        self.previous = Some(now);
    }
}

impl Default for Window {
    fn default() -> Self {
        Window::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_looks_back_an_hour_then_to_the_previous_sweep() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let mut w = Window::new();
        assert_eq!(w.since(t0), t0 - LOOKBACK);
        w.swept(t0);
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(w.since(t1), t0 - OVERLAP);
    }
}
