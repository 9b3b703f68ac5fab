//! Bulk operations from the dashboard: "retry every dead job matching this filter" or
//! "cancel every waiting job matching it", or the same actions on a selection of checked
//! jobs (`ids`, at most [`MAX_SELECTION`]), run by the server as a durable operation with
//! progress (`pgferry.dashboard_ops`, migration component `dashboard`).
//!
//! The operation is a row; a runner task in every server takes operations whose lease ran
//! out (new ones at once, a dead server's after its lease) and runs them in batches through
//! the engine's filtered operations, counting each batch and extending its lease in one
//! statement. Those operations act only on jobs that still match, so a batch repeated after
//! a takeover does nothing twice; a batch done just before a crash is not counted (the
//! count can be low, never high).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgferry_core::migrate::{Component, Migration};
use pgferry_core::{CancelFilter, DeadFilter, Engine, JobState};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::auth::engine_queue;
use crate::auth::namespace::tenant_prefix;

pub const COMPONENT: Component<'static> = Component {
    name: "dashboard",
    migrations: &[Migration {
        version: 1,
        name: "0001_bulk_ops.sql",
        sql: include_str!("migrations/0001_bulk_ops.sql"),
    }],
    functions: &[],
};

const INSERT: &str = include_str!("sql/bulk_insert.sql");
const CLAIM: &str = include_str!("sql/bulk_claim.sql");
const PROGRESS: &str = include_str!("sql/bulk_progress.sql");
const FINISH: &str = include_str!("sql/bulk_finish.sql");
const PRUNE: &str = include_str!("sql/bulk_prune.sql");
/// Ended operations are kept this long (shown in the dashboard's list meanwhile).
const KEEP_SECS: f64 = 30.0 * 24.0 * 3600.0;
pub const GET: &str = include_str!("sql/bulk_get.sql");
pub const LIST: &str = include_str!("sql/bulk_list.sql");
pub const CANCEL: &str = include_str!("sql/bulk_cancel.sql");
/// The tenant's queues (the API's own listing), for dead-job operations over all of them.
const QUEUES_LIST: &str = include_str!("../http/sql/queues_list.sql");

/// Jobs per batch: small enough that progress moves and a lease (below) is never near.
pub const BATCH: u32 = 500;
/// Most jobs one selection names (the page's checked rows, over several pages).
pub const MAX_SELECTION: usize = 1000;
/// Jobs of a selection acted on between two progress writes (a cancel is two engine calls
/// per job; a retry or purge one statement per batch).
const SELECTION_BATCH: usize = 100;
const LEASE_SECS: f64 = 30.0;
/// How often an idle runner looks for operations a dead server left.
const IDLE_POLL: Duration = Duration::from_secs(5);

/// A checked operation, ready to insert: (action, filter as stored).
pub fn check(body: &Value) -> Result<(&'static str, Value), (&'static str, String)> {
    let obj = body
        .as_object()
        .ok_or(("body", "a JSON object".to_string()))?;
    for k in obj.keys() {
        if !["action", "queue", "kind", "error_contains", "states", "ids"].contains(&k.as_str()) {
            return Err(("body", format!("unknown field {k:?}")));
        }
    }
    let text = |f: &'static str| -> Result<Option<String>, (&'static str, String)> {
        match obj.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) if s.len() <= 1024 && !s.contains('\0') => Ok(Some(s.clone())),
            _ => Err((f, "a string of at most 1024 characters".into())),
        }
    };
    let kind = text("kind")?;
    let action = match text("action")?.as_deref() {
        Some("dead.retry") => "dead.retry",
        Some("dead.purge") => "dead.purge",
        Some("jobs.cancel") => "jobs.cancel",
        _ => return Err(("action", "dead.retry, dead.purge or jobs.cancel".into())),
    };
    // Dead jobs may be matched across every queue of the tenant; a cancel names its queue.
    let queue = text("queue")?;
    // A selection: exactly these jobs (of the tenant; the queue, if named, narrows it).
    if let Some(ids) = obj.get("ids") {
        let ids = selection(ids)?;
        for f in ["kind", "error_contains", "states"] {
            if obj.contains_key(f) {
                return Err((f, "not with ids (a selection names its jobs)".into()));
            }
        }
        return Ok((action, json!({ "queue": queue, "ids": ids })));
    }
    if queue.is_none() && action == "jobs.cancel" {
        return Err(("queue", "required".into()));
    }
    let mut filter = json!({ "queue": queue, "kind": kind });
    if action != "jobs.cancel" {
        filter["error_contains"] = json!(text("error_contains")?);
    } else {
        if obj.contains_key("error_contains") {
            return Err((
                "error_contains",
                "only for dead.retry and dead.purge".into(),
            ));
        }
        let states: Vec<String> = match obj.get("states") {
            None | Some(Value::Null) => {
                vec!["pending".into(), "scheduled".into(), "running".into()]
            }
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|s| match s.as_str() {
                    Some(s @ ("pending" | "scheduled" | "running")) => Ok(s.to_string()),
                    _ => Err(("states", "pending, scheduled or running".to_string())),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(("states", "a non-empty list".into())),
        };
        filter["states"] = json!(states);
    }
    Ok((action, filter))
}

