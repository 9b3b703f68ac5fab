//! Jobs as producers submit them, as claimers receive them, and their outcomes.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::error::{Error, Result};

/// Priorities are lanes 0 (most urgent) to 3.
pub const MAX_PRIORITY: u8 = 3;
/// Attempts a job may be given at most.
pub const MAX_ATTEMPTS_LIMIT: i32 = 1000;

/// Exponential backoff with full jitter: attempt n waits a uniform random time in
/// [d/2, d] where d = min(cap, base * 2^(n-1)). Half the delay is kept so that a retry is
/// never immediate by accident; the random half spreads a burst of failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(3600),
        }
    }
}

impl Backoff {
    /// The delay after attempt `attempt` (1-based) failed.
    pub fn delay(&self, attempt: i32) -> Duration {
        let exp = attempt.clamp(1, 31) as u32 - 1;
        let d = self
            .base
            .checked_mul(1u32 << exp.min(30))
            .unwrap_or(self.cap)
            .min(self.cap);
        let half = d / 2;
        half + half.mul_f64(rand::random::<f64>())
    }
}

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub queue: String,
    pub kind: String,
    pub args: Value,
    pub meta: Option<Value>,
    pub priority: u8,
    /// None: the queue's default.
    pub max_attempts: Option<i32>,
    /// Not before this instant: the job waits in `scheduled` and the leader's promoter moves
    /// it into the log when due. None or a past instant: claimable at once.
    pub run_at: Option<SystemTime>,
    /// At most one job per (queue, key) at a time: while the holder is pending, scheduled or
    /// running (or completed less than `unique_period` ago), another enqueue with the key
    /// returns the holder's id as a duplicate.
    pub unique_key: Option<String>,
    pub unique_period: Option<Duration>,
}

impl NewJob {
    pub fn new(queue: impl Into<String>, kind: impl Into<String>, args: Value) -> Self {
        NewJob {
            queue: queue.into(),
            kind: kind.into(),
            args,
            meta: None,
            priority: 0,
            max_attempts: None,
            run_at: None,
            unique_key: None,
            unique_period: None,
        }
    }

    /// Deduplicates on `key` within the queue (see [`NewJob::unique_key`]).
    pub fn unique(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// A completed job keeps holding its unique key for `period`.
    pub fn unique_period(mut self, period: Duration) -> Self {
        self.unique_period = Some(period);
        self
    }

    /// Runs no earlier than `at`.
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Runs no earlier than `delay` from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = Some(SystemTime::now() + delay);
        self
    }

    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Checks everything that can be checked without the database. `index` names the job in
    /// a batch so the error says which one was wrong.
    pub fn validate(&self, index: usize, max_payload: usize) -> Result<()> {
        validate_queue_name(&self.queue)?;
        validate_kind(&self.kind)?;
        if self.priority > MAX_PRIORITY {
            return Err(Error::InvalidArgument {
                field: "priority",
                reason: format!("{} is not in 0..={MAX_PRIORITY}", self.priority),
            });
        }
        if let Some(n) = self.max_attempts {
            if !(1..=MAX_ATTEMPTS_LIMIT).contains(&n) {
                return Err(Error::InvalidArgument {
                    field: "max_attempts",
                    reason: format!("{n} is not in 1..={MAX_ATTEMPTS_LIMIT}"),
                });
            }
        }
        if let Some(k) = &self.unique_key {
            if k.is_empty() || k.len() > 256 {
                return Err(Error::InvalidArgument {
                    field: "unique_key",
                    reason: format!("must be 1 to 256 bytes, not {}", k.len()),
                });
            }
        }
        let size = json_size(&self.args) + self.meta.as_ref().map_or(0, json_size);
        if size > max_payload {
            return Err(Error::PayloadTooLarge {
                index,
                size,
                limit: max_payload,
            });
        }
        Ok(())
    }
}

