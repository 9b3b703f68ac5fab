//! Failure and recovery of destinations: per (tenant, destination key) — host:port, or the
//! job's `group` — the last attempt outcome is kept in `pgferry_http.destinations`; the
//! first failed attempt after a success (or on a destination never seen) is a `failure`,
//! the first success after failures a `recovery`. Each is recorded in
//! `pgferry_http.transitions` (listed by `GET /v1/http-jobs/transitions`) and handed to the
//! server's [`TransitionSink`] (no-op by default; the server wires notifications to it).
//!
//! The worker remembers the last outcome it saw per key, so steady destinations cost no
//! writes: the database is asked only when an outcome differs from the remembered one (and
//! the database's answer decides, so several servers agree on one transition).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use pgferry_core::{Engine, Result};
use serde::Serialize;

const DESTINATION_SET: &str = include_str!("../sql/destination_set.sql");
const TRANSITION_INSERT: &str = include_str!("../sql/transition_insert.sql");
const TRANSITIONS_LIST: &str = include_str!("../sql/transitions_list.sql");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Failure,
    Recovery,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Failure => "failure",
            Kind::Recovery => "recovery",
        }
    }

    fn parse(s: &str) -> Kind {
        if s == "recovery" {
            Kind::Recovery
        } else {
            Kind::Failure
        }
    }
}

/// One transition of a destination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub id: i64,
    pub tenant_id: i64,
    pub destination: String,
    pub kind: Kind,
    /// The job whose attempt changed the state.
    pub job_id: i64,
    /// The response status of that attempt, if there was a response.
    pub status: Option<u16>,
    pub error: Option<String>,
    #[serde(skip)]
    pub at: SystemTime,
}

/// Where transitions go besides the table (notifications). Called after the row is
/// committed; a slow sink delays only its own task.
pub trait TransitionSink: Send + Sync {
    fn transition(&self, t: Transition) -> BoxFuture<'static, ()>;
}

/// The default sink: the table only.
pub struct NoSink;

impl TransitionSink for NoSink {
    fn transition(&self, _t: Transition) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// An attempt's outcome as transitions see it.
#[derive(Debug, Clone)]
pub struct Observed {
    pub tenant_id: i64,
    pub destination: String,
    pub ok: bool,
    pub job_id: i64,
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// Detects transitions (shared by a server's queue loops).
pub struct Transitions {
    engine: Arc<Engine>,
    sink: Arc<dyn TransitionSink>,
    last: Mutex<HashMap<(i64, String), bool>>,
}

impl Transitions {
    pub fn new(engine: Arc<Engine>, sink: Arc<dyn TransitionSink>) -> Transitions {
        Transitions {
            engine,
            sink,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Records an outcome; returns the transition it made, if any.
    pub async fn observe(&self, o: Observed) -> Result<Option<Transition>> {
        let key = (o.tenant_id, o.destination.clone());
        if self.last.lock().expect("not poisoned").get(&key) == Some(&o.ok) {
            return Ok(None);
        }
        let client = self.engine.pool().get().await?;
        let row = client
            .query_one(DESTINATION_SET, &[&o.tenant_id, &o.destination, &o.ok])
            .await?;
        self.last.lock().expect("not poisoned").insert(key, o.ok);
        let before: Option<bool> = row.get("before");
        // Never seen counts as healthy: a new destination that fails is news, one that
        // works is not.
        let kind = match (before.unwrap_or(true), o.ok) {
            (true, false) => Kind::Failure,
            (false, true) => Kind::Recovery,
            _ => return Ok(None),
        };
        let status = o.status.map(i32::from);
        let row = client
            .query_one(
                TRANSITION_INSERT,
                &[
                    &o.tenant_id,
                    &o.destination,
                    &kind.as_str(),
                    &o.job_id,
                    &status,
                    &o.error,
                ],
            )
            .await?;
        let t = Transition {
            id: row.get("id"),
            tenant_id: o.tenant_id,
            destination: o.destination,
            kind,
            job_id: o.job_id,
            status: o.status,
            error: o.error,
            at: row.get("at"),
        };
        tokio::spawn(self.sink.transition(t.clone()));
        Ok(Some(t))
    }
}

/// A tenant's transitions, newest first, older than `before` (an id) when given.
pub async fn list(
    engine: &Engine,
    tenant: i64,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<Transition>> {
    let client = engine.pool().get().await?;
    let rows = client
        .query(TRANSITIONS_LIST, &[&tenant, &before, &limit])
        .await?;
    Ok(rows
        .iter()
        .map(|r| Transition {
            id: r.get("id"),
            tenant_id: tenant,
            destination: r.get("destination"),
            kind: Kind::parse(r.get("kind")),
            job_id: r.get("job_id"),
            status: r.get::<_, Option<i32>>("status").map(|s| s as u16),
            error: r.get("error"),
            at: r.get("at"),
        })
        .collect())
}
