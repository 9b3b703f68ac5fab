//! Runs HTTP jobs from queues: claims, executes each attempt on the pooled [`Executor`] of
//! the tenant's allow list, signed with the tenant's secrets, and records the outcome
//! through the engine.
//!
//! - success: completed, the response (status, headers, bounded body) kept as the result;
//! - failure: retried with the queue's backoff, or after `Retry-After` when the destination
//!   sent one on 429/503 (whichever is later); the response goes with the error;
//! - a `Retry-After` pauses the whole destination key (host:port, or the job's `group`):
//!   its other jobs are snoozed until then without being sent;
//! - refused by the SSRF guard or malformed: dead at once (retrying cannot help);
//! - at most `per_destination` requests to one destination key at once, and at most its
//!   rate ([`crate::rate`]);
//! - a final outcome (completed, dead) of a job with `callback_url` enqueues the callback,
//!   an HTTP job of its own, before the outcome is recorded (deduplicated per job, so a
//!   re-run after a crash does not send two);
//! - every attempt's success or failure feeds [`Transitions`].
//!
//! [`HttpWorker::run_once`] runs one claimed batch start to end; the service runs each
//! queue through [`crate::pipeline`] instead, which keeps claiming while requests are in
//! flight (ADR 0020).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use pgferry_core::{ClaimedJob, Engine, NewJob, Outcome, OutcomeKind};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::executor::{Attempt, Executor, HttpRequest};
use crate::rate::{Limiter, Turn};
use crate::settings::{Rate, Settings, TenantSettings};
use crate::ssrf::Allow;
use crate::transitions::{NoSink, Observed, TransitionSink, Transitions};

/// The kind of job this worker runs.
pub const KIND: &str = "http";

/// How long a callback job's dedup key holds after it completed.
const CALLBACK_UNIQUE: Duration = Duration::from_secs(7 * 86_400);

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Most jobs one claim takes.
    pub batch: usize,
    /// Most requests to one destination key at once, across every batch in flight. 64: a
    /// destination answering in 10 ms can take 6,400 calls a second; with 16, the bench's
    /// loopback target fell behind the API's creates (docs/performance.md, "Deliveries
    /// keeping up"). A destination that must be spared gets a rate (`PUT /v1/http-jobs/rates`).
    pub per_destination: usize,
    /// The rate of destination keys a tenant set none for (None: unlimited).
    pub default_rate: Option<Rate>,
    /// Most claimed jobs of one queue (tenant) not yet finished — sending, or waiting for
    /// their destination's turn: a queue claims again as soon as it has room, without
    /// waiting for its earlier batches to finish.
    pub queue_in_flight: usize,
    /// Most claimed jobs of all queues of this server not yet finished (the server's bound
    /// on concurrent HTTP job requests).
    pub max_in_flight: usize,
    /// How often each queue looks for jobs the leader's rescuer made dead, to send their
    /// completion callbacks ([`crate::rescued`]).
    pub rescued_sweep: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch: 100,
            per_destination: 64,
            default_rate: None,
            queue_in_flight: 256,
            max_in_flight: 1024,
            rescued_sweep: Duration::from_secs(5),
        }
    }
}

pub struct HttpWorker {
    pub(crate) engine: Arc<Engine>,
    /// The server's allow list, and the settings every tenant's executor copies.
    executor: Arc<Executor>,
    pub(crate) config: WorkerConfig,
    /// The server-wide in-flight budget ([`WorkerConfig::max_in_flight`]).
    pub(crate) server_slots: Arc<Semaphore>,
    settings: Settings,
    /// One client per effective allow list (server's ∪ tenant's).
    executors: Mutex<HashMap<Allow, Arc<Executor>>>,
    paused: Mutex<HashMap<(i64, String), Instant>>,
    slots: Mutex<HashMap<(i64, String), Arc<Semaphore>>>,
    limiter: Limiter,
    transitions: Transitions,
}

/// One job's attempt as the batch records it.
pub(crate) struct Ran {
    outcome: Outcome,
    observed: Option<Observed>,
    callback: Option<NewJob>,
}

impl Ran {
    /// The (job id, attempt) whose outcome this is.
    pub(crate) fn attempt(&self) -> (i64, i32) {
        (self.outcome.job_id, self.outcome.attempt)
    }

    fn only(outcome: Outcome) -> Ran {
        Ran {
            outcome,
            observed: None,
            callback: None,
        }
    }
}

/// The tenant of an `http` queue's engine name (`t<id>.http`); 0 for the untenanted one.
pub fn tenant_of(queue: &str) -> i64 {
    queue
        .strip_prefix('t')
        .and_then(|q| q.strip_suffix(".http"))
        .and_then(|id| id.parse().ok())
        .unwrap_or(0)
}

impl HttpWorker {
    pub fn new(engine: Arc<Engine>, executor: Arc<Executor>, config: WorkerConfig) -> HttpWorker {
        HttpWorker::with_sink(engine, executor, config, Arc::new(NoSink))
    }

