//! `pgferry queue|job|dead …`: the admin API from a terminal (issue 27). Each command is
//! one or a few calls of the HTTP API (docs/http-api.md) with a key from `--api-key` or
//! `PGFERRY_API_KEY`; people get tables, scripts `--json` and stable exit codes
//! ([`api::Exit`]).

pub mod api;
mod table;

use std::time::Duration;

use api::{segment, Api, Target};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Map, Value};
use table::{cell, render, time};

#[derive(clap::Subcommand, Debug)]
pub enum QueueCmd {
    /// Every queue of the key's tenant with its counts.
    List,
    /// One queue: settings and counts.
    Show { name: String },
    /// Stop handing out the queue's jobs (admin scope).
    Pause { name: String },
    /// Hand out the queue's jobs again (admin scope).
    Resume { name: String },
    /// Create the queue or change its settings (admin scope); unset options stay as they are.
    Set {
        name: String,
        #[arg(long)]
        shards: Option<i64>,
        #[arg(long)]
        max_attempts: Option<i64>,
        #[arg(long)]
        lease_ms: Option<i64>,
        #[arg(long)]
        backoff_base_ms: Option<i64>,
        #[arg(long)]
        backoff_cap_ms: Option<i64>,
        #[arg(long)]
        retention_ms: Option<i64>,
        #[arg(long)]
        aging_ms: Option<i64>,
        /// Jobs of the queue running at once, over all workers.
        #[arg(long)]
        concurrency: Option<i64>,
        /// sync (default) or async.
        #[arg(long)]
        durability: Option<String>,
    },
    /// Cancel the queue's pending, scheduled and running jobs (admin scope), in rounds
    /// until none is left, with a progress bar.
    Cancel {
        name: String,
        /// Only jobs of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Only these states (pending, scheduled, running); repeatable.
        #[arg(long = "state")]
        states: Vec<String>,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum JobCmd {
    /// A job with its attempts.
    Get { id: i64 },
    /// A queue's jobs, newest first.
    List {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        kind: Option<String>,
        /// Jobs to show in all (pages are fetched as needed).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Cancel a job: scheduled or pending never runs; a running one's worker is told.
    Cancel { id: i64 },
    /// Run a dead-lettered job again.
    Retry { id: i64 },
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct DeadFilter {
    #[arg(long)]
    queue: Option<String>,
    #[arg(long)]
    kind: Option<String>,
    /// Only jobs whose last error contains this text.
    #[arg(long)]
    error_contains: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
pub enum DeadCmd {
    /// Dead-lettered jobs, newest first.
    List {
        #[command(flatten)]
        filter: DeadFilter,
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Run dead jobs again (admin scope): by id, by filter, or `--all`.
    Retry(DeadAction),
    /// Delete dead jobs for good (admin scope): by id, by filter, or `--all`.
    Purge(DeadAction),
}

#[derive(clap::Args, Debug)]
pub struct DeadAction {
    /// Job ids (repeatable); combined with the filter.
    #[arg(long = "id")]
    ids: Vec<i64>,
    #[command(flatten)]
    filter: DeadFilter,
    /// Every dead job of the tenant (required when no id or filter is given).
    #[arg(long)]
    all: bool,
}

pub async fn queue(t: &Target, cmd: QueueCmd) -> anyhow::Result<()> {
    let api = Api::new(t).await?;
    match cmd {
        QueueCmd::List => {
            let v = api.get("/v1/queues", &[]).await?;
            let queues = v["queues"].as_array().cloned().unwrap_or_default();
            print(t, &v, || queue_table(&queues));
        }
        QueueCmd::Show { name } => {
            let v = api
                .get(&format!("/v1/queues/{}", segment(&name)), &[])
                .await?;
            print(t, &v, || {
                let mut out = queue_table(std::slice::from_ref(&v));
                out.push_str(&kv_table(&v["settings"]));
                out
            });
        }
        QueueCmd::Pause { name } => {
            act(
                t,
                &api,
                &format!("/v1/queues/{}/pause", segment(&name)),
                "paused",
            )
            .await?
        }
        QueueCmd::Resume { name } => {
            act(
                t,
                &api,
                &format!("/v1/queues/{}/resume", segment(&name)),
                "resumed",
            )
            .await?
        }
        QueueCmd::Set {
            name,
            shards,
            max_attempts,
            lease_ms,
            backoff_base_ms,
            backoff_cap_ms,
            retention_ms,
            aging_ms,
            concurrency,
            durability,
        } => {
            let mut body = Map::new();
            for (k, v) in [
                ("shards", shards),
                ("max_attempts", max_attempts),
                ("lease_ms", lease_ms),
                ("backoff_base_ms", backoff_base_ms),
                ("backoff_cap_ms", backoff_cap_ms),
                ("retention_ms", retention_ms),
                ("aging_ms", aging_ms),
                ("concurrency", concurrency),
            ] {
                if let Some(v) = v {
                    body.insert(k.to_string(), json!(v));
                }
            }
            if let Some(d) = durability {
                body.insert("durability".to_string(), json!(d));
            }
            let v = api
                .patch(
                    &format!("/v1/queues/{}", segment(&name)),
                    Value::Object(body),
                )
                .await?;
            print(t, &v, || kv_table(&v["settings"]));
        }
        QueueCmd::Cancel { name, kind, states } => {
            cancel_queue(t, &api, &name, kind, states).await?
        }
    }
    Ok(())
}

/// Cancels in rounds of up to 10,000 (the API's bound per call) until `has_more` is false.
async fn cancel_queue(
    t: &Target,
    api: &Api,
    name: &str,
    kind: Option<String>,
    states: Vec<String>,
) -> anyhow::Result<()> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} cancelling {msg} ({elapsed})").expect("template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let mut totals: Map<String, Value> = Map::new();
    let mut body = json!({ "limit": 10_000 });
    if let Some(k) = kind {
        body["kind"] = json!(k);
    }
    if !states.is_empty() {
        body["states"] = json!(states);
    }
    loop {
        let v = api
            .post(
                &format!("/v1/queues/{}/cancel", segment(name)),
                body.clone(),
            )
            .await?;
        if let Some(m) = v["cancelled"].as_object() {
            for (state, n) in m {
                let sum = totals.get(state).and_then(Value::as_i64).unwrap_or(0)
                    + n.as_i64().unwrap_or(0);
                totals.insert(state.clone(), json!(sum));
            }
        }
        let done: i64 = totals.values().filter_map(Value::as_i64).sum();
        bar.set_message(format!("{done} jobs"));
        if !v["has_more"].as_bool().unwrap_or(false) {
            break;
        }
    }
    bar.finish_and_clear();
    let v = json!({ "queue": name, "cancelled": totals });
    print(t, &v, || kv_table(&v["cancelled"]));
    Ok(())
}

pub async fn job(t: &Target, cmd: JobCmd) -> anyhow::Result<()> {
    let api = Api::new(t).await?;
    match cmd {
        JobCmd::Get { id } => {
            let v = api.get(&format!("/v1/jobs/{id}"), &[]).await?;
            print(t, &v, || job_detail(&v));
        }
        JobCmd::List {
            queue,
            state,
            kind,
            limit,
        } => {
            let mut q = vec![("queue", queue)];
            q.extend(state.map(|s| ("state", s)));
            q.extend(kind.map(|k| ("kind", k)));
            let (jobs, more) = pages(&api, "/v1/jobs", q, limit).await?;
            let v = json!({ "jobs": jobs, "has_more": more });
            print(t, &v, || job_table(&jobs, more));
        }
        JobCmd::Cancel { id } => {
            act(
                t,
                &api,
                &format!("/v1/jobs/{id}/cancel"),
                "cancel requested",
            )
            .await?
        }
        JobCmd::Retry { id } => act(t, &api, &format!("/v1/jobs/{id}/retry"), "retried").await?,
    }
    Ok(())
}

pub async fn dead(t: &Target, cmd: DeadCmd) -> anyhow::Result<()> {
    let api = Api::new(t).await?;
    match cmd {
        DeadCmd::List { filter, limit } => {
            let (jobs, more) = pages(&api, "/v1/dead", filter_query(&filter), limit).await?;
            let v = json!({ "jobs": jobs, "has_more": more });
            print(t, &v, || job_table(&jobs, more));
        }
        DeadCmd::Retry(a) => dead_action(t, &api, "retry", a).await?,
        DeadCmd::Purge(a) => dead_action(t, &api, "purge", a).await?,
    }
    Ok(())
}

async fn dead_action(t: &Target, api: &Api, what: &str, a: DeadAction) -> anyhow::Result<()> {
    let f = &a.filter;
    let filtered =
        !a.ids.is_empty() || f.queue.is_some() || f.kind.is_some() || f.error_contains.is_some();
    if !filtered && !a.all {
        return Err(anyhow::Error::new(api::ExitError {
            exit: api::Exit::Invalid,
            message: format!("dead {what}: name jobs with --id or a filter, or pass --all"),
        }));
    }
    let mut body = json!({});
    for (k, v) in filter_query(f) {
        body[k] = json!(v);
    }
    if !a.ids.is_empty() {
        body["ids"] = json!(a.ids);
    }
    let bar = ProgressBar::new_spinner();
    bar.set_message(format!("dead {what}"));
    bar.enable_steady_tick(Duration::from_millis(120));
    let v = api.post(&format!("/v1/dead/{what}"), body).await;
    bar.finish_and_clear();
    let v = v?;
    print(t, &v, || {
        format!(
            "{} jobs {}\n",
            cell(&v["count"]),
            if what == "retry" { "retried" } else { "purged" }
        )
    });
    Ok(())
}

fn filter_query(f: &DeadFilter) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    q.extend(f.queue.clone().map(|v| ("queue", v)));
    q.extend(f.kind.clone().map(|v| ("kind", v)));
    q.extend(f.error_contains.clone().map(|v| ("error_contains", v)));
    q
}

/// Follows `next_cursor` until `limit` jobs or the end.
async fn pages(
    api: &Api,
    path: &str,
    query: Vec<(&str, String)>,
    limit: usize,
) -> anyhow::Result<(Vec<Value>, bool)> {
    let mut jobs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = query.clone();
        q.push(("limit", (limit - jobs.len()).min(100).to_string()));
        q.extend(cursor.clone().map(|c| ("cursor", c)));
        let v = api.get(path, &q).await?;
        jobs.extend(v["jobs"].as_array().cloned().unwrap_or_default());
        let more = v["has_more"].as_bool().unwrap_or(false);
        cursor = v["next_cursor"].as_str().map(str::to_string);
        if !more || cursor.is_none() || jobs.len() >= limit {
            return Ok((jobs, more));
        }
    }
}

/// A POST without a body whose answer is printed as JSON or as one word.
async fn act(t: &Target, api: &Api, path: &str, done: &str) -> anyhow::Result<()> {
    let v = api.post(path, json!({})).await?;
    print(t, &v, || format!("{done}\n"));
    Ok(())
}

fn print(t: &Target, v: &Value, human: impl FnOnce() -> String) {
    if t.json {
        println!("{v}");
    } else {
        print!("{}", human());
    }
}

fn queue_table(queues: &[Value]) -> String {
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            let c = &q["counts"];
            vec![
                cell(&q["name"]),
                if q["paused"].as_bool().unwrap_or(false) {
                    "paused"
                } else {
                    "active"
                }
                .to_string(),
                cell(&c["pending"]),
                cell(&c["running"]),
                cell(&c["scheduled"]),
                cell(&c["dead"]),
                cell(&c["completed"]),
                cell(&c["failed"]),
            ]
        })
        .collect();
    render(
        &[
            "QUEUE",
            "STATUS",
            "PENDING",
            "RUNNING",
            "SCHEDULED",
            "DEAD",
            "COMPLETED",
            "FAILED",
        ],
        &rows,
    )
}