/// The length of `v` written as compact JSON, counted without writing it anywhere.
pub fn json_size(v: &Value) -> usize {
    // serde_json writes into a counting sink without allocating the string.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Queue names: lowercase ASCII letters, digits, `_`, `-`, `.`; 1–64 chars; starting with a
/// letter or digit. Names appear in URLs and metrics labels, so they stay boring.
pub fn validate_queue_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c);
    let reason = if name.is_empty() || name.len() > 64 {
        Some("must be 1 to 64 characters")
    } else if !name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        Some("must start with a lowercase letter or digit")
    } else if !name.chars().all(ok_char) {
        Some("may contain only a-z, 0-9, '_', '-' and '.'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidName {
            field: "queue",
            value: name.chars().take(80).collect(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Job kinds: ASCII letters, digits, `_`, `-`, `.`, `:`; 1–128 chars.
pub fn validate_kind(kind: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
    if kind.is_empty() || kind.len() > 128 || !kind.chars().all(ok_char) {
        return Err(Error::InvalidName {
            field: "kind",
            value: kind.chars().take(80).collect(),
            reason: "must be 1 to 128 characters of A-Z, a-z, 0-9, '_', '-', '.', ':'",
        });
    }
    Ok(())
}

/// A job handed to a worker. `segment` and `receipt_id` travel back with the outcome so the
/// completion lands in the right partition without a lookup.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub receipt_id: i64,
    /// The receipt's lane and segment: with them an outcome finds its receipt in one probe.
    pub lane: i32,
    pub receipt_segment: i16,
    pub job_id: i64,
    pub attempt: i32,
    pub segment: i16,
    pub max_attempts: i32,
    pub kind: String,
    pub args: Value,
    pub meta: Option<Value>,
    pub enqueued_at: SystemTime,
    /// The queue's retry policy when the claim was made.
    pub backoff: Backoff,
    /// 0 (most urgent) to 3: the priority the job was enqueued with.
    pub priority: u8,
    /// When the lease ends unless heartbeated: the claim's start plus the queue's lease, a
    /// lower bound of the database's own (which counts from the statement's start).
    pub lease_until: SystemTime,
}

impl ClaimedJob {
    /// Success, optionally with a result value to keep.
    pub fn completed(&self, result: Option<Value>) -> Outcome {
        self.outcome(OutcomeKind::Completed, None, result)
    }

    /// A handler error: retried after `delay` while attempts remain, else dead-lettered.
    pub fn failed(&self, error: impl Into<String>, delay: Duration) -> Outcome {
        self.reported(Report::Failed {
            error: error.into(),
            retryable: true,
            retry_delay: Some(delay),
        })
    }

    /// The outcome of what the handler reported, decided as every transport decides it
    /// ([`Report::decide`]).
    pub fn reported(&self, report: Report) -> Outcome {
        let (kind, error, result) = report.decide(self.attempt, self.max_attempts, self.backoff);
        self.outcome(kind, error, result)
    }

    /// A handler error retried after the queue's backoff (exponential with jitter), or
    /// dead-lettered on the last attempt.
    pub fn fail(&self, error: impl Into<String>) -> Outcome {
        self.failed(error, self.backoff.delay(self.attempt))
    }

    /// Run again after `delay` without using up an attempt.
    pub fn snooze(&self, delay: Duration) -> Outcome {
        self.outcome(OutcomeKind::Snooze { delay }, None, None)
    }

    /// Hands an unstarted job back (graceful shutdown of a worker that prefetched it, a
    /// dispatcher's buffer): it is claimable again at once, and its next run is the same
    /// attempt with the same `max_attempts` — a hand-back is not an attempt and is not
    /// listed as one.
    pub fn release(&self) -> Outcome {
        self.outcome(OutcomeKind::Released, None, None)
    }

    /// The handler stopped because the job was cancelled.
    pub fn cancelled(&self, reason: impl Into<String>) -> Outcome {
        self.outcome(OutcomeKind::Cancelled, Some(reason.into()), None)
    }

    /// An error that must not be retried.
    pub fn discarded(&self, error: impl Into<String>) -> Outcome {
        self.outcome(OutcomeKind::Dead, Some(error.into()), None)
    }

    pub fn outcome(
        &self,
        kind: OutcomeKind,
        error: Option<String>,
        result: Option<Value>,
    ) -> Outcome {
        Outcome {
            job_id: self.job_id,
            attempt: self.attempt,
            segment: self.segment,
            receipt_id: self.receipt_id,
            lane: self.lane,
            receipt_segment: self.receipt_segment,
            kind,
            error,
            result,
            duration_ms: None,
        }
    }
}

/// What a handler reported about one attempt, before the engine's rules turn it into an
/// [`OutcomeKind`]. Every way to report (the in-process runtime, `ClaimedJob`, the HTTP
/// `complete` call, the gRPC worker stream) translates its wire form into a `Report` and
/// calls [`Report::decide`], so retry-or-dead-letter is decided in one place.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Completed {
        result: Option<Value>,
    },
    Failed {
        error: String,
        /// False: dead-letter at once (a permanent error), whatever attempts remain.
        retryable: bool,
        /// The handler's own retry delay; `None`: the queue's backoff.
        retry_delay: Option<Duration>,
    },
    /// Run again after `delay` without using up an attempt.
    Snoozed {
        delay: Duration,
    },
    Cancelled {
        reason: Option<String>,
    },
}