    /// A worker whose destination transitions also go to `sink`.
    pub fn with_sink(
        engine: Arc<Engine>,
        executor: Arc<Executor>,
        config: WorkerConfig,
        sink: Arc<dyn TransitionSink>,
    ) -> HttpWorker {
        HttpWorker {
            settings: Settings::new(engine.clone()),
            transitions: Transitions::new(engine.clone(), sink),
            engine,
            executor,
            server_slots: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            config,
            executors: Mutex::new(HashMap::new()),
            paused: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
            limiter: Limiter::default(),
        }
    }

    /// Claims up to a batch from `queue`, runs it, records the outcomes; returns how many.
    pub async fn run_once(&self, queue: &str) -> pgferry_core::Result<usize> {
        let jobs = self
            .engine
            .claim(queue, self.config.batch, "pgferry-http")
            .await?;
        let n = jobs.len();
        if n == 0 {
            return Ok(0);
        }
        let tenant = tenant_of(queue);
        let (settings, executor) = match self.context(tenant).await {
            Ok(c) => c,
            Err(e) => {
                self.hand_back(&jobs).await?;
                return Err(e);
            }
        };
        let ran = join_all(
            jobs.iter()
                .map(|j| self.run_job(queue, tenant, &settings, &executor, j)),
        )
        .await;
        self.record(&ran).await?;
        Ok(n)
    }

    /// What a claimed batch of `tenant` runs with: its settings (read per batch, so a new
    /// secret or allow list applies to the next claim) and the executor of its allow list.
    pub(crate) async fn context(
        &self,
        tenant: i64,
    ) -> pgferry_core::Result<(TenantSettings, Arc<Executor>)> {
        let settings = self.settings.load(tenant).await?;
        let executor = match self.executor_for(&settings.allow) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "HTTP client for a tenant's allow list");
                self.executor.clone()
            }
        };
        Ok((settings, executor))
    }

    /// Nothing was sent: hands the jobs back for a later claim.
    pub(crate) async fn hand_back(&self, jobs: &[ClaimedJob]) -> pgferry_core::Result<()> {
        let back: Vec<Outcome> = jobs
            .iter()
            .map(|j| j.snooze(Duration::from_secs(1)))
            .collect();
        self.engine.complete(&back).await?;
        Ok(())
    }

    /// Records attempts: their callbacks enqueued first (deduplicated per job), then their
    /// outcomes in one statement, then destination transitions. Safe to repeat after an
    /// error: a callback's unique key answers the first one, an attempt's first outcome wins.
    pub(crate) async fn record(&self, ran: &[Ran]) -> pgferry_core::Result<()> {
        let callbacks: Vec<NewJob> = ran.iter().filter_map(|r| r.callback.clone()).collect();
        if !callbacks.is_empty() {
            self.engine.enqueue(&callbacks).await?;
        }
        let outcomes: Vec<Outcome> = ran.iter().map(|r| r.outcome.clone()).collect();
        self.engine.complete(&outcomes).await?;
        for o in ran.iter().filter_map(|r| r.observed.clone()) {
            if let Err(e) = self.transitions.observe(o).await {
                tracing::warn!(error = %e, "HTTP destination state not recorded");
            }
        }
        Ok(())
    }

    fn executor_for(&self, tenant_allow: &Allow) -> reqwest::Result<Arc<Executor>> {
        if tenant_allow == &Allow::none() {
            return Ok(self.executor.clone());
        }
        let allow = self.executor.allow().union(tenant_allow);
        let mut ex = self.executors.lock().expect("not poisoned");
        if let Some(e) = ex.get(&allow) {
            return Ok(e.clone());
        }
        let e = Arc::new(self.executor.with_allow(allow.clone())?);
        ex.insert(allow, e.clone());
        Ok(e)
    }

    pub(crate) async fn run_job(
        &self,
        queue: &str,
        tenant: i64,
        settings: &TenantSettings,
        executor: &Executor,
        job: &ClaimedJob,
    ) -> Ran {
        let req = match HttpRequest::deserialize(&job.args) {
            Ok(r) => r,
            Err(e) => return Ran::only(job.discarded(format!("not an HTTP job's args: {e}"))),
        };
        let dest = (
            tenant,
            req.group.clone().unwrap_or_else(|| destination(&req.url)),
        );
        if let Some(wait) = self.paused_for(&dest) {
            return Ran::only(job.snooze(wait));
        }
        if let Some(rate) = settings
            .rates
            .get(&dest.1)
            .copied()
            .or(self.config.default_rate)
        {
            match self.limiter.turn(tenant, &dest.1, rate, Instant::now()) {
                Turn::Snooze(wait) => return Ran::only(job.snooze(wait)),
                Turn::SendAfter(wait) if !wait.is_zero() => tokio::time::sleep(wait).await,
                Turn::SendAfter(_) => {}
            }
        }
        let slot = self.slot(&dest);
        let _permit = slot.acquire().await;
        // A `Retry-After` may have paused the key while this job waited for its turn (with
        // several batches in flight many may wait): the whole key waits, this job too.
        if let Some(wait) = self.paused_for(&dest) {
            return Ran::only(job.snooze(wait));
        }
        let attempt = executor.run_signed(&req, &settings.secrets).await;
        let (outcome, observed) = match attempt {
            Attempt::Succeeded(resp) => {
                let o = observed(tenant, &dest.1, job, true, Some(resp.status), None);
                (job.completed(Some(json!(resp))), Some(o))
            }
            Attempt::Failed {
                refused: true,
                error,
                ..
            } => (job.discarded(error), None),
            Attempt::Failed {
                response,
                error,
                retry_after,
                ..
            } => {
                let backoff = job.backoff.delay(job.attempt);
                let delay = match retry_after {
                    Some(ra) => {
                        self.pause(&dest, ra);
                        ra.max(backoff)
                    }
                    None => backoff,
                };
                let status = response.as_ref().map(|r| r.status);
                let o = observed(tenant, &dest.1, job, false, status, Some(error.clone()));
                let detail = json!({"error": error, "response": response});
                (job.failed(detail.to_string(), delay), Some(o))
            }
        };
        let callback = callback(queue, &req, job, &outcome, observed.as_ref());
        Ran {
            outcome,
            observed,
            callback,
        }
    }

    fn paused_for(&self, dest: &(i64, String)) -> Option<Duration> {
        let paused = self.paused.lock().expect("not poisoned");
        let until = *paused.get(dest)?;
        until.checked_duration_since(Instant::now())
    }

    fn pause(&self, dest: &(i64, String), for_: Duration) {
        let until = Instant::now() + for_;
        let mut paused = self.paused.lock().expect("not poisoned");
        let e = paused.entry(dest.clone()).or_insert(until);
        *e = (*e).max(until);
    }

    fn slot(&self, dest: &(i64, String)) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().expect("not poisoned");
        slots
            .entry(dest.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.config.per_destination)))
            .clone()
    }
}

