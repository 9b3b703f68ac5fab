//! Starting, signalling, cancelling and retrying instances; claiming steps and recording
//! their outcomes. Each operation is one statement (a call of a function in src/sql/functions/wf_*.sql),
//! also inside the caller's transaction where that makes sense (`*_tx`).

use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::Pool;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use super::machine::{ClaimedStep, Machine, Outcome, Wake};
use super::outcome_arrays::{self, OutcomeItem};
use super::validate;
use crate::error::{Error, Result};

const START: &str = include_str!("../sql/workflow/start.sql");
const CLAIM: &str = include_str!("../sql/workflow/claim.sql");
const FINISH: &str = include_str!("../sql/workflow/finish.sql");
const SIGNAL: &str = include_str!("../sql/workflow/signal.sql");
const CANCEL: &str = include_str!("../sql/workflow/cancel.sql");
const RETRY: &str = include_str!("../sql/workflow/retry.sql");
const REGISTER_KIND: &str = include_str!("../sql/workflow/register_kind.sql");
const SET_CONCURRENCY: &str = include_str!("../sql/workflow/set_concurrency.sql");
const SET_RATE: &str = include_str!("../sql/workflow/set_rate.sql");

/// Largest input, state, result or signal payload, in bytes of JSON.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// An instance to start.
#[derive(Debug, Clone)]
pub struct Start {
    pub kind: String,
    pub queue: String,
    pub input: Value,
    /// First step; "start" unless set.
    pub step: String,
    /// Initial state; `{}` unless set.
    pub state: Option<Value>,
    /// At most one active instance per (queue, key): starting another returns the first
    /// with `duplicate: true`.
    pub correlation_key: Option<String>,
    /// At most `concurrency_limit` steps of instances with this key run at once.
    pub concurrency_key: Option<String>,
    /// The key's limit when this start creates it (1 unless set); an existing key keeps
    /// its limit ([`Workflows::set_concurrency_limit`] changes it).
    pub concurrency_limit: Option<i32>,
    /// What this start does when its key has no free slot ([`ConcurrencyStrategy`]); also
    /// recorded on the key (the key's strategy applies to later starts that do not set
    /// one). `None`: the key's strategy, `Queue` for a new key.
    pub concurrency_strategy: Option<ConcurrencyStrategy>,
    /// Each step takes a token of this rate limit ([`Workflows::set_rate_limit`]).
    pub rate_key: Option<String>,
    /// 0 (least urgent) to 9.
    pub priority: u8,
    /// First step not before this instant.
    pub run_at: Option<SystemTime>,
    /// Attempts per step (retries and expired leases); 25 unless set.
    pub max_attempts: Option<i32>,
}

impl Start {
    pub fn new(kind: impl Into<String>, queue: impl Into<String>, input: Value) -> Start {
        Start {
            kind: kind.into(),
            queue: queue.into(),
            input,
            step: "start".into(),
            state: None,
            correlation_key: None,
            concurrency_key: None,
            concurrency_limit: None,
            concurrency_strategy: None,
            rate_key: None,
            priority: 0,
            run_at: None,
            max_attempts: None,
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        crate::job::validate_kind(&self.kind)?;
        crate::job::validate_queue_name(&self.queue)?;
        validate::name("step", &self.step)?;
        validate::payload("input", &self.input)?;
        if let Some(s) = &self.state {
            validate::payload("state", s)?;
        }
        for (field, key) in [
            ("correlation_key", &self.correlation_key),
            ("concurrency_key", &self.concurrency_key),
            ("rate_key", &self.rate_key),
        ] {
            if let Some(k) = key {
                validate::key(field, k)?;
            }
        }
        validate::priority(self.priority)?;
        if let Some(n) = self.concurrency_limit {
            validate::positive("concurrency_limit", n)?;
        }
        if self.concurrency_strategy.is_some() && self.concurrency_key.is_none() {
            return Err(Error::InvalidArgument {
                field: "concurrency_strategy",
                reason: "a concurrency strategy needs a concurrency_key".into(),
            });
        }
        if let Some(n) = self.max_attempts {
            validate::attempts(n)?;
        }
        Ok(())
    }
}

/// What a start does when its concurrency key has no free slot (Hatchet's concurrency
/// strategies, on pgferry's slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConcurrencyStrategy {
    /// Its first step waits among the key's waiters and runs when a slot frees, oldest
    /// first (the default).
    Queue,
    /// The oldest active instance holding a slot of the key is cancelled (with its
    /// descendants) to make room, and the new one runs.
    CancelInProgress,
    /// The new instance is cancelled at once (it exists with status `cancelled` and an
    /// error naming the key); the running ones go on.
    CancelNewest,
    /// Waits its turn like [`Queue`](ConcurrencyStrategy::Queue) within the key, and the
    /// keys take turns (Hatchet's GROUP_ROUND_ROBIN): a round-robin key keeps one due step
    /// in the picker and its other due steps among its waiters, so a key with a backlog has
    /// one place in the picker's line like a key with one step. A claim that takes a key's
    /// step serves more of that key only if its batch has room, and the key's next step
    /// goes to the back of the line. The limit still caps the key's steps in flight.
    RoundRobin,
}

