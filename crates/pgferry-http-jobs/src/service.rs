//! The server's HTTP job service: every server runs it (claims are safe to share). It
//! finds the queues named `http` (one per tenant, through the tenant namespace) every few
//! seconds and keeps one pipeline per queue claiming and running their jobs
//! ([`crate::pipeline`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::Engine;
use tokio::sync::watch;

use crate::executor::{Executor, ExecutorConfig};
use crate::pipeline;
use crate::transitions::{NoSink, TransitionSink};
use crate::worker::{HttpWorker, WorkerConfig};

const HTTP_QUEUES: &str = include_str!("../sql/http_queues.sql");

/// How often new `http` queues are looked for.
const DISCOVER: Duration = Duration::from_secs(2);

/// Runs until `stop` turns true; destination transitions go to the table only.
pub async fn run(
    engine: Arc<Engine>,
    executor: ExecutorConfig,
    config: WorkerConfig,
    stop: watch::Receiver<bool>,
) {
    run_with_sink(engine, executor, config, Arc::new(NoSink), stop).await
}

/// Runs until `stop` turns true; destination transitions also go to `sink`.
pub async fn run_with_sink(
    engine: Arc<Engine>,
    executor: ExecutorConfig,
    config: WorkerConfig,
    sink: Arc<dyn TransitionSink>,
    mut stop: watch::Receiver<bool>,
) {
    let executor = match Executor::new(executor) {
        Ok(e) => Arc::new(e),
        Err(e) => {
            tracing::error!(error = %e, "HTTP job executor cannot start");
            return;
        }
    };
    let worker = Arc::new(HttpWorker::with_sink(
        engine.clone(),
        executor,
        config,
        sink,
    ));
    let mut running: HashSet<String> = HashSet::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        match queues(&engine).await {
            Ok(found) => {
                for q in found {
                    if running.insert(q.clone()) {
                        tasks.spawn(pipeline::run_queue(worker.clone(), q, stop.clone()));
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "HTTP job queues not listed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(DISCOVER) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    // Each pipeline finishes its requests in flight (within its grace) and writes their
    // outcomes; a pipeline stuck past that is stopped.
    let grace = pipeline::SHUTDOWN_GRACE + Duration::from_secs(5);
    if tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tasks.shutdown().await;
    }
}

async fn queues(engine: &Engine) -> pgferry_core::Result<Vec<String>> {
    let client = engine.pool().get().await?;
    let rows = client.query(HTTP_QUEUES, &[]).await?;
    Ok(rows.iter().map(|r| r.get("name")).collect())
}