fn observed(
    tenant: i64,
    dest: &str,
    job: &ClaimedJob,
    ok: bool,
    status: Option<u16>,
    error: Option<String>,
) -> Observed {
    Observed {
        tenant_id: tenant,
        destination: dest.to_string(),
        ok,
        job_id: job.job_id,
        status,
        error,
    }
}

/// The callback job of a final outcome, if the job asked for one: a signed POST of the
/// outcome to `callback_url`, on the same queue (so the same tenant's guard and secrets).
fn callback(
    queue: &str,
    req: &HttpRequest,
    job: &ClaimedJob,
    outcome: &Outcome,
    observed: Option<&Observed>,
) -> Option<NewJob> {
    let status = match outcome.kind {
        OutcomeKind::Completed => "succeeded",
        OutcomeKind::Dead => "failed",
        _ => return None,
    };
    callback_job(
        queue,
        req,
        CallbackFacts {
            job_id: job.job_id,
            status,
            attempts: job.attempt,
            response_status: observed.and_then(|o| o.status),
            error: observed
                .and_then(|o| o.error.clone())
                .or_else(|| outcome.error.clone()),
        },
    )
}

/// What a completion callback reports of its job's final outcome.
pub(crate) struct CallbackFacts {
    pub job_id: i64,
    /// "succeeded" or "failed".
    pub status: &'static str,
    pub attempts: i32,
    pub response_status: Option<u16>,
    pub error: Option<String>,
}

/// The callback job of `req`'s final outcome, if it asked for one (the worker's outcome
/// path, and [`crate::rescued`] for jobs the leader's rescuer made dead). One per job: its
/// unique key answers any later enqueue of the same job's callback with the first.
pub(crate) fn callback_job(queue: &str, req: &HttpRequest, facts: CallbackFacts) -> Option<NewJob> {
    let url = req.callback_url.as_ref()?;
    let body = json!({
        "job_id": facts.job_id,
        "status": facts.status,
        "attempts": facts.attempts,
        "url": req.url,
        "response_status": facts.response_status,
        "error": facts.error,
    });
    let args = HttpRequest {
        method: "POST".into(),
        url: url.clone(),
        headers: BTreeMap::from([("content-type".to_string(), "application/json".to_string())]),
        body: Some(body.to_string()),
        timeout_ms: req.timeout_ms,
        expect_status: Vec::new(),
        expect_body: None,
        callback_url: None,
        group: None,
    };
    Some(
        NewJob::new(queue, KIND, json!(args))
            .unique(format!("pgferry-callback:{}", facts.job_id))
            .unique_period(CALLBACK_UNIQUE),
    )
}

/// The flow-control key of a URL: host and port.
pub fn destination(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or(""),
            u.port_or_known_default().unwrap_or(0)
        ),
        Err(_) => String::new(),
    }
}
