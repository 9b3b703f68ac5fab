//! The clients of the scheduler suite, all over the public HTTP API of the server under
//! test, each writing what it was told into the suite's book:
//!
//! - a producer of HTTP jobs (`Idempotency-Key` per job, resent after an ambiguous failure
//!   like a careful user), 1 in 10 meant to die (`/fail`, one attempt);
//! - a sender of inbound webhook events (`x-event-id` per event, resent until a 2xx: the
//!   provider's retry, which the endpoint's dedup answers);
//! - one pinger per heartbeat monitor (a POST every [`PING_EVERY`] with a body naming the
//!   ping, not resent).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::ledger::now_us;

/// How often each monitor is pinged.
pub const PING_EVERY: Duration = Duration::from_millis(500);
/// How long one item is resent after ambiguous failures before it is given up.
const RESEND_FOR: Duration = Duration::from_secs(45);
const RESEND_PAUSE: Duration = Duration::from_millis(250);
/// Items of one client in flight at once.
const IN_FLIGHT: usize = 16;
/// Every this many HTTP jobs, one is meant to die.
pub const FAIL_EVERY: u64 = 10;

/// An HTTP job whose creation was acknowledged.
#[derive(Debug, Clone)]
pub struct AckedJob {
    pub n: u64,
    pub id: i64,
    pub meant_to_fail: bool,
}

/// What the suite's clients were told.
#[derive(Default)]
pub struct Told {
    pub jobs_sent: u64,
    pub jobs: Vec<AckedJob>,
    /// Creates answered from their idempotency key (an earlier attempt had committed).
    pub jobs_replayed: u64,
    pub events_sent: u64,
    /// Acknowledged events: provider id → stored event id.
    pub events: BTreeMap<String, i64>,
    /// Events whose 2xx said `duplicate` (an earlier, unanswered attempt had committed).
    pub events_deduplicated: u64,
    /// Acknowledged pings per monitor: (body, when acknowledged, µs).
    pub pings: BTreeMap<String, Vec<(String, u64)>>,
    pub pings_sent: u64,
    /// Items given up on, by kind.
    pub given_up: BTreeMap<&'static str, u64>,
    /// Errors seen (each resend's), by kind.
    pub errors: BTreeMap<String, u64>,
}

pub type Book = Arc<Mutex<Told>>;

pub fn lock(book: &Book) -> std::sync::MutexGuard<'_, Told> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

/// The server's public API as one client sees it.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub key: String,
}

impl Api {
    /// One request; `Err` is a transport failure (the answer, if any, is unknown).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.map_err(describe)?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(describe)?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }
}

fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        "transport".into()
    }
}

fn error(book: &Book, what: &str, kind: impl std::fmt::Display) {
    *lock(book)
        .errors
        .entry(format!("{what}: {kind}"))
        .or_default() += 1;
}

