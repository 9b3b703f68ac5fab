//! Producers: tasks that enqueue batches through the real server, over HTTP (reqwest) or
//! gRPC (pgferry-client), and write what they were told into the [`ProducerLedger`].
//!
//! Producers retry like a careful user: a batch carries an idempotency key (HTTP
//! `Idempotency-Key`, gRPC `EnqueueBatch.idempotency_key`) and is resent with it after an
//! ambiguous failure (a transport error, a 5xx, a broken stream), up to 6 attempts, moving
//! to the next server each time (pgferry-client also retries on its own stream). A batch
//! given up on is
//! unacknowledged; if it was committed anyway ("ghost commit") the checker sees its jobs
//! executed under ids nobody was given.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgferry_client::{JobSpec, Producer};
use serde_json::json;

use crate::env::QUEUE;
use crate::ledger::ProducerLedger;

/// Each HTTP request (a restarting Postgres makes some wait for a new connection).
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause after an error before the next batch (and a switch to the next server).
const ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Attempts of one batch (same idempotency key) after ambiguous failures.
const ATTEMPTS: u32 = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Http,
    Grpc,
}

/// What all producers share.
pub struct Flow {
    pub ledger: ProducerLedger,
    pub stop: AtomicBool,
    /// Completions seen in the workers' ledgers (kept current by the scenario).
    pub completed: AtomicU64,
    pub max_backlog: usize,
}

impl Flow {
    pub fn new(max_backlog: usize) -> Arc<Flow> {
        Arc::new(Flow {
            ledger: ProducerLedger::default(),
            stop: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            max_backlog,
        })
    }

    fn backlog(&self) -> usize {
        self.ledger
            .acked_count()
            .saturating_sub(self.completed.load(Ordering::Relaxed) as usize)
    }
}

/// One producer's plan.
#[derive(Clone)]
pub struct ProducerPlan {
    pub transport: Transport,
    /// Servers to use, in order; the producer moves to the next after an error.
    pub urls: Vec<String>,
    pub api_key: String,
    pub batch: usize,
    /// Jobs per second this producer aims for; 0: as fast as the server answers.
    pub rate: f64,
    /// Send an idempotency key with each batch and resend after ambiguous failures; without,
    /// a failed batch is abandoned at once (issue 17's producers: plain HTTP batches).
    pub idempotent: bool,
}

