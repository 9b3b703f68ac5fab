//! Prometheus metrics, rendered in the text exposition format at `/metrics`.
//!
//! A small hand-rolled registry: a few counters keyed by (tenant, queue), three histograms
//! and gauges read at scrape time. Updates take one short mutex; pgferry's request rates
//! make that negligible next to a database round trip, and it keeps the dependency list short.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::coalesce::{BatchSnapshot, BATCH_BUCKETS};
use crate::AppState;

/// Per-queue job counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobCounter {
    Enqueued,
    Claimed,
    Completed,
    /// Failed attempts (retried or dead-lettered).
    Failed,
    /// Lease expired and the rescuer retried or dead-lettered the job.
    Rescued,
}

impl JobCounter {
    /// The counter a recorded outcome adds to: success is `Completed`; a failure (retried
    /// or dead-lettered) and a cancellation are `Failed`; a snooze or a hand-back of an
    /// undelivered job is neither.
    pub fn of_outcome(kind: &pgferry_core::OutcomeKind) -> Option<JobCounter> {
        use pgferry_core::OutcomeKind as K;
        match kind {
            K::Completed => Some(JobCounter::Completed),
            K::Retry { .. } | K::Dead | K::Cancelled => Some(JobCounter::Failed),
            K::Snooze { .. } | K::Released => None,
        }
    }

    const ALL: [JobCounter; 5] = [
        JobCounter::Enqueued,
        JobCounter::Claimed,
        JobCounter::Completed,
        JobCounter::Failed,
        JobCounter::Rescued,
    ];

    fn name(self) -> &'static str {
        match self {
            JobCounter::Enqueued => "pgferry_jobs_enqueued_total",
            JobCounter::Claimed => "pgferry_jobs_claimed_total",
            JobCounter::Completed => "pgferry_jobs_completed_total",
            JobCounter::Failed => "pgferry_jobs_failed_total",
            JobCounter::Rescued => "pgferry_jobs_rescued_total",
        }
    }

    fn help(self) -> &'static str {
        match self {
            JobCounter::Enqueued => "Jobs enqueued (committed) through this server.",
            JobCounter::Claimed => "Jobs handed to workers by this server.",
            JobCounter::Completed => "Attempts that ended in success, reported to this server.",
            JobCounter::Failed => {
                "Attempts that failed (retried or dead-lettered) or were cancelled, reported to this server."
            }
            JobCounter::Rescued => {
                "Attempts whose lease expired, rescued (retried or dead-lettered) by this server as leader."
            }
        }
    }
}

/// Latency histograms.
#[derive(Debug, Clone, Copy)]
pub enum Latency {
    /// One claim statement.
    Claim,
    /// One enqueue statement up to COMMIT.
    EnqueueCommit,
    /// One completion statement up to COMMIT.
    CompleteCommit,
}

/// Upper bounds in seconds: 0.1 ms … 10 s.
const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

struct Inner {
    jobs: BTreeMap<(JobCounter, String, String), u64>,
    claim: Histogram,
    enqueue_commit: Histogram,
    complete_commit: Histogram,
}

pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            inner: Mutex::new(Inner {
                jobs: BTreeMap::new(),
                claim: Histogram::new(&BUCKETS),
                enqueue_commit: Histogram::new(&BUCKETS),
                complete_commit: Histogram::new(&BUCKETS),
            }),
        }
    }
}

impl Metrics {
    /// Adds `n` to a per-queue counter. `queue` is the user's queue name (no tenant prefix).
    pub fn add(&self, counter: JobCounter, tenant: &str, queue: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut inner = self.inner.lock().expect("metrics");
        *inner
            .jobs
            .entry((counter, tenant.to_string(), queue.to_string()))
            .or_default() += n;
    }

