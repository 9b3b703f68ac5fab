//! The body of `pgferry chaos-worker --workflows`: an HTTP workflow worker in its own
//! process (so that the suite's SIGKILL is a real one) running the suite's machines. Every
//! claimed step and every answer to an outcome is appended to its ledger file (one JSON line,
//! one `write(2)`) before anything else happens with it.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::{json, Value};

use crate::ledger::now_us;
use crate::worker_proc::WorkerArgs;

/// Kinds of the suite's machines.
pub const ORDER: &str = "chaos-order";
pub const ITEM: &str = "chaos-item";
/// Children per order.
pub const ITEMS: usize = 3;
/// Lease of a claimed step: a killed worker's steps run again soon after.
const LEASE_MS: u64 = 2000;

struct Ledger(std::fs::File);

impl Ledger {
    fn open(path: &Path) -> std::io::Result<Ledger> {
        Ok(Ledger(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ))
    }

    fn append(&self, v: &Value) {
        let mut line = v.to_string();
        line.push('\n');
        if let Err(e) = (&self.0).write_all(line.as_bytes()) {
            eprintln!("chaos-worker: writing the ledger: {e}");
            std::process::exit(3);
        }
    }
}

/// What the machines answer to a step.
fn outcome_of(step: &Value) -> Value {
    let kind = step["kind"].as_str().unwrap_or_default();
    let name = step["step"].as_str().unwrap_or_default();
    match (kind, name) {
        (ORDER, "start") => {
            json!({"outcome": "next", "step": "pay", "state": {"n": step["input"]}})
        }
        (ORDER, "pay") => {
            json!({"outcome": "await", "signals": ["paid"], "step": "pack", "timeout_ms": 120_000})
        }
        (ORDER, "pack") if step["wake"] == "signal" => json!({
            "outcome": "spawn", "step": "ship", "join": "all",
            "children": (0..ITEMS).map(|i| json!({"kind": ITEM, "input": i})).collect::<Vec<_>>(),
        }),
        (ORDER, "pack") => json!({"outcome": "fail", "reason": "not paid in time"}),
        (ORDER, "ship") => json!({"outcome": "done", "result": {"items": ITEMS}}),
        (ITEM, "start") => json!({"outcome": "sleep", "for_ms": 5, "step": "end"}),
        (ITEM, "end") => json!({"outcome": "done", "result": step["input"]}),
        _ => json!({"outcome": "fail", "reason": format!("no step {kind}:{name}")}),
    }
}

/// Works until killed (or SIGTERM/SIGINT).
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let ledger = Arc::new(Ledger::open(&args.ledger)?);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut tasks = Vec::new();
    for slot in 0..args.slots.clamp(1, 16) {
        let (http, ledger, args) = (http.clone(), ledger.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            let worker = format!("{}-{slot}", args.worker_id);
            loop {
                let claimed = http
                    .post(format!("{}/v1/workflow-steps/claim", args.http_url))
                    .bearer_auth(&args.api_key)
                    .json(&json!({"queue": args.queue, "max": 8, "worker": worker,
                                  "lease_ms": LEASE_MS}))
                    .send()
                    .await;
                let steps = match claimed {
                    Ok(r) if r.status().is_success() => match r.json::<Value>().await {
                        Ok(b) => b["steps"].as_array().cloned().unwrap_or_default(),
                        Err(_) => Vec::new(),
                    },
                    _ => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if steps.is_empty() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                for step in steps {
                    run_step(&http, &args, &ledger, &worker, &step).await;
                }
            }
        }));
    }
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

async fn run_step(
    http: &reqwest::Client,
    args: &WorkerArgs,
    ledger: &Ledger,
    worker: &str,
    step: &Value,
) {
    let ids = |v: &Value, key: &str| -> Vec<i64> {
        v.as_array()
            .map(|a| a.iter().filter_map(|x| x[key].as_i64()).collect())
            .unwrap_or_default()
    };
    ledger.append(&json!({
        "t": "start", "at": now_us(), "worker": worker, "id": step["id"], "seq": step["seq"],
        "attempt": step["attempt"], "kind": step["kind"], "step": step["step"],
        "wake": step["wake"], "inbox": ids(&step["inbox"], "signal_id"),
        "children": ids(&step["children"], "id"),
    }));
    let ms = rand::thread_rng().gen_range(0..=args.work_ms.max(1));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let mut outcome = outcome_of(step);
    let name = outcome["outcome"].clone();
    outcome["token"] = step["token"].clone();
    // A lost answer is sent again: a recorded outcome answers stale the second time.
    for _ in 0..20 {
        let sent = http
            .post(format!("{}/v1/workflow-steps/outcome", args.http_url))
            .bearer_auth(&args.api_key)
            .json(&outcome)
            .send()
            .await;
        if let Ok(r) = sent {
            if r.status().is_success() {
                if let Ok(b) = r.json::<Value>().await {
                    ledger.append(&json!({
                        "t": "answer", "at": now_us(), "worker": worker, "id": step["id"],
                        "seq": step["seq"], "outcome": name, "result": b["result"],
                    }));
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