impl ConcurrencyStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyStrategy::Queue => "queue",
            ConcurrencyStrategy::CancelInProgress => "cancel_in_progress",
            ConcurrencyStrategy::CancelNewest => "cancel_newest",
            ConcurrencyStrategy::RoundRobin => "round_robin",
        }
    }

    /// Parses a strategy's name; an unknown one is an error naming `concurrency_strategy`.
    pub fn parse(s: &str) -> Result<ConcurrencyStrategy> {
        match s {
            "queue" => Ok(ConcurrencyStrategy::Queue),
            "cancel_in_progress" => Ok(ConcurrencyStrategy::CancelInProgress),
            "cancel_newest" => Ok(ConcurrencyStrategy::CancelNewest),
            "round_robin" => Ok(ConcurrencyStrategy::RoundRobin),
            _ => Err(Error::InvalidArgument {
                field: "concurrency_strategy",
                reason: format!(
                    "{s:?} is not one of queue, cancel_in_progress, cancel_newest, round_robin"
                ),
            }),
        }
    }
}

/// A started instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub id: i64,
    /// An active instance with the same correlation key existed: this is its id.
    pub duplicate: bool,
}

/// Where a signal goes.
#[derive(Debug, Clone)]
pub enum Target {
    Id(i64),
    /// The active instance with this correlation key in this queue.
    Correlation {
        queue: String,
        key: String,
    },
}

/// A sent signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalSent {
    pub signal_id: i64,
    pub instance_id: i64,
    /// The instance was awaiting this name and consumed it (it is runnable now); false: the
    /// signal waits in its inbox.
    pub delivered: bool,
}

/// Which claim of which instance an outcome answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRef {
    pub id: i64,
    pub seq: i32,
    /// Orders a batch's outcomes (parents' locks are taken in one order).
    pub parent_id: Option<i64>,
    /// [`ClaimedStep::leased_at`]: whether a continued step renews its lease.
    pub leased_at: Option<Instant>,
}

impl ClaimedStep {
    pub fn reference(&self) -> StepRef {
        StepRef {
            id: self.id,
            seq: self.seq,
            parent_id: self.parent_id,
            leased_at: self.leased_at,
        }
    }
}

/// The workflow API over a pool.
#[derive(Clone)]
pub struct Workflows {
    pool: Pool,
    /// "A step of this queue became runnable" (wake.rs): wakes idle workers.
    ready: tokio::sync::broadcast::Sender<String>,
    /// Each announcement wakes one idle worker of its queue, not all of them (wake.rs).
    pub(crate) wakers: std::sync::Arc<super::wake::Wakers>,
}

impl Workflows {
    /// On a bare pool: its workers poll, unless [`Workflows::listen_ready`] runs.
    pub fn new(pool: Pool) -> Workflows {
        Workflows {
            pool,
            ready: tokio::sync::broadcast::Sender::new(1024),
            wakers: Default::default(),
        }
    }

    /// On an engine's pool; its workers are woken through the engine's LISTEN task.
    pub fn of(engine: &crate::Engine) -> Workflows {
        Workflows {
            pool: engine.pool().clone(),
            ready: engine.signals().wf_ready(),
            wakers: Default::default(),
        }
    }

    pub(crate) fn ready_sender(&self) -> tokio::sync::broadcast::Sender<String> {
        self.ready.clone()
    }