fn job_table(jobs: &[Value], more: bool) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let last = j["attempts"]
                .as_array()
                .and_then(|a| a.last())
                .cloned()
                .unwrap_or_default();
            vec![
                cell(&j["id"]),
                cell(&j["queue"]),
                cell(&j["kind"]),
                cell(&j["state"]),
                j["attempts"].as_array().map_or(0, Vec::len).to_string(),
                time(&j["enqueued_at_unix_ms"]),
                cell(&last["error"]).chars().take(60).collect(),
            ]
        })
        .collect();
    let mut out = render(
        &[
            "ID",
            "QUEUE",
            "KIND",
            "STATE",
            "ATTEMPTS",
            "ENQUEUED",
            "LAST ERROR",
        ],
        &rows,
    );
    if more {
        out.push_str("(more: raise --limit)\n");
    }
    out
}

fn job_detail(j: &Value) -> String {
    let mut out = kv_table(&json!({
        "id": j["id"], "queue": j["queue"], "kind": j["kind"], "state": j["state"],
        "priority": j["priority"], "max_attempts": j["max_attempts"],
        "enqueued_at": time(&j["enqueued_at_unix_ms"]), "run_at": time(&j["run_at_unix_ms"]),
        "args": j["args"].to_string(), "result": j.get("result").map_or("-".to_string(), cell),
    }));
    let rows: Vec<Vec<String>> = j["attempts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|a| {
                    vec![
                        cell(&a["attempt"]),
                        cell(&a["outcome"]),
                        cell(&a["worker"]),
                        time(&a["finished_at_unix_ms"]),
                        cell(&a["error"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    out.push('\n');
    out.push_str(&render(
        &["ATTEMPT", "OUTCOME", "WORKER", "FINISHED", "ERROR"],
        &rows,
    ));
    out
}

fn kv_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_object()
        .map(|m| m.iter().map(|(k, v)| vec![k.clone(), cell(v)]).collect())
        .unwrap_or_default();
    render(&["FIELD", "VALUE"], &rows)
}