/// The ids of a selection: 1 to MAX_SELECTION job ids (positive integers), duplicates dropped.
fn selection(v: &Value) -> Result<Vec<i64>, (&'static str, String)> {
    let bad = || {
        (
            "ids",
            format!("a list of 1 to {MAX_SELECTION} job ids (positive integers)"),
        )
    };
    let a = v.as_array().ok_or_else(bad)?;
    if a.is_empty() || a.len() > MAX_SELECTION {
        return Err(bad());
    }
    let mut seen = HashSet::new();
    let mut ids = Vec::with_capacity(a.len());
    for x in a {
        let id = x.as_i64().filter(|&i| i > 0).ok_or_else(bad)?;
        if seen.insert(id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Whether a checked filter is a selection (its own scope: `produce`, as one job's action).
pub fn is_selection(filter: &Value) -> bool {
    filter.get("ids").is_some_and(Value::is_array)
}

/// The operation row as the API shows it.
pub fn op_json(r: &tokio_postgres::Row) -> Value {
    let ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    json!({
        "op_id": r.get::<_, i64>("op_id"),
        "action": r.get::<_, String>("action"),
        "filter": r.get::<_, Value>("filter"),
        "status": r.get::<_, String>("status"),
        "done": r.get::<_, i64>("done"),
        "batches": r.get::<_, i32>("batches"),
        "error": r.get::<_, Option<String>>("error"),
        "created_at_unix_ms": ms(r.get("created_at")),
        "updated_at_unix_ms": ms(r.get("updated_at")),
        "finished_at_unix_ms": r.get::<_, Option<SystemTime>>("finished_at").map(ms),
    })
}

/// The runner of one server: woken when an operation is started here, else polls.
pub struct Runner {
    engine: Arc<Engine>,
    wake: Notify,
    owner: String,
}

impl Runner {
    pub fn start(engine: Arc<Engine>) -> Arc<Runner> {
        let owner = format!("{}-{:x}", std::process::id(), rand::random::<u32>());
        let r = Arc::new(Runner {
            engine,
            wake: Notify::new(),
            owner,
        });
        // Built outside a runtime (a tool constructing the router): no runner there.
        if tokio::runtime::Handle::try_current().is_ok() {
            let me = Arc::clone(&r);
            tokio::spawn(async move { me.run().await });
        }
        r
    }

    pub fn kick(&self) {
        self.wake.notify_one();
    }

    pub async fn insert(
        &self,
        tenant: i64,
        key: i64,
        action: &str,
        filter: &Value,
    ) -> Result<i64, String> {
        let c = self.engine.pool().get().await.map_err(|e| e.to_string())?;
        let row = c
            .query_one(INSERT, &[&tenant, &key, &action, filter])
            .await
            .map_err(|e| e.to_string())?;
        self.kick();
        Ok(row.get("op_id"))
    }

    async fn run(self: Arc<Self>) {
        let mut pruned = tokio::time::Instant::now();
        loop {
            if pruned.elapsed() > Duration::from_secs(3600) {
                pruned = tokio::time::Instant::now();
                if let Err(e) = self.prune().await {
                    tracing::warn!(error = %e, "dashboard bulk operations not pruned");
                }
            }
            match self.run_one().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "dashboard bulk operation runner"),
            }
            let _ = tokio::time::timeout(IDLE_POLL, self.wake.notified()).await;
        }
    }

    async fn prune(&self) -> Result<u64, String> {
        let c = self.engine.pool().get().await.map_err(|e| e.to_string())?;
        c.execute(PRUNE, &[&KEEP_SECS])
            .await
            .map_err(|e| e.to_string())
    }

    /// Takes one operation and runs it to its end; false when there was none.
    async fn run_one(&self) -> Result<bool, String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let c = self.engine.pool().get().await.map_err(|e| err(&e))?;
        let Some(row) = c
            .query_opt(CLAIM, &[&self.owner, &LEASE_SECS])
            .await
            .map_err(|e| err(&e))?
        else {
            return Ok(false);
        };
        drop(c);
        let op: i64 = row.get("op_id");
        let tenant: i64 = row.get("tenant_id");
        let action: String = row.get("action");
        let filter: Value = row.get("filter");
        let outcome = self.batches(op, tenant, &action, &filter).await;
        let c = self.engine.pool().get().await.map_err(|e| err(&e))?;
        let (status, error) = match outcome {
            Ok(true) => ("done", None),
            Ok(false) => return Ok(true), // cancelled or taken over: nothing to write
            Err(e) => ("failed", Some(e)),
        };
        c.execute(FINISH, &[&op, &self.owner, &status, &error])
            .await
            .map_err(|e| err(&e))?;
        Ok(true)
    }

    /// Runs batches until none is left (true) or the operation is no longer ours (false).
    async fn batches(&self, op: i64, tenant: i64, action: &str, f: &Value) -> Result<bool, String> {
        let s = |k: &str| f[k].as_str().map(str::to_string);
        let queues: Vec<String> = match s("queue") {
            Some(q) => vec![engine_queue(tenant, &q).map_err(|e| e.to_string())?],
            None => {
                let c = self.engine.pool().get().await.map_err(|e| e.to_string())?;
                c.query(QUEUES_LIST, &[&tenant_prefix(tenant)])
                    .await
                    .map_err(|e| e.to_string())?
                    .iter()
                    .map(|r| r.get("name"))
                    .collect()
            }
        };
        if let Some(ids) = f["ids"].as_array() {
            let ids: Vec<i64> = ids.iter().filter_map(Value::as_i64).collect();
            return self.selection(op, action, &queues, &ids).await;
        }
        let df = DeadFilter {
            queues: Some(queues.clone()),
            kind: s("kind"),
            error_contains: s("error_contains"),
            ids: None,
        };
        loop {
            let (n, more) = if action == "dead.retry" {
                let n = self
                    .engine
                    .retry_dead(&df, BATCH)
                    .await
                    .map_err(|e| e.to_string())?;
                (n, n == i64::from(BATCH))
            } else if action == "dead.purge" {
                // One statement removes every match.
                let n = self
                    .engine
                    .purge_dead(&df)
                    .await
                    .map_err(|e| e.to_string())?;
                (n, false)
            } else {
                let states = f["states"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| match v.as_str() {
                        Some("pending") => Some(JobState::Pending),
                        Some("scheduled") => Some(JobState::Scheduled),
                        Some("running") => Some(JobState::Running),
                        _ => None,
                    })
                    .collect();
                let Some(queue) = queues.first() else {
                    return Ok(true);
                };
                let cf = CancelFilter {
                    kind: s("kind"),
                    states,
                };
                let m = self
                    .engine
                    .cancel_matching(queue, &cf, Some("bulk operation from the dashboard"), BATCH)
                    .await
                    .map_err(|e| e.to_string())?;
                (m.pending + m.scheduled + m.running, m.has_more)
            };
            let c = self.engine.pool().get().await.map_err(|e| e.to_string())?;
            let ours = c
                .query_opt(PROGRESS, &[&op, &self.owner, &n, &LEASE_SECS])
                .await
                .map_err(|e| e.to_string())?;
            if ours.is_none() {
                return Ok(false);
            }
            if !more {
                return Ok(true);
            }
        }
    }

    /// Runs a selection in batches, acting only on jobs of the tenant's queues that are
    /// still in a state the action applies to (so a batch repeated after a takeover does
    /// nothing twice); true when done, false when the operation is no longer ours.
    async fn selection(
        &self,
        op: i64,
        action: &str,
        queues: &[String],
        ids: &[i64],
    ) -> Result<bool, String> {
        let e = |e: pgferry_core::Error| e.to_string();
        let ours: HashSet<&str> = queues.iter().map(String::as_str).collect();
        for chunk in ids.chunks(SELECTION_BATCH) {
            let df = DeadFilter {
                queues: Some(queues.to_vec()),
                ids: Some(chunk.to_vec()),
                ..DeadFilter::default()
            };
            let n = match action {
                "dead.retry" => self
                    .engine
                    .retry_dead(&df, chunk.len() as u32)
                    .await
                    .map_err(e)?,
                "dead.purge" => self.engine.purge_dead(&df).await.map_err(e)?,
                _ => {
                    let mut n = 0;
                    for &id in chunk {
                        let job = match self.engine.get_job(id).await {
                            Ok(j) => j,
                            Err(pgferry_core::Error::NotFound { .. }) => continue,
                            Err(x) => return Err(e(x)),
                        };
                        // Another tenant's job, or one that is over: not acted on.
                        if !ours.contains(job.queue.as_str())
                            || !matches!(
                                job.state,
                                JobState::Pending | JobState::Scheduled | JobState::Running
                            )
                            || job.cancel_requested
                        {
                            continue;
                        }
                        self.engine
                            .cancel(id, Some("bulk operation from the dashboard"))
                            .await
                            .map_err(e)?;
                        n += 1;
                    }
                    n
                }
            };
            let c = self.engine.pool().get().await.map_err(|e| e.to_string())?;
            let still = c
                .query_opt(PROGRESS, &[&op, &self.owner, &n, &LEASE_SECS])
                .await
                .map_err(|e| e.to_string())?;
            if still.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