    /// Announcements of queues where a step became runnable (wake.rs).
    pub fn subscribe_ready(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.ready.subscribe()
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Starts an instance in one statement.
    pub async fn start(&self, start: &Start) -> Result<Started> {
        let client = self.pool.get().await?;
        Self::start_tx(&**client, start).await
    }

    /// Starts an instance inside the caller's transaction (or on any client): it exists, and
    /// its first step becomes claimable, only if that transaction commits.
    pub async fn start_tx<C: GenericClient>(client: &C, start: &Start) -> Result<Started> {
        start.validate()?;
        let priority = i16::from(start.priority);
        let strategy = start.concurrency_strategy.map(ConcurrencyStrategy::as_str);
        let params: [&(dyn ToSql + Sync); 13] = [
            &start.kind,
            &start.queue,
            &start.step,
            &start.input,
            &start.state,
            &start.correlation_key,
            &start.concurrency_key,
            &start.concurrency_limit,
            &start.rate_key,
            &priority,
            &start.run_at,
            &start.max_attempts,
            &strategy,
        ];
        let row = client.query_one(START, &params).await?;
        Ok(Started {
            id: row.try_get("id")?,
            duplicate: row.try_get("duplicate")?,
        })
    }

    /// Sends a signal in one statement.
    pub async fn signal(&self, target: &Target, name: &str, payload: &Value) -> Result<SignalSent> {
        let client = self.pool.get().await?;
        Self::signal_tx(&**client, target, name, payload).await
    }

    /// Sends a signal inside the caller's transaction.
    pub async fn signal_tx<C: GenericClient>(
        client: &C,
        target: &Target,
        name: &str,
        payload: &Value,
    ) -> Result<SignalSent> {
        validate::name("signal name", name)?;
        validate::payload("payload", payload)?;
        let (id, queue, key, shown) = match target {
            Target::Id(id) => (Some(*id), None, None, id.to_string()),
            Target::Correlation { queue, key } => {
                crate::job::validate_queue_name(queue)?;
                validate::key("correlation_key", key)?;
                (
                    None,
                    Some(queue.as_str()),
                    Some(key.as_str()),
                    format!("{queue}/{key}"),
                )
            }
        };
        let params: [&(dyn ToSql + Sync); 5] = [&id, &queue, &key, &name, payload];
        let row = client
            .query_one(SIGNAL, &params)
            .await
            .map_err(|e| instance_error(e, &shown))?;
        Ok(SignalSent {
            signal_id: row.try_get("signal_id")?,
            instance_id: row.try_get("instance_id")?,
            delivered: row.try_get("delivered")?,
        })
    }

    /// Cancels an instance and its descendants; returns the status it had (a terminal one:
    /// nothing changed).
    ///
    /// A cancel locks the instance's chain, then its concurrency key and its children. A
    /// batch of outcomes that locked one of those children first (a plain step of it) and
    /// then wants the chain can deadlock with it; should Postgres abort the cancel, nothing
    /// of it was written and it is run again.
    pub async fn cancel(&self, id: i64, reason: Option<&str>) -> Result<String> {
        let client = self.pool.get().await?;
        let params: [&(dyn ToSql + Sync); 2] = [&id, &reason];
        let row = again_if_deadlocked(|| client.query_one(CANCEL, &params))
            .await
            .map_err(|e| instance_error(e, &id.to_string()))?;
        Ok(row.try_get("previous")?)
    }

    /// Runs a failed instance again from the step that failed; returns that step.
    pub async fn retry(&self, id: i64) -> Result<String> {
        let client = self.pool.get().await?;
        let params: [&(dyn ToSql + Sync); 1] = [&id];
        let row = again_if_deadlocked(|| client.query_one(RETRY, &params))
            .await
            .map_err(|e| instance_error(e, &id.to_string()))?;
        Ok(row.try_get("step")?)
    }

    /// Records the machines' capability flags (what their claims load).
    pub async fn register(&self, machines: &[&Machine]) -> Result<()> {
        let kinds: Vec<&str> = machines.iter().map(|m| m.kind()).collect();
        let caps: Vec<i16> = machines.iter().map(|m| m.caps().bits()).collect();
        let client = self.pool.get().await?;
        client.execute(REGISTER_KIND, &[&kinds, &caps]).await?;
        Ok(())
    }

    /// At most `limit` steps of instances with `key` run at once (waiters are promoted as
    /// running steps end).
    pub async fn set_concurrency_limit(&self, key: &str, limit: i32) -> Result<()> {
        validate::key("concurrency_key", key)?;
        validate::positive("limit", limit)?;
        let client = self.pool.get().await?;
        client.execute(SET_CONCURRENCY, &[&key, &limit]).await?;
        Ok(())
    }

    /// A token bucket: `per_second` steps on average, bursts of up to `burst`.
    pub async fn set_rate_limit(&self, key: &str, per_second: f64, burst: f64) -> Result<()> {
        validate::key("rate_key", key)?;
        if !(per_second.is_finite() && per_second > 0.0) {
            return Err(Error::InvalidArgument {
                field: "per_second",
                reason: format!("{per_second} is not a positive number"),
            });
        }
        if !(burst.is_finite() && burst >= 1.0) {
            return Err(Error::InvalidArgument {
                field: "burst",
                reason: format!("{burst} is not a number of at least 1"),
            });
        }
        let client = self.pool.get().await?;
        client
            .execute(SET_RATE, &[&key, &per_second, &burst])
            .await?;
        Ok(())
    }

    /// Claims up to `max` due steps of `queue` in one statement.
    pub async fn claim(
        &self,
        queue: &str,
        max: usize,
        worker: &str,
        lease: Duration,
    ) -> Result<Vec<ClaimedStep>> {
        let client = self.pool.get().await?;
        let max = i32::try_from(max.clamp(1, 10_000)).unwrap_or(10_000);
        let lease_ms = i32::try_from(lease.as_millis()).unwrap_or(i32::MAX);
        let stmt = client.prepare_cached(CLAIM).await?;
        let sent = Instant::now();
        let rows = client
            .query(&stmt, &[&queue, &max, &worker, &lease_ms])
            .await?;
        rows.iter().map(|r| claimed(r, sent)).collect()
    }

    /// Records a batch of outcomes in one statement; per outcome, whether it was applied
    /// (false: stale — the instance was cancelled or its step claimed again).
    ///
    /// Outcomes are applied ordered by parent, then instance, so concurrent batches lock
    /// parents in one order. Should two batches still deadlock (their concurrency keys in
    /// opposite orders), Postgres aborts one whole batch, and it is applied again one
    /// outcome per statement.
    pub async fn finish(&self, outcomes: &[(StepRef, Outcome)]) -> Result<Vec<bool>> {
        let done = self.finish_with(outcomes, None).await?;
        Ok(done.into_iter().map(|f| f.applied).collect())
    }

    /// [`Workflows::finish`], and each plain `next` (an instance without a concurrency or
    /// rate key) continues: its next step is claimed by the same statement, for the same
    /// worker, and comes back in [`Finished::continued`] instead of going through the
    /// picker (ADR 0016, addendum "Continued steps"). The continued step holds at least
    /// half of `lease`: its lease is renewed when less than half of it is left by this
    /// process's clock ([`StepRef::leased_at`]; always when that is not known), and not
    /// written at all otherwise.
    pub async fn finish_continuing(
        &self,
        outcomes: &[(StepRef, Outcome)],
        lease: Duration,
    ) -> Result<Vec<Finished>> {
        self.finish_with(outcomes, Some(lease)).await
    }

    async fn finish_with(
        &self,
        outcomes: &[(StepRef, Outcome)],
        lease: Option<Duration>,
    ) -> Result<Vec<Finished>> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let mut order: Vec<usize> = (0..outcomes.len()).collect();
        order.sort_by_key(|&i| {
            let r = outcomes[i].0;
            (r.parent_id.unwrap_or(r.id), r.id)
        });
        let mut items = Vec::with_capacity(outcomes.len());
        // Taken before the statement is sent: a lease it renews starts no earlier.
        let sent = Instant::now();
        let mut leased_at = vec![None; outcomes.len()];
        for &i in &order {
            let (r, o) = &outcomes[i];
            validate::outcome(o)?;
            let mut item = OutcomeItem::new(r.id, r.seq, o);
            if let (Some(lease), Outcome::Next { .. }) = (lease, o) {
                let lease_ms = lease.as_millis().min(i32::MAX as u128) as f64;
                // Renewed when less than half of the lease is left (the picker row is
                // not read to find out: wf_finish_arrays.sql writes it only when asked).
                let renew = match r.leased_at {
                    Some(t) if sent.saturating_duration_since(t) < lease / 2 => {
                        leased_at[i] = Some(t);
                        false
                    }
                    _ => {
                        leased_at[i] = Some(sent);
                        true
                    }
                };
                item = item.continuing(lease_ms, renew);
            }
            items.push(item);
        }
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached(FINISH).await?;
        let mut done: Vec<Finished> = (0..outcomes.len()).map(|_| Finished::default()).collect();
        match outcome_arrays::send(&**client, &stmt, &items).await {
            Ok(rows) => {
                for (&i, row) in order.iter().zip(rows.iter()) {
                    done[i] = finished(row, leased_at[i])?;
                }
            }
            Err(e) if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
                tracing::debug!("workflow outcome batch deadlocked; applying one at a time");
                for (&i, item) in order.iter().zip(&items) {
                    let rows =
                        outcome_arrays::send(&**client, &stmt, std::slice::from_ref(item)).await?;
                    done[i] = finished(&rows[0], leased_at[i])?;
                }
            }
            Err(e) => return Err(e.into()),
        }
        Ok(done)
    }
}

