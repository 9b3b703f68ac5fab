//! The loopback destination of the scheduler suite: a real HTTP server in the suite's own
//! process (outside the system under test) that records every request it answers, keyed by
//! what identifies the item, before it answers.
//!
//! - `POST /job/{n}`: an HTTP job of the suite (answers 200 after a random delay, so kills
//!   land while requests are in flight);
//! - `POST /fail/{n}`: an HTTP job meant to die (answers 500);
//! - `POST /cb`: a completion callback (`{"job_id", "status"}` in the body);
//! - `POST /fan/{a|b}`: an inbound webhook event fanned out (the provider id header
//!   `x-event-id`);
//! - `POST /alert`: a notification (`{"kind", "subject"}`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rand::Rng;
use serde_json::Value;

use crate::ChaosError;

/// Longest delay before a `/job` or `/fail` answer.
const MAX_DELAY_MS: u64 = 150;

/// What the target received, by item.
#[derive(Default, Clone)]
pub struct Received {
    /// `/job/{n}` and `/fail/{n}` requests by n.
    pub jobs: BTreeMap<u64, u32>,
    /// Callbacks by job id, with each callback's status.
    pub callbacks: BTreeMap<i64, Vec<String>>,
    /// Fanned-out events by (target, provider event id).
    pub fanout: BTreeMap<(String, String), u32>,
    /// Notifications as (kind, subject).
    pub alerts: Vec<(String, String)>,
    /// Requests the target could not read (a body that was not what the suite sends).
    pub unreadable: u64,
}

pub type Book = Arc<Mutex<Received>>;

pub fn lock(book: &Book) -> std::sync::MutexGuard<'_, Received> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the target on a free loopback port; returns its base URL and its book.
pub async fn start() -> Result<(String, Book, tokio::task::JoinHandle<()>), ChaosError> {
    let book: Book = Arc::default();
    let app = axum::Router::new()
        .route("/job/{n}", post(job))
        .route("/fail/{n}", post(fail))
        .route("/cb", post(callback))
        .route("/fan/{to}", post(fanout))
        .route("/alert", post(alert))
        .with_state(book.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| ChaosError::setup("binding the target", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ChaosError::setup("binding the target", e))?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the scheduler suite's target stopped");
        }
    });
    Ok((format!("http://{addr}"), book, task))
}

async fn delay() {
    let ms = rand::thread_rng().gen_range(0..=MAX_DELAY_MS);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn job(State(book): State<Book>, Path(n): Path<u64>) -> StatusCode {
    *lock(&book).jobs.entry(n).or_default() += 1;
    delay().await;
    StatusCode::OK
}

async fn fail(State(book): State<Book>, Path(n): Path<u64>) -> StatusCode {
    *lock(&book).jobs.entry(n).or_default() += 1;
    delay().await;
    StatusCode::INTERNAL_SERVER_ERROR
}

async fn callback(State(book): State<Book>, body: Bytes) -> StatusCode {
    let v: Option<Value> = serde_json::from_slice(&body).ok();
    let parsed = v.as_ref().and_then(|v| {
        Some((
            v["job_id"].as_i64()?,
            v["status"].as_str().unwrap_or("").to_owned(),
        ))
    });
    let mut b = lock(&book);
    match parsed {
        Some((id, status)) => b.callbacks.entry(id).or_default().push(status),
        None => b.unreadable += 1,
    }
    StatusCode::OK
}

async fn fanout(
    State(book): State<Book>,
    Path(to): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let id = headers
        .get("x-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut b = lock(&book);
    match id {
        Some(id) => *b.fanout.entry((to, id)).or_default() += 1,
        None => b.unreadable += 1,
    }
    StatusCode::OK
}

async fn alert(State(book): State<Book>, body: Bytes) -> StatusCode {
    let v: Option<Value> = serde_json::from_slice(&body).ok();
    let parsed = v.as_ref().and_then(|v| {
        Some((
            v["kind"].as_str()?.to_owned(),
            v["subject"].as_str()?.to_owned(),
        ))
    });
    let mut b = lock(&book);
    match parsed {
        Some(a) => b.alerts.push(a),
        None => b.unreadable += 1,
    }
    StatusCode::OK
}
