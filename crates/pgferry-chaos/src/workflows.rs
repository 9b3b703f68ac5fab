//! Workflow chaos (docs/reliability.md#workflows): the suite's machines run in worker
//! processes over HTTP (wf_worker.rs) while a driver starts orders, signals each by its
//! correlation key and cancels some, and a fault hits (a worker SIGKILLed mid-step,
//! backends terminated, Postgres restarted). Afterwards the workers' ledgers and the
//! database must show: no step outcome applied twice, no step after a cancel, each signal
//! consumed once, each child joined once, each parent resumed once, and every started
//! instance ended done, failed or cancelled.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};

use crate::env::{Env, PgPlan, QUEUE};
use crate::faults::{self, Details};
use crate::producers::Flow;
use crate::wf_worker::{ITEM, ORDER};
use crate::{ChaosConfig, ChaosError, Fault};

const INVARIANTS: &str = include_str!("sql/wf_invariants.sql");
/// Share of orders the driver cancels.
const CANCEL_SHARE: f64 = 0.1;
/// The drain gives up when no instance ended for this long.
const DRAIN_STALL: Duration = Duration::from_secs(30);

/// What a workflow fault run found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WorkflowReport {
    pub fault: String,
    pub passed: bool,
    pub violations: Vec<String>,
    pub fault_events: usize,
    /// Orders the driver started (acknowledged).
    pub started: u64,
    pub signals_sent: u64,
    pub cancels_sent: u64,
    /// Instances (orders and their children) at the end, by status.
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub active: i64,
    /// Steps claimed (worker ledgers) and outcomes applied, refused as stale, or answered
    /// cancelled.
    pub steps_claimed: u64,
    pub applied: u64,
    pub stale: u64,
    pub answered_cancelled: u64,
    pub details: BTreeMap<String, Value>,
}

/// The driver's book.
#[derive(Default)]
struct Book {
    started: Mutex<Vec<i64>>,
    signals: AtomicU64,
    cancels: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Book {
    fn error(&self, what: impl Into<String>) {
        *self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(what.into())
            .or_default() += 1;
    }
}

/// Runs `fault` (worker-kill, terminate-2 or pg-restart) against the workflow machines.
pub async fn run_workflow_fault(
    cfg: &ChaosConfig,
    fault: Fault,
) -> Result<WorkflowReport, ChaosError> {
    if !matches!(
        fault,
        Fault::WorkerKill | Fault::Terminate2 | Fault::PgRestart
    ) {
        return Err(ChaosError::setup(
            "workflow chaos",
            format!("fault {} is not run against workflows", fault.name()),
        ));
    }
    if fault.needs_own_cluster() && cfg.database_url.is_some() {
        return Err(ChaosError::NeedsOwnCluster {
            fault: fault.name(),
        });
    }
    let plan = PgPlan {
        standby: None,
        max_connections: 100,
    };
    let mut env = Env::setup(cfg, plan).await?;
    let result = run_in(&mut env, fault).await;
    let down = env.teardown().await;
    let report = result?;
    down?;
    Ok(report)
}

async fn run_in(env: &mut Env, fault: Fault) -> Result<WorkflowReport, ChaosError> {
    let cfg = env.cfg.clone();
    env.add_server().await?;
    let base = env.http_urls()[0].clone();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| ChaosError::setup("HTTP client", e))?;
    let declared = http
        .post(format!("{base}/v1/workflow-steps/kinds"))
        .bearer_auth(&env.api_key)
        .json(
            &json!({"kinds": [{"kind": ORDER, "inbox": true, "children": true},
                                {"kind": ITEM}]}),
        )
        .send()
        .await
        .map_err(|e| ChaosError::setup("declaring the kinds", e))?;
    if !declared.status().is_success() {
        return Err(ChaosError::setup("declaring the kinds", declared.status()));
    }
    env.workflow_workers = true;
    env.start_workers(cfg.workers, 0)?;