/// Runs a transaction again when Postgres aborted it as a deadlock victim (nothing of it
/// was written), up to three times in all. `run` makes one whole attempt.
pub(super) async fn again_if_deadlocked<T, E, F, Fut>(mut run: F) -> std::result::Result<T, E>
where
    E: DbCode,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
{
    let mut tries = 1;
    loop {
        match run().await {
            Err(e) if tries < 3 && e.db_code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
                tracing::debug!("a workflow transaction was a deadlock victim; running it again");
                tries += 1;
            }
            other => return other,
        }
    }
}

/// The SQLSTATE of an error that came from the database.
pub(super) trait DbCode {
    fn db_code(&self) -> Option<&SqlState>;
}

impl DbCode for tokio_postgres::Error {
    fn db_code(&self) -> Option<&SqlState> {
        self.code()
    }
}

impl DbCode for Error {
    fn db_code(&self) -> Option<&SqlState> {
        match self {
            Error::Db(e) => e.code(),
            _ => None,
        }
    }
}

/// One outcome's answer from [`Workflows::finish_continuing`].
#[derive(Debug, Default)]
pub struct Finished {
    /// False: stale (the instance was cancelled or its step claimed again).
    pub applied: bool,
    /// The instance's next step, claimed for this worker (a plain `next` that continued).
    pub continued: Option<ClaimedStep>,
}

