//! `pgferry bench workflow --via grpc`: the 3-step machine (`next`, `next`, `done`) run by
//! remote workers over the WorkflowWorker stream, beside the same machine run by in-process
//! `Worker`s in the same run (issue 19). A pgferry server runs in this process (engine, gRPC
//! on loopback); `workers` streams each take batches of up to `claim_batch` steps within
//! their credits, answer each batch with one StepOutcomeBatch (credits piggybacked), and a
//! step counts when its StepAck says STEP_APPLIED (after COMMIT).
//!
//! The stream speaks the protocol directly (prost types of `pgferry_client::proto`), as an
//! SDK does: the Rust client has no workflow worker of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pb::workflow_worker_client::WorkflowWorkerClient;
use pb::workflow_worker_request::Msg;
use pb::workflow_worker_response::Msg as Out;
use pgferry_client::proto::v1 as pb;
use pgferry_core::workflow::{ClaimedStep, Machine, Outcome, Workflows};
use pgferry_core::{db, Engine, EngineConfig};
use pgferry_server::auth::{admin, Scopes};
use pgferry_server::grpc::{GrpcConfig, GrpcState};
use pgferry_server::{AppState, ServerConfig};
use serde_json::{json, Value};
use tokio_postgres::Config;

use crate::measure::{self, Counters};
use crate::workflow_load as load;
use crate::BenchOpts;

const SERVER_POOL: usize = 16;

/// In-process and gRPC steps/s of the 3-step machine, one after the other on one database.
pub async fn run(base: &Config, opts: &BenchOpts) -> anyhow::Result<Value> {
    let config = crate::fresh_database(base, "bench_workflow_grpc").await?;
    let mut c = measure::connect(&config, "migrate").await?;
    pgferry_server::migrate::up(&mut c).await?;
    let tenant_id = admin::create_tenant(&mut c, "bench").await?;
    let (_, key) = admin::create_key(&mut c, "bench", Scopes::all(), Some("bench")).await?;
    let key = key.expose().to_string();

    // In process first, on its own queue: the baseline of the same run.
    let pool = db::pool(&config, "bench-wf", opts.workers + 4);
    let wf = Workflows::new(pool.clone());
    let machine = Machine::new("three")
        .step("start", |s: ClaimedStep| async move {
            Outcome::next("two", s.input)
        })
        .step("two", |s: ClaimedStep| async move {
            Outcome::next("three", s.state)
        })
        .step(
            "three",
            |_s: ClaimedStep| async move { Outcome::done(json!(1)) },
        );
    let in_process = crate::workflow::steps_phase(
        &config,
        &wf,
        opts,
        ("three", "bench_inproc", "wf_in_process"),
        machine,
    )
    .await?;
    pool.close();

    let engine = Engine::new(
        db::Pools::new(&config, "api", SERVER_POOL),
        EngineConfig::default(),
    );
    let app = AppState::new(engine.clone(), ServerConfig::default()).await?;
    let grpc = GrpcState::from_app(&app, GrpcConfig::default()).await?;
    let listener = pgferry_server::listen(([127, 0, 0, 1], 0).into())?;
    let url = format!("http://{}", listener.local_addr()?);
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(pgferry_server::grpc::serve_grpc(
        listener,
        grpc,
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));
    let queue = pgferry_server::auth::engine_queue(tenant_id, "wf")?;
    let counters = Arc::new(Counters::default());
    let applied = Arc::new(AtomicU64::new(0));
    let producer = load::producer_on(config.clone(), counters.clone(), "three", queue, opts);
    let mut streams = Vec::new();
    for w in 0..opts.workers.max(1) {
        let (url, key, applied, counters) =
            (url.clone(), key.clone(), applied.clone(), counters.clone());
        let batch = opts.claim_batch.clamp(1, 500) as u32;
        streams.push(tokio::spawn(async move {
            stream_worker(&url, &key, w, batch, &applied, &counters).await
        }));
    }
    let grpc_report = load::window_counted("wf_grpc", &counters, &applied, opts, producer).await?;
    for s in streams {
        s.await??;
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    let in_process_per_s = in_process["steps_per_s"].as_f64().unwrap_or(0.0);
    Ok(json!({
        "options": opts,
        "in_process": in_process,
        "grpc": {
            "steps": grpc_report.jobs,
            "duration_s": grpc_report.duration_s,
            "steps_per_s": grpc_report.jobs_per_s,
            "instances_started_per_s": grpc_report.enqueued_per_s,
            "streams": opts.workers.max(1),
            "max_batch": opts.claim_batch.clamp(1, 500),
        },
        "ratios": {
            "grpc_vs_in_process_steps_per_s": if in_process_per_s > 0.0 { grpc_report.jobs_per_s / in_process_per_s } else { f64::NAN },
        },
    }))
}

/// One WorkflowWorker stream running the 3-step machine until the counters stop.
async fn stream_worker(
    url: &str,
    key: &str,
    w: usize,
    batch: u32,
    applied: &AtomicU64,
    counters: &Counters,
) -> anyhow::Result<()> {
    let mut client = WorkflowWorkerClient::connect(url.to_string()).await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tx.send(pb::WorkflowWorkerRequest {
        msg: Some(Msg::Hello(pb::WorkflowHello {
            api_key: key.to_string(),
            worker_id: format!("bench-grpc-{w}"),
            queues: vec!["wf".into()],
            lease_ms: 60_000,
            max_batch: batch,
            kinds: vec![],
        })),
    })?;
    tx.send(pb::WorkflowWorkerRequest {
        msg: Some(Msg::Credit(pb::StepCredit { n: batch })),
    })?;
    let requests =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut rx = client.stream(requests).await?.into_inner();
    while counters.running() {
        let msg = match tokio::time::timeout(Duration::from_millis(100), rx.message()).await {
            Ok(Ok(Some(m))) => m.msg,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => continue,
        };
        match msg {
            Some(Out::Steps(b)) => {
                let n = b.steps.len() as u32;
                let outcomes = b
                    .steps
                    .into_iter()
                    .map(|s| {
                        let (outcome, step) = match s.step.as_str() {
                            "start" => ("next", Some("two".to_string())),
                            "two" => ("next", Some("three".to_string())),
                            _ => ("done", None),
                        };
                        pb::StepOutcome {
                            r#ref: s.r#ref,
                            outcome: outcome.into(),
                            step,
                            result: (outcome == "done").then(|| "1".to_string()),
                            ..Default::default()
                        }
                    })
                    .collect();
                tx.send(pb::WorkflowWorkerRequest {
                    msg: Some(Msg::Outcomes(pb::StepOutcomeBatch {
                        outcomes,
                        credit: n,
                    })),
                })?;
            }
            Some(Out::Acks(a)) => {
                let n = a
                    .acks
                    .iter()
                    .filter(|k| k.result == pb::StepResult::StepApplied as i32)
                    .count() as u64;
                applied.fetch_add(n, Ordering::Relaxed);
                counters.add_finished(n);
            }
            _ => {}
        }
    }
    Ok(())
}