    let book = Arc::new(Book::default());
    let stop = Arc::new(AtomicBool::new(false));
    let driver = tokio::spawn(drive(
        http.clone(),
        base.clone(),
        env.api_key.clone(),
        cfg.rate.max(1),
        book.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(cfg.warmup).await;
    let mut details = Details::new();
    let flow = Flow::new(usize::MAX);
    let events = faults::inject(fault, env, cfg.duration, &flow, &mut details).await?;
    tokio::time::sleep(cfg.recovery).await;
    stop.store(true, Ordering::SeqCst);
    let _ = driver.await;
    // Every order's signal and cancel was sent (or given up on): drain.
    let admin = env.connect("chaos-check").await?;
    let deadline = Instant::now() + cfg.drain_timeout;
    let (mut last, mut progress) = (i64::MAX, Instant::now());
    let row = loop {
        let row = admin
            .query_one(INVARIANTS, &[])
            .await
            .map_err(ChaosError::db("reading the workflow invariants"))?;
        let active: i64 = row.get("active");
        if active < last {
            (last, progress) = (active, Instant::now());
        }
        if active == 0 || Instant::now() > deadline || progress.elapsed() > DRAIN_STALL {
            break row;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let mut r = WorkflowReport {
        fault: fault.name().into(),
        fault_events: events.len(),
        started: book.started.lock().unwrap_or_else(|e| e.into_inner()).len() as u64,
        signals_sent: book.signals.load(Ordering::SeqCst),
        cancels_sent: book.cancels.load(Ordering::SeqCst),
        done: row.get("done"),
        failed: row.get("failed"),
        cancelled: row.get("cancelled"),
        active: row.get("active"),
        ..WorkflowReport::default()
    };
    for (col, what) in [
        ("outcomes_twice", "claims with two recorded outcomes"),
        (
            "steps_after_cancel",
            "steps recorded after their instance's cancel",
        ),
        ("cancelled_twice", "instances cancelled twice"),
        (
            "done_without_one_signal",
            "done orders that consumed other than one signal",
        ),
        (
            "done_without_three_children",
            "done orders without three done children",
        ),
        (
            "keys_unbalanced",
            "concurrency keys whose slot count is not their holders, or whose step in the picker is not one",
        ),
        ("ended_waiting", "ended instances still among a key's waiters"),
    ] {
        let n: i64 = row.get(col);
        if n > 0 {
            r.violations.push(format!("database: {n} {what}"));
        }
    }
    if r.active > 0 {
        r.violations.push(format!(
            "{} instances never ended (done, failed or cancelled)",
            r.active
        ));
    }
    details.insert(
        "steps_recorded".into(),
        json!(row.get::<_, i64>("steps_recorded")),
    );
    check_ledgers(env.dir.path(), &mut r);
    details.append(&mut r.details);
    details.insert(
        "driver_errors".into(),
        json!(*book.errors.lock().unwrap_or_else(|e| e.into_inner())),
    );
    r.details = details;
    if r.started == 0 {
        r.violations.push("no order was started".into());
    }
    r.passed = r.violations.is_empty();
    Ok(r)
}

/// Starts orders at `rate` per second until `stop`; each gets its signal (by correlation
/// key, after a random delay: before or after its await) and a tenth get a cancel.
async fn drive(
    http: reqwest::Client,
    base: String,
    key: String,
    rate: u64,
    book: Arc<Book>,
    stop: Arc<AtomicBool>,
) {
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tasks = Vec::new();
    let mut n = 0u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let (http, base, key, book) = (http.clone(), base.clone(), key.clone(), book.clone());
        tasks.push(tokio::spawn(async move {
            order(&http, &base, &key, n, &book).await;
        }));
        n += 1;
        next += every;
        let now = Instant::now();
        if next > now {
            tokio::time::sleep(next - now).await;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// POSTs until an answer other than a 5xx or a transport error (a fault is under way), for
/// at most a minute; returns the status and body.
async fn post(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    body: &Value,
    book: &Book,
) -> Option<(u16, Value)> {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        match http.post(url).bearer_auth(key).json(body).send().await {
            Ok(r) if !r.status().is_server_error() => {
                let s = r.status().as_u16();
                return Some((s, r.json().await.unwrap_or(Value::Null)));
            }
            Ok(r) => book.error(format!("{url}: {}", r.status().as_u16())),
            Err(_) => book.error(format!("{url}: transport")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn order(http: &reqwest::Client, base: &str, key: &str, n: u64, book: &Book) {
    let corr = format!("o-{n}");
    // Orders share four round_robin concurrency keys (limit 3): the faults hit keys' slots,
    // waiters and the one step per key in the picker too (wf_invariants.sql checks them).
    let start = json!({"kind": ORDER, "queue": QUEUE, "input": n, "correlation_key": corr,
                       "max_attempts": 1000, "concurrency_key": format!("acct-{}", n % 4),
                       "concurrency_limit": 3, "concurrency_strategy": "round_robin"});
    let Some((s, b)) = post(http, &format!("{base}/v1/workflows"), key, &start, book).await else {
        return;
    };
    let Some(id) = b["id"].as_i64().filter(|_| s == 200 || s == 201) else {
        book.error(format!("start: {s}"));
        return;
    };
    book.started
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(id);
    let (delay, cancel_after) = {
        let mut rng = rand::thread_rng();
        (
            rng.gen_range(0..300),
            rng.gen_bool(CANCEL_SHARE).then(|| rng.gen_range(0..400)),
        )
    };
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let signal = json!({"queue": QUEUE, "correlation_key": corr, "name": "paid",
                        "payload": {"n": n}});
    match post(
        http,
        &format!("{base}/v1/workflows/signal"),
        key,
        &signal,
        book,
    )
    .await
    {
        Some((200, _)) => {
            book.signals.fetch_add(1, Ordering::SeqCst);
        }
        Some((s, _)) => book.error(format!("signal: {s}")),
        None => {}
    }
    if let Some(ms) = cancel_after {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let url = format!("{base}/v1/workflows/{id}/cancel");
        if let Some((200, _)) = post(http, &url, key, &Value::Null, book).await {
            book.cancels.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A claimed step as a worker's ledger shows it.
struct Claimed {
    kind: String,
    step: String,
    inbox: Vec<i64>,
    children: Vec<i64>,
}

/// The workers' ledgers: no claim with two applied outcomes, no signal in the inbox of two
/// applied steps, no child in the join of two applied steps, no parent resumed twice.
fn check_ledgers(dir: &std::path::Path, r: &mut WorkflowReport) {
    let mut claimed: HashMap<(String, i64, i64), Claimed> = HashMap::new();
    // Claims of a step whose earlier claim's lease lapsed (its worker was killed mid-step).
    let mut again = 0u64;
    let mut answers = Vec::new();
    let Ok(dir) = std::fs::read_dir(dir) else {
        r.violations
            .push("the run's directory is unreadable".into());
        return;
    };
    for f in dir.flatten() {
        if f.path().extension().and_then(|e| e.to_str()) != Some("ledger") {
            continue;
        }
        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
        // A SIGKILL may cut the last line: only whole lines count.
        for line in text.lines().filter(|l| l.ends_with('}')) {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let worker = v["worker"].as_str().unwrap_or_default().to_string();
            let (id, seq) = (
                v["id"].as_i64().unwrap_or(0),
                v["seq"].as_i64().unwrap_or(0),
            );
            let ids = |k: &str| -> Vec<i64> {
                v[k].as_array()
                    .map(|a| a.iter().filter_map(Value::as_i64).collect())
                    .unwrap_or_default()
            };
            match v["t"].as_str() {
                Some("start") => {
                    r.steps_claimed += 1;
                    if v["attempt"].as_i64().unwrap_or(1) > 1 {
                        again += 1;
                    }
                    claimed.insert(
                        (worker, id, seq),
                        Claimed {
                            kind: v["kind"].as_str().unwrap_or_default().into(),
                            step: v["step"].as_str().unwrap_or_default().into(),
                            inbox: ids("inbox"),
                            children: ids("children"),
                        },
                    );
                }
                Some("answer") => answers.push((worker, id, seq, v["result"].clone())),
                _ => {}
            }
        }
    }
    let mut applied: HashMap<(i64, i64), u64> = HashMap::new();
    let mut signals: HashMap<i64, u64> = HashMap::new();
    let mut children: HashMap<i64, u64> = HashMap::new();
    let mut resumed: HashMap<i64, u64> = HashMap::new();
    for (worker, id, seq, result) in answers {
        match result.as_str() {
            Some("applied") => r.applied += 1,
            Some("stale") => {
                r.stale += 1;
                continue;
            }
            Some("cancelled") => {
                r.answered_cancelled += 1;
                continue;
            }
            _ => continue,
        }
        *applied.entry((id, seq)).or_default() += 1;
        if let Some(c) = claimed.get(&(worker, id, seq)) {
            for s in &c.inbox {
                *signals.entry(*s).or_default() += 1;
            }
            for ch in &c.children {
                *children.entry(*ch).or_default() += 1;
            }
            if c.kind == ORDER && c.step == "ship" {
                *resumed.entry(id).or_default() += 1;
            }
        }
    }
    for (n, what) in [
        (
            twice(applied.values()),
            "claims whose outcome was applied twice",
        ),
        (
            twice(signals.values()),
            "signals consumed by two applied steps",
        ),
        (
            twice(children.values()),
            "children joined by two applied steps",
        ),
        (
            twice(resumed.values()),
            "parents resumed twice by their join",
        ),
    ] {
        if n > 0 {
            r.violations.push(format!("ledger: {n} {what}"));
        }
    }
    r.details.insert("claimed_again".into(), json!(again));
    r.details
        .insert("signals_consumed".into(), json!(signals.len()));
    r.details
        .insert("children_joined".into(), json!(children.len()));
}

fn twice<'a>(counts: impl Iterator<Item = &'a u64>) -> usize {
    counts.filter(|n| **n > 1).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(dir: &std::path::Path, name: &str, lines: &[Value]) {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn start(worker: &str, id: i64, seq: i64, step: &str, inbox: &[i64], kids: &[i64]) -> Value {
        json!({"t": "start", "worker": worker, "id": id, "seq": seq, "attempt": 1,
               "kind": ORDER, "step": step, "inbox": inbox, "children": kids})
    }

    fn answer(worker: &str, id: i64, seq: i64, result: &str) -> Value {
        json!({"t": "answer", "worker": worker, "id": id, "seq": seq, "result": result})
    }

    #[test]
    fn a_balanced_ledger_passes_and_each_double_is_named() {
        let dir = tempfile::tempdir().unwrap();
        ledger(
            dir.path(),
            "worker-0.ledger",
            &[
                start("a", 1, 1, "pack", &[10], &[]),
                answer("a", 1, 1, "applied"),
                start("a", 1, 2, "ship", &[], &[5, 6, 7]),
                answer("a", 1, 2, "applied"),
                // A lapsed claim answered stale.
                start("a", 2, 1, "pack", &[11], &[]),
                answer("a", 2, 1, "stale"),
            ],
        );
        let mut r = WorkflowReport::default();
        check_ledgers(dir.path(), &mut r);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!((r.applied, r.stale, r.steps_claimed), (2, 1, 3));

        // Another worker got the same claims and signal, and had its outcomes applied too.
        ledger(
            dir.path(),
            "worker-1.ledger",
            &[
                start("b", 1, 1, "pack", &[10], &[]),
                answer("b", 1, 1, "applied"),
                start("b", 3, 2, "ship", &[], &[7]),
                answer("b", 3, 2, "applied"),
                start("b", 1, 2, "ship", &[], &[]),
                answer("b", 1, 2, "applied"),
            ],
        );
        let mut r = WorkflowReport::default();
        check_ledgers(dir.path(), &mut r);
        let all = r.violations.join("; ");
        for what in [
            "2 claims whose outcome was applied twice",
            "1 signals consumed by two applied steps",
            "1 children joined by two applied steps",
            "1 parents resumed twice",
        ] {
            assert!(all.contains(what), "{what} missing from {all}");
        }
    }
}