/// One outcome's answer (finish.sql): applied, and a continued step's claim in the
/// `cont_*` columns (`cont_step_seq` NULL: it did not continue), its lease from `leased_at`.
fn finished(r: &tokio_postgres::Row, leased_at: Option<Instant>) -> Result<Finished> {
    let seq: Option<i32> = r.try_get("cont_step_seq")?;
    let continued = match seq {
        None => None,
        Some(seq) => Some(ClaimedStep {
            id: r.try_get("id")?,
            kind: r.try_get("cont_kind")?,
            step: r.try_get("cont_step")?,
            state: r.try_get("cont_state")?,
            input: r.try_get("cont_input")?,
            attempt: r.try_get("cont_attempt")?,
            max_attempts: r.try_get("cont_max_attempts")?,
            seq,
            wake: None,
            parent_id: r.try_get("cont_parent_id")?,
            inbox: None,
            children: None,
            leased_at,
        }),
    };
    Ok(Finished {
        applied: r.try_get("applied")?,
        continued,
    })
}

fn claimed(r: &tokio_postgres::Row, leased_at: Instant) -> Result<ClaimedStep> {
    let wake: Option<String> = r.try_get("wake")?;
    let inbox: Option<Value> = r.try_get("inbox")?;
    let children: Option<Value> = r.try_get("children")?;
    Ok(ClaimedStep {
        id: r.try_get("id")?,
        kind: r.try_get("kind")?,
        step: r.try_get("step")?,
        state: r.try_get("state")?,
        input: r.try_get("input")?,
        attempt: r.try_get("attempt")?,
        max_attempts: r.try_get("max_attempts")?,
        seq: r.try_get("step_seq")?,
        wake: match wake.as_deref() {
            Some("signal") => Some(Wake::Signal),
            Some("timeout") => Some(Wake::Timeout),
            Some("children") => Some(Wake::Children),
            _ => None,
        },
        parent_id: r.try_get("parent_id")?,
        inbox: inbox.map(|v| decode("inbox", v)).transpose()?,
        children: children.map(|v| decode("children", v)).transpose()?,
        leased_at: Some(leased_at),
    })
}

fn decode<T: serde::de::DeserializeOwned>(field: &'static str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::InvalidArgument {
        field,
        reason: e.to_string(),
    })
}

/// The functions' SQLSTATEs as the engine's errors: no such instance, not in a state that
/// allows it, a correlation key taken.
pub(crate) fn instance_error(e: tokio_postgres::Error, id: &str) -> Error {
    let message = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    match e.code() {
        Some(c) if *c == SqlState::NO_DATA_FOUND => Error::NotFound {
            what: "workflow instance",
            id: id.to_string(),
        },
        Some(c) if *c == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE => Error::Conflict(message),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => Error::Conflict(format!(
            "workflow instance {id}: its correlation key is held by another active instance"
        )),
        _ => Error::Db(e),
    }
}