/// Runs `each(n)` at `rate` per second until `stop`, at most [`IN_FLIGHT`] at once (a
/// slow server slows the clients down instead of drowning in their resends), then waits
/// for all of them.
async fn paced<F, Fut>(rate: u64, stop: Arc<AtomicBool>, each: F)
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let every = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let room = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::new();
    let mut next = Instant::now();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let Ok(permit) = room.clone().acquire_owned().await else {
            break;
        };
        let item = each(n);
        tasks.push(tokio::spawn(async move {
            item.await;
            drop(permit);
        }));
        n += 1;
        next += every;
        let now = Instant::now();
        if next > now {
            tokio::time::sleep(next - now).await;
        } else {
            next = now;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Creates HTTP jobs to `target` at `rate` per second until `stop`.
pub async fn produce_jobs(api: Api, target: String, rate: u64, book: Book, stop: Arc<AtomicBool>) {
    paced(rate, stop, move |n| {
        let (api, target, book) = (api.clone(), target.clone(), book.clone());
        async move { create_job(&api, &target, n, &book).await }
    })
    .await;
}

async fn create_job(api: &Api, target: &str, n: u64, book: &Book) {
    let fail = n % FAIL_EVERY == FAIL_EVERY - 1;
    let path = if fail { "fail" } else { "job" };
    let body = json!({
        "queue": "http", "kind": "http",
        "max_attempts": if fail { 1 } else { 25 },
        "args": {"method": "POST", "url": format!("{target}/{path}/{n}"), "body": n.to_string(),
                 "timeout_ms": 5000, "callback_url": format!("{target}/cb")},
    });
    lock(book).jobs_sent += 1;
    let until = Instant::now() + RESEND_FOR;
    while Instant::now() < until {
        let sent = api
            .http
            .post(format!("{}/v1/jobs", api.base))
            .bearer_auth(&api.key)
            .header("idempotency-key", format!("chaos-job-{n}"))
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => {
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                let Some(id) = v["job_id"].as_i64() else {
                    error(book, "job create", "answer without job_id");
                    break;
                };
                let mut b = lock(book);
                if v["replayed"].as_bool().unwrap_or(false) {
                    b.jobs_replayed += 1;
                }
                b.jobs.push(AckedJob {
                    n,
                    id,
                    meant_to_fail: fail,
                });
                return;
            }
            Ok(resp) => error(book, "job create", resp.status().as_u16()),
            Err(e) => error(book, "job create", describe(e)),
        }
        tokio::time::sleep(RESEND_PAUSE).await;
    }
    *lock(book).given_up.entry("job").or_default() += 1;
}

/// Posts inbound webhook events to `address` at `rate` per second until `stop`.
pub async fn send_events(api: Api, address: String, rate: u64, book: Book, stop: Arc<AtomicBool>) {
    paced(rate, stop, move |n| {
        let (api, address, book) = (api.clone(), address.clone(), book.clone());
        async move { send_event(&api, &address, n, &book).await }
    })
    .await;
}

async fn send_event(api: &Api, address: &str, n: u64, book: &Book) {
    let id = format!("evt-{n}");
    lock(book).events_sent += 1;
    let until = Instant::now() + RESEND_FOR;
    while Instant::now() < until {
        let sent = api
            .http
            .post(format!("{}{address}", api.base))
            .header("content-type", "application/json")
            .header("x-event-id", &id)
            .body(json!({"n": n}).to_string())
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => {
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                let Some(event) = v["event_id"].as_i64() else {
                    error(book, "event", "answer without event_id");
                    break;
                };
                let mut b = lock(book);
                if v["duplicate"].as_bool().unwrap_or(false) {
                    b.events_deduplicated += 1;
                }
                b.events.insert(id, event);
                return;
            }
            Ok(resp) => error(book, "event", resp.status().as_u16()),
            Err(e) => error(book, "event", describe(e)),
        }
        tokio::time::sleep(RESEND_PAUSE).await;
    }
    *lock(book).given_up.entry("event").or_default() += 1;
}

/// Pings monitor `name` at `ping_path` every [`PING_EVERY`] until `stop`.
pub async fn ping(api: Api, name: String, ping_path: String, book: Book, stop: Arc<AtomicBool>) {
    let mut k = 0u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let body = format!("{name}-{k}");
        k += 1;
        lock(&book).pings_sent += 1;
        let sent = api
            .http
            .post(format!("{}{ping_path}", api.base))
            .timeout(PING_EVERY * 4)
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => {
                let at = now_us();
                lock(&book)
                    .pings
                    .entry(name.clone())
                    .or_default()
                    .push((body, at));
            }
            Ok(resp) => error(&book, "ping", resp.status().as_u16()),
            Err(e) => error(&book, "ping", describe(e)),
        }
        next += PING_EVERY;
        let now = Instant::now();
        if next > now {
            tokio::time::sleep(next - now).await;
        } else {
            next = now;
        }
    }
}