impl Report {
    /// The outcome kind, error text and result of this report for attempt `attempt` of
    /// `max_attempts`: a retryable failure is retried (after the handler's delay or the
    /// queue's backoff) while attempts remain and dead-lettered on the last one; a
    /// non-retryable failure is dead-lettered at once.
    pub fn decide(
        self,
        attempt: i32,
        max_attempts: i32,
        backoff: Backoff,
    ) -> (OutcomeKind, Option<String>, Option<Value>) {
        match self {
            Report::Completed { result } => (OutcomeKind::Completed, None, result),
            Report::Failed {
                error,
                retryable,
                retry_delay,
            } => {
                let kind = if retryable && attempt < max_attempts {
                    OutcomeKind::Retry {
                        delay: retry_delay.unwrap_or_else(|| backoff.delay(attempt)),
                    }
                } else {
                    OutcomeKind::Dead
                };
                (kind, Some(error), None)
            }
            Report::Snoozed { delay } => (OutcomeKind::Snooze { delay }, None, None),
            Report::Cancelled { reason } => (OutcomeKind::Cancelled, reason, None),
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    Completed,
    /// Run again: at once (zero delay, straight back into the log) or later (`scheduled`).
    Retry {
        delay: Duration,
    },
    /// Moved to the dead-letter queue.
    Dead,
    Cancelled,
    /// Run again after `delay`; the attempt does not count against max_attempts.
    Snooze {
        delay: Duration,
    },
    /// Handed back unstarted ([`ClaimedJob::release`]): claimable again at once as the same
    /// attempt.
    Released,
}

/// Outcome codes as stored in `completions.outcome`.
pub mod outcome_code {
    pub const COMPLETED: i16 = 1;
    pub const RETRY: i16 = 2;
    pub const DEAD: i16 = 3;
    pub const CANCELLED: i16 = 4;
    /// Lease expired; the leader's rescuer retried the job.
    pub const RESCUED_RETRY: i16 = 5;
    /// Lease expired on the last attempt; the rescuer dead-lettered the job.
    pub const RESCUED_DEAD: i16 = 6;
    /// Snoozed: rescheduled without using an attempt.
    pub const SNOOZED: i16 = 7;
    /// Handed back unstarted: back in the log as the same attempt (not an attempt at all).
    pub const RELEASED: i16 = 8;
}

impl OutcomeKind {
    pub fn code(&self) -> i16 {
        match self {
            OutcomeKind::Completed => outcome_code::COMPLETED,
            OutcomeKind::Retry { .. } => outcome_code::RETRY,
            OutcomeKind::Dead => outcome_code::DEAD,
            OutcomeKind::Cancelled => outcome_code::CANCELLED,
            OutcomeKind::Snooze { .. } => outcome_code::SNOOZED,
            OutcomeKind::Released => outcome_code::RELEASED,
        }
    }
}

/// The end of one attempt, as reported by a worker.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub job_id: i64,
    pub attempt: i32,
    pub segment: i16,
    pub receipt_id: i64,
    pub lane: i32,
    pub receipt_segment: i16,
    pub kind: OutcomeKind,
    pub error: Option<String>,
    pub result: Option<Value>,
    pub duration_ms: Option<i32>,
}

/// Whether an outcome was recorded. `stale` means another outcome for the same attempt was
/// recorded first (a rescue after lease expiry, or a duplicate report): nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub job_id: i64,
    pub attempt: i32,
    pub stale: bool,
}

#[cfg(test)]
mod report_tests {
    use super::*;

    const BACKOFF: Backoff = Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(60),
    };

    fn failed(retryable: bool, retry_delay: Option<Duration>) -> Report {
        Report::Failed {
            error: "boom".into(),
            retryable,
            retry_delay,
        }
    }

    #[test]
    fn a_retryable_failure_retries_while_attempts_remain() {
        let d = Duration::from_millis(1234);
        assert_eq!(
            failed(true, Some(d)).decide(1, 3, BACKOFF).0,
            OutcomeKind::Retry { delay: d }
        );
        match failed(true, None).decide(2, 3, BACKOFF).0 {
            // The queue's backoff after attempt 2: 2 s with jitter in [1 s, 2 s].
            OutcomeKind::Retry { delay } => {
                assert!(delay >= Duration::from_secs(1) && delay <= Duration::from_secs(2))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            failed(true, Some(d)).decide(3, 3, BACKOFF).0,
            OutcomeKind::Dead
        );
    }

    #[test]
    fn a_permanent_failure_is_dead_at_once_with_its_error() {
        let (kind, error, result) = failed(false, None).decide(1, 25, BACKOFF);
        assert_eq!(kind, OutcomeKind::Dead);
        assert_eq!(error.as_deref(), Some("boom"));
        assert_eq!(result, None);
    }

    #[test]
    fn other_reports_keep_what_they_carry() {
        let v = serde_json::json!({"ok": 1});
        assert_eq!(
            Report::Completed {
                result: Some(v.clone())
            }
            .decide(1, 1, BACKOFF),
            (OutcomeKind::Completed, None, Some(v))
        );
        let d = Duration::from_secs(5);
        assert_eq!(
            Report::Snoozed { delay: d }.decide(7, 7, BACKOFF).0,
            OutcomeKind::Snooze { delay: d }
        );
        assert_eq!(
            Report::Cancelled {
                reason: Some("stop".into())
            }
            .decide(1, 1, BACKOFF),
            (OutcomeKind::Cancelled, Some("stop".into()), None)
        );
    }
}
