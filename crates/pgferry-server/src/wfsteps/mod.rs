//! Workflow steps for remote workers, shared by the HTTP routes (`/v1/workflow-steps/*`)
//! and the gRPC `WorkflowWorker` stream (docs/workflows.md#remote-workers).
//!
//! A claim hands each step out with a signed token naming the tenant, the instance and the
//! claim (`step_seq`); an outcome or heartbeat takes the token back, so it needs no lookup
//! and another tenant's step cannot be answered. Queues go through the tenant namespace;
//! concurrency and rate keys of spawned children get the tenant's prefix, as on start.

mod outcome;

use std::time::{Duration, SystemTime};

use pgferry_core::workflow::{ClaimedStep, Outcome, StepBeat, StepRef, Workflows};

use crate::auth::token::TokenKey;
use crate::auth::Principal;

pub use outcome::{parse, BadField, ChildBody, OutcomeBody};

/// Most steps in one claim or heartbeat.
pub const MAX_STEPS: usize = 500;
/// Longest lease a claim or heartbeat may ask for (a day), and the shortest (100 ms).
pub const MAX_LEASE_MS: u64 = 86_400_000;
pub const MIN_LEASE_MS: u64 = 100;
/// Lease when the worker names none.
pub const DEFAULT_LEASE_MS: u64 = 60_000;
/// Longest pause between the claims of an idle claimer (a WorkflowWorker stream, an HTTP
/// long poll): due steps notify nothing, so idle claimers poll, from 1 ms up to this.
pub const MAX_IDLE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// What a step token says: whose step, which claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepToken {
    pub tenant_id: i64,
    pub id: i64,
    pub seq: i32,
    pub parent_id: Option<i64>,
}

/// First byte of a step token's body (job tokens are longer and never decode as one).
const DOMAIN: u8 = b'W';
const BODY_LEN: usize = 1 + 8 + 8 + 4 + 8;

impl StepToken {
    pub fn sign(&self, keys: &TokenKey) -> String {
        let mut b = Vec::with_capacity(BODY_LEN);
        b.push(DOMAIN);
        b.extend_from_slice(&self.tenant_id.to_be_bytes());
        b.extend_from_slice(&self.id.to_be_bytes());
        b.extend_from_slice(&self.seq.to_be_bytes());
        b.extend_from_slice(&self.parent_id.unwrap_or(0).to_be_bytes());
        keys.sign_bytes(&b)
    }

    /// The step a token names, if it is genuine and the caller's tenant's.
    pub fn verify(keys: &TokenKey, tenant_id: i64, token: &str) -> Option<StepToken> {
        let b = keys.verify_bytes(token)?;
        if b.len() != BODY_LEN || b[0] != DOMAIN {
            return None;
        }
        let i64_at = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let t = StepToken {
            tenant_id: i64_at(1),
            id: i64_at(9),
            seq: i32::from_be_bytes(b[17..21].try_into().expect("4 bytes")),
            parent_id: Some(i64_at(21)).filter(|p| *p != 0),
        };
        (t.tenant_id == tenant_id).then_some(t)
    }

    pub fn step_ref(&self) -> StepRef {
        StepRef {
            id: self.id,
            seq: self.seq,
            parent_id: self.parent_id,
            // Remote workers do not continue steps (finish, not finish_continuing).
            leased_at: None,
        }
    }
}

/// A step handed to a remote worker.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub step: ClaimedStep,
    pub token: String,
    pub lease_until: SystemTime,
}

/// What became of an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Applied,
    /// The instance was cancelled: stop working on it.
    Cancelled,
    /// The claim is not current any more (its lease lapsed and the step was claimed again,
    /// or another outcome was recorded first).
    Stale,
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Applied => "applied",
            Answer::Cancelled => "cancelled",
            Answer::Stale => "stale",
        }
    }
}

/// Claims up to `max` due steps of `engine_queue` (one statement) and signs them. Steps
/// whose lease lapsed more often than their max_attempts are failed here instead of being
/// handed out (as the in-process worker does).
pub async fn claim(
    wf: &Workflows,
    keys: &TokenKey,
    p: &Principal,
    engine_queue: &str,
    max: usize,
    worker: &str,
    lease: Duration,
) -> pgferry_core::Result<Vec<Delivered>> {
    let steps = wf.claim(engine_queue, max, worker, lease).await?;
    let lease_until = SystemTime::now() + lease;
    let (overdue, steps): (Vec<_>, Vec<_>) =
        steps.into_iter().partition(|s| s.attempt > s.max_attempts);
    if !overdue.is_empty() {
        let fails: Vec<_> = overdue
            .iter()
            .map(|s| {
                let reason = format!(
                    "step {} was not finished within its lease {} times",
                    s.step, s.max_attempts
                );
                (s.reference(), Outcome::fail(reason))
            })
            .collect();
        wf.finish(&fails).await?;
    }
    Ok(steps
        .into_iter()
        .map(|step| {
            let token = StepToken {
                tenant_id: p.tenant_id,
                id: step.id,
                seq: step.seq,
                parent_id: step.parent_id,
            }
            .sign(keys);
            Delivered {
                step,
                token,
                lease_until,
            }
        })
        .collect())
}

/// Records outcomes (one statement; one more, only when some were not applied, to tell a
/// cancel from a lapsed lease). One answer per outcome, in order.
pub async fn finish(
    wf: &Workflows,
    outcomes: &[(StepRef, Outcome)],
) -> pgferry_core::Result<Vec<Answer>> {
    let applied = wf.finish(outcomes).await?;
    let lost: Vec<i64> = outcomes
        .iter()
        .zip(&applied)
        .filter(|(_, a)| !**a)
        .map(|((r, _), _)| r.id)
        .collect();
    let statuses = wf.statuses(&lost).await?;
    Ok(outcomes
        .iter()
        .zip(applied)
        .map(|((r, _), a)| {
            if a {
                Answer::Applied
            } else if statuses.get(&r.id).map(String::as_str) == Some("cancelled") {
                Answer::Cancelled
            } else {
                Answer::Stale
            }
        })
        .collect())
}

/// Extends the leases of held steps (one statement).
pub async fn heartbeat(
    wf: &Workflows,
    steps: &[StepRef],
    lease: Duration,
) -> pgferry_core::Result<Vec<StepBeat>> {
    wf.extend(steps, lease).await
}

/// How a step was woken, as the wire says it.
pub fn wake_str(s: &ClaimedStep) -> Option<&'static str> {
    use pgferry_core::workflow::Wake;
    s.wake.map(|w| match w {
        Wake::Signal => "signal",
        Wake::Timeout => "timeout",
        Wake::Children => "children",
    })
}

/// A key as the engine stores it: the tenant's prefix, then the user's key.
pub fn tenant_key(p: &Principal, key: &str) -> String {
    format!(
        "{}{key}",
        crate::auth::namespace::tenant_prefix(p.tenant_id)
    )
}