    /// Adds one to `counter` per item of `queues` (user queue names), one lock for all.
    pub fn add_each<'a>(
        &self,
        counter: JobCounter,
        tenant: &str,
        queues: impl IntoIterator<Item = &'a str>,
    ) {
        let mut per: BTreeMap<&str, u64> = BTreeMap::new();
        for q in queues {
            *per.entry(q).or_default() += 1;
        }
        if per.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().expect("metrics");
        for (q, n) in per {
            *inner
                .jobs
                .entry((counter, tenant.to_string(), q.to_string()))
                .or_default() += n;
        }
    }

    /// Counts recorded outcomes: (user queue, outcome) of each one that was not stale.
    pub fn count_outcomes<'a>(
        &self,
        tenant: &str,
        outcomes: impl IntoIterator<Item = (&'a str, &'a pgferry_core::OutcomeKind)>,
    ) {
        let mut completed = Vec::new();
        let mut failed = Vec::new();
        for (q, kind) in outcomes {
            match JobCounter::of_outcome(kind) {
                Some(JobCounter::Completed) => completed.push(q),
                Some(_) => failed.push(q),
                None => {}
            }
        }
        self.add_each(JobCounter::Completed, tenant, completed);
        self.add_each(JobCounter::Failed, tenant, failed);
    }

    pub fn observe(&self, which: Latency, took: Duration) {
        let mut inner = self.inner.lock().expect("metrics");
        let h = match which {
            Latency::Claim => &mut inner.claim,
            Latency::EnqueueCommit => &mut inner.enqueue_commit,
            Latency::CompleteCommit => &mut inner.complete_commit,
        };
        h.observe(took.as_secs_f64());
    }

    /// The current value of a counter (tests, dashboards).
    pub fn get(&self, counter: JobCounter, tenant: &str, queue: &str) -> u64 {
        let inner = self.inner.lock().expect("metrics");
        inner
            .jobs
            .get(&(counter, tenant.to_string(), queue.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The exposition text. `coalescers`: (kind of write, its batch statistics).
    pub fn render(
        &self,
        pool: &deadpool_postgres::Status,
        coalescers: &[(&str, BatchSnapshot)],
    ) -> String {
        let inner = self.inner.lock().expect("metrics");
        let mut out = String::new();
        for c in JobCounter::ALL {
            let _ = writeln!(out, "# HELP {} {}", c.name(), c.help());
            let _ = writeln!(out, "# TYPE {} counter", c.name());
            for ((_, tenant, queue), n) in inner.jobs.iter().filter(|((k, ..), _)| *k == c) {
                let _ = writeln!(
                    out,
                    "{}{{tenant=\"{}\",queue=\"{}\"}} {n}",
                    c.name(),
                    escape(tenant),
                    escape(queue)
                );
            }
        }
        for (name, help, h) in [
            (
                "pgferry_claim_seconds",
                "Duration of one claim statement.",
                &inner.claim,
            ),
            (
                "pgferry_enqueue_commit_seconds",
                "Duration of one enqueue statement including COMMIT.",
                &inner.enqueue_commit,
            ),
            (
                "pgferry_complete_commit_seconds",
                "Duration of one completion statement including COMMIT.",
                &inner.complete_commit,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} histogram");
            h.render(&mut out, name, "");
        }
        render_coalescers(&mut out, coalescers);
        for (name, help, v) in [
            (
                "pgferry_pool_connections",
                "Connections open in the request pool.",
                pool.size,
            ),
            (
                "pgferry_pool_available",
                "Idle connections in the request pool.",
                pool.available,
            ),
            (
                "pgferry_pool_max",
                "Maximum size of the request pool.",
                pool.max_size,
            ),
            (
                "pgferry_pool_waiting",
                "Requests waiting for a pooled connection.",
                pool.waiting,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {v}");
        }
        out
    }
}

fn render_coalescers(out: &mut String, coalescers: &[(&str, BatchSnapshot)]) {
    let name = "pgferry_coalescer_batch_rows";
    let _ = writeln!(
        out,
        "# HELP {name} Rows per flushed group-commit statement."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (kind, snap) in coalescers {
        let kind = escape(kind);
        let bounds = BATCH_BUCKETS.iter().map(|b| b.to_string());
        for (le, n) in bounds.chain(["+Inf".to_string()]).zip(&snap.cumulative) {
            let _ = writeln!(out, "{name}_bucket{{kind=\"{kind}\",le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_sum{{kind=\"{kind}\"}} {}", snap.rows);
        let _ = writeln!(out, "{name}_count{{kind=\"{kind}\"}} {}", snap.flushes);
    }
    type Get = fn(&BatchSnapshot) -> u64;
    let counters: [(&str, &str, Get); 5] = [
        (
            "pgferry_coalescer_statements_total",
            "Engine statements run by the coalescer (flushes plus per-caller re-runs).",
            |s| s.statements,
        ),
        (
            "pgferry_coalescer_requests_total",
            "Requests submitted to the coalescer.",
            |s| s.callers,
        ),
        (
            "pgferry_coalescer_failed_flushes_total",
            "Flushes whose merged statement failed.",
            |s| s.failed_flushes,
        ),
        (
            "pgferry_coalescer_split_requests_total",
            "Requests whose items went to several flush lanes (completions: by receipt).",
            |s| s.split,
        ),
        (
            "pgferry_coalescer_caller_run_flushes_total",
            "Flushes run by their caller on an idle lane (adaptive group commit).",
            |s| s.caller_run,
        ),
    ];
    for (name, help, get) in counters {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (kind, snap) in coalescers {
            let _ = writeln!(out, "{name}{{kind=\"{}\"}} {}", escape(kind), get(snap));
        }
    }
    let name = "pgferry_coalescer_lanes";
    let _ = writeln!(
        out,
        "# HELP {name} Flush lanes of the coalescer, each running one statement at a time when the writer is partitioned."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (kind, snap) in coalescers {
        let _ = writeln!(out, "{name}{{kind=\"{}\"}} {}", escape(kind), snap.lanes);
    }
}

/// Label values: backslash, quote and newline escaped (names are validated anyway).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counts what the leader's rescuer rescues (only while this server leads) under the
/// tenant's name and user queue name; engine queues outside any tenant (embedding
/// applications, benchmarks) are labelled with an empty tenant and their engine name.
/// Runs until the leader is dropped.
pub async fn feed_rescues(
    state: AppState,
    mut rescues: tokio::sync::broadcast::Receiver<
        std::sync::Arc<pgferry_core::leader::rescuer::RescueReport>,
    >,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut names: std::collections::HashMap<i64, String> = Default::default();
    loop {
        let report = match rescues.recv().await {
            Ok(r) => r,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(reports = n, "rescue metrics fell behind; some not counted");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        for (engine_queue, n) in &report.per_queue {
            let n = u64::try_from(*n).unwrap_or(0);
            match crate::auth::namespace::split_engine_queue(engine_queue) {
                Some((tenant_id, queue)) => {
                    if !names.contains_key(&tenant_id) {
                        refresh_tenant_names(&state, &mut names).await;
                    }
                    let tenant = names
                        .get(&tenant_id)
                        .cloned()
                        .unwrap_or_else(|| tenant_id.to_string());
                    state.metrics.add(JobCounter::Rescued, &tenant, queue, n);
                }
                None => state.metrics.add(JobCounter::Rescued, "", engine_queue, n),
            }
        }
    }
}

async fn refresh_tenant_names(
    state: &AppState,
    names: &mut std::collections::HashMap<i64, String>,
) {
    let listed = match state.engine.pool().get().await {
        Ok(client) => crate::auth::admin::list_tenants(&client).await.ok(),
        Err(_) => None,
    };
    for t in listed.into_iter().flatten() {
        names.insert(t.tenant_id, t.name);
    }
}

pub async fn handler(State(state): State<AppState>) -> impl IntoResponse {
    let status = state.engine.pool().status();
    let coalescers = [
        ("enqueue", state.coalescers.enqueue.stats().snapshot()),
        ("complete", state.coalescers.complete.stats().snapshot()),
        // Queues with async durability flush apart (coalesce/writers.rs).
        (
            "enqueue_async",
            state.coalescers.enqueue_async.stats().snapshot(),
        ),
        (
            "complete_async",
            state.coalescers.complete_async.stats().snapshot(),
        ),
    ];
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        {
            let mut out = state.metrics.render(&status, &coalescers);
            let name = "pgferry_complete_whole_receipts_total";
            let _ = writeln!(
                out,
                "# HELP {name} Claimed batches completed whole in one statement (the engine's fast path).\n# TYPE {name} counter\n{name} {}",
                state.receipts.whole()
            );
            pgferry_schedules::metrics::render(&mut out);
            pgferry_monitors::metrics::render(&mut out);
            out
        },
    )
}