/// Runs until `flow.stop`.
pub async fn run(plan: ProducerPlan, flow: Arc<Flow>, n: usize) {
    let start = Instant::now();
    let mut sent_jobs = 0u64;
    let mut server = n % plan.urls.len().max(1);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(HTTP_TIMEOUT)
        .build()
        .expect("HTTP client");
    let mut grpc: Option<Producer> = None;
    let mut seq = 0u64;
    while !flow.stop.load(Ordering::Relaxed) {
        if flow.backlog() > flow.max_backlog {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        if plan.rate > 0.0 {
            let due = start + Duration::from_secs_f64(sent_jobs as f64 / plan.rate);
            let now = Instant::now();
            if due > now {
                tokio::time::sleep(due - now).await;
            }
        }
        seq += 1;
        flow.ledger.sent(plan.batch);
        sent_jobs += plan.batch as u64;
        // One idempotency key per batch, for every attempt on every server.
        let key = plan
            .idempotent
            .then(|| format!("chaos-{n}-{seq}-{:08x}", rand::random::<u32>()));
        let key = key.as_deref();
        let attempts = if plan.idempotent { ATTEMPTS } else { 1 };
        let mut pause = ERROR_PAUSE;
        let mut attempt = 1;
        let result = loop {
            let url = &plan.urls[server];
            let one = match plan.transport {
                Transport::Http => {
                    http_batch(&http, url, &plan.api_key, key, plan.batch, n, seq).await
                }
                Transport::Grpc => {
                    grpc_batch(&mut grpc, url, &plan.api_key, key, plan.batch, n, seq).await
                }
            };
            match one {
                Ok((ids, replayed)) => {
                    if replayed {
                        flow.ledger.replayed();
                    }
                    break Ok(ids);
                }
                // Ambiguous (the batch may have committed): the same key again, on the
                // next server, after a pause.
                Err(kind) if attempt < attempts && ambiguous(&kind) => {
                    flow.ledger.error(kind);
                    grpc = None;
                    server = (server + 1) % plan.urls.len();
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                    attempt += 1;
                }
                Err(kind) => break Err(kind),
            }
        };
        match result {
            Ok(ids) => flow.ledger.acked(&ids),
            Err(kind) => {
                flow.ledger.error(kind);
                flow.ledger.abandoned();
                grpc = None;
                server = (server + 1) % plan.urls.len();
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

/// An error after which the batch may or may not have been committed.
fn ambiguous(kind: &str) -> bool {
    kind.starts_with("http transport")
        || kind.starts_with("http 5")
        || kind.starts_with("grpc connect")
        || kind.starts_with("grpc disconnected")
        || kind.starts_with("grpc unavailable")
        || kind == "grpc refused: Unavailable"
}

/// One attempt of a batch with its idempotency key; the ids, and whether the server
/// answered from the key (an earlier attempt had committed).
async fn http_batch(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    idempotency_key: Option<&str>,
    batch: usize,
    producer: usize,
    seq: u64,
) -> Result<(Vec<i64>, bool), String> {
    let jobs: Vec<_> = (0..batch)
        .map(
            |i| json!({"queue": QUEUE, "kind": "chaos", "args": {"p": producer, "b": seq, "i": i}}),
        )
        .collect();
    let mut req = http
        .post(format!("{url}/v1/jobs/batch"))
        .bearer_auth(key)
        .json(&json!({ "jobs": jobs }));
    if let Some(k) = idempotency_key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.map_err(|e| transport_kind(&e))?;
    let status = resp.status().as_u16();
    let replayed = resp.headers().contains_key("idempotent-replayed");
    let body: serde_json::Value = resp
        .json()
        .await
        .map_err(|e| format!("http {status}: {}", transport_kind(&e)))?;
    if !(200..300).contains(&status) {
        let code = body["error"]["code"].as_str().unwrap_or("?");
        return Err(format!("http {status} {code}"));
    }
    let ids: Option<Vec<i64>> = body["job_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect());
    match ids {
        Some(ids) if ids.len() == batch => Ok((ids, replayed)),
        _ => Err(format!("http {status}: answer without {batch} job_ids")),
    }
}

/// One attempt of a batch with its idempotency key over gRPC (the client also retries
/// ambiguous failures on its own stream before giving up).
async fn grpc_batch(
    producer: &mut Option<Producer>,
    url: &str,
    key: &str,
    idempotency_key: Option<&str>,
    batch: usize,
    n: usize,
    seq: u64,
) -> Result<(Vec<i64>, bool), String> {
    if producer.is_none() {
        *producer = Some(
            Producer::connect(url, key)
                .await
                .map_err(|e| grpc_kind(&e))?,
        );
    }
    let p = producer.as_ref().expect("connected");
    let jobs = (0..batch)
        .map(|i| JobSpec::new(QUEUE, "chaos", &json!({"p": n, "b": seq, "i": i})))
        .collect();
    let (ids, replayed) = match idempotency_key {
        Some(k) => {
            let ack = p
                .enqueue_batch_keyed(k, jobs)
                .await
                .map_err(|e| grpc_kind(&e))?;
            (ack.ids, ack.replayed)
        }
        // The client still keys its own retries on its stream.
        None => (
            p.enqueue_batch(jobs).await.map_err(|e| grpc_kind(&e))?,
            false,
        ),
    };
    if ids.len() != batch {
        return Err(format!("grpc: answer with {} of {batch} ids", ids.len()));
    }
    Ok((ids, replayed))
}

/// A short, stable name for a transport error (counts group by it).
fn transport_kind(e: &reqwest::Error) -> String {
    let what = if e.is_connect() {
        "connect"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    };
    format!("http transport: {what}")
}

fn grpc_kind(e: &pgferry_client::Error) -> String {
    use pgferry_client::Error as E;
    match e {
        E::Connect { .. } => "grpc connect".to_owned(),
        E::Refused(status) => format!("grpc refused: {:?}", status.code()),
        E::Api { code, .. } => format!("grpc {code}"),
        E::Disconnected => "grpc disconnected (outcome unknown)".to_owned(),
    }
}
