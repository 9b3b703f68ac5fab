//! The server's HTTP job service: every server runs it (claims are safe to share). It
//! finds the queues named `http` (one per tenant, through the tenant namespace) every few
//! seconds and keeps one loop per queue claiming and running their jobs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::Engine;
use tokio::sync::watch;

use crate::executor::{Executor, ExecutorConfig};
use crate::transitions::{NoSink, TransitionSink};
use crate::worker::{HttpWorker, WorkerConfig};

const HTTP_QUEUES: &str = include_str!("../sql/http_queues.sql");

/// Pause of a queue's loop after a claim found nothing.
const IDLE: Duration = Duration::from_millis(100);
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
                        tasks.spawn(queue_loop(worker.clone(), q, stop.clone()));
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
    tasks.shutdown().await;
}

async fn queues(engine: &Engine) -> pgferry_core::Result<Vec<String>> {
    let client = engine.pool().get().await?;
    let rows = client.query(HTTP_QUEUES, &[]).await?;
    Ok(rows.iter().map(|r| r.get("name")).collect())
}

async fn queue_loop(worker: Arc<HttpWorker>, queue: String, mut stop: watch::Receiver<bool>) {
    loop {
        let pause = match worker.run_once(&queue).await {
            Ok(0) => IDLE,
            Ok(_) => Duration::ZERO,
            Err(e) => {
                tracing::warn!(queue, error = %e, "HTTP job claim failed");
                Duration::from_secs(1)
            }
        };
        if pause.is_zero() {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
