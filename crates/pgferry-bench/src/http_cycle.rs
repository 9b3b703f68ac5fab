//! The full cycle through the server's HTTP API: a pgferry server runs in this process
//! (engine, leader, HTTP on loopback); producers `POST /v1/jobs/batch`, HTTP workers
//! long-poll `POST /v1/workers/claim` and report with `POST /v1/workers/complete`. A job
//! counts only when its completion committed and was not stale.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio_postgres::Config;

use crate::bench_server::{Api, BenchServer, QUEUE};
use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

async fn post(http: &reqwest::Client, url: &str, key: &str, body: &Value) -> anyhow::Result<Value> {
    let resp = http.post(url).bearer_auth(key).json(body).send().await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    anyhow::ensure!(status.is_success(), "{url}: {status} {body}");
    Ok(body)
}

pub async fn run(config: &Config, opts: &BenchOpts) -> anyhow::Result<Report> {
    let server = BenchServer::start(config, opts, Api::Http).await?;
    let (base, key) = (server.url.clone(), server.key.clone());

    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(opts.producers + opts.workers)
        .build()?;
    let counters = Arc::new(Counters::default());
    let payload = crate::payload(opts.payload_bytes);
    let mut tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>> = Vec::new();
    for _ in 0..opts.producers {
        let (http, key, counters) = (http.clone(), key.clone(), counters.clone());
        let url = format!("{base}/v1/jobs/batch");
        let jobs: Vec<Value> = (0..opts.enqueue_batch)
            .map(|_| json!({"queue": QUEUE, "kind": "noop", "args": payload}))
            .collect();
        let body = json!({ "jobs": jobs });
        let mut pace = measure::Pacer::new(opts);
        tasks.push(tokio::spawn(async move {
            while pace.next(&counters).await {
                let sent = std::time::Instant::now();
                let out = post(&http, &url, &key, &body).await?;
                let n = out["job_ids"].as_array().map_or(0, Vec::len);
                counters.add_acked(n as u64, sent);
            }
            Ok(())
        }));
    }
    for w in 0..opts.workers.max(1) {
        let (http, key, counters) = (http.clone(), key.clone(), counters.clone());
        let (claim_url, complete_url) = (
            format!("{base}/v1/workers/claim"),
            format!("{base}/v1/workers/complete"),
        );
        let claim = json!({
            "queue": QUEUE,
            "max": opts.claim_batch.min(1000),
            "worker": format!("bench-http-{w}"),
            "wait_ms": 1000,
        });
        tasks.push(tokio::spawn(async move {
            while counters.running() {
                let got = post(&http, &claim_url, &key, &claim).await?;
                let jobs = got["jobs"].as_array().cloned().unwrap_or_default();
                if jobs.is_empty() {
                    continue;
                }
                counters.record_latencies(jobs.iter().map(|j| {
                    UNIX_EPOCH
                        + Duration::from_micros(j["enqueued_at_unix_us"].as_u64().unwrap_or(0))
                }));
                let results: Vec<Value> = jobs
                    .iter()
                    .map(|j| json!({ "token": j["token"] }))
                    .collect();
                let done = post(&http, &complete_url, &key, &json!({ "results": results })).await?;
                let fresh = done["results"]
                    .as_array()
                    .map_or(0, |r| r.iter().filter(|x| x["stale"] == false).count());
                counters.add_finished(fresh as u64);
            }
            Ok(())
        }));
    }
    let report = measure::window(
        "cycle_http",
        config,
        &counters,
        opts,
        measure::Tables {
            schema: "pgferry",
            pattern: "^(ready|receipts|completions|results|ticks)_[0-9]+$",
        },
        tasks,
    )
    .await;
    server.stop().await;
    report
}
