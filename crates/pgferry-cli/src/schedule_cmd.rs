//! `pgferry schedule …`: schedules of the key's tenant through the HTTP API
//! (docs/schedules.md). Answers are printed as the API's JSON.

use serde_json::{json, Map, Value};

use crate::admin::api::{segment, Api, Target};

#[derive(clap::Subcommand, Debug)]
pub enum ScheduleCmd {
    /// Every schedule of the key's tenant.
    List,
    /// One schedule.
    Show { name: String },
    /// Create a schedule (admin scope): --cron or --every-ms, and what each fire enqueues.
    Create(Box<CreateArgs>),
    /// Delete a schedule and its fire history (admin scope).
    Delete { name: String },
    /// Stop firing (admin scope).
    Pause { name: String },
    /// Fire again from the next fire time after now (admin scope).
    Resume { name: String },
    /// The next fire times.
    Preview {
        name: String,
        #[arg(long, default_value_t = 10)]
        n: u32,
    },
    /// Recorded fires, newest first.
    Fires {
        name: String,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Run every fire time in [from, to] (RFC 3339) that has none yet (admin scope).
    Backfill {
        name: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    name: String,
    /// 5 or 6 fields, or @hourly/@daily/@weekly/@monthly/@yearly.
    #[arg(long)]
    cron: Option<String>,
    /// A fixed interval instead of cron.
    #[arg(long)]
    every_ms: Option<i64>,
    /// IANA time zone of the cron expression.
    #[arg(long, default_value = "UTC")]
    timezone: String,
    #[arg(long)]
    queue: String,
    #[arg(long)]
    kind: String,
    /// Job arguments (or workflow input) as JSON.
    #[arg(long, default_value = "{}")]
    args: String,
    /// Start a workflow of `kind` instead of enqueuing a job.
    #[arg(long)]
    workflow: bool,
    #[arg(long)]
    jitter_ms: Option<i64>,
    /// RFC 3339.
    #[arg(long)]
    start_at: Option<String>,
    /// RFC 3339.
    #[arg(long)]
    end_at: Option<String>,
    /// skip, run_once or run_all.
    #[arg(long)]
    missed: Option<String>,
    #[arg(long)]
    catchup_window_ms: Option<i64>,
    #[arg(long)]
    catchup_max: Option<i64>,
    /// allow, skip, buffer_one or cancel_previous.
    #[arg(long)]
    overlap: Option<String>,
    #[arg(long)]
    grace_ms: Option<i64>,
}

pub async fn run(t: &Target, cmd: ScheduleCmd) -> anyhow::Result<()> {
    let api = Api::new(t).await?;
    let path = |name: &str, rest: &str| format!("/v1/schedules/{}{rest}", segment(name));
    let v = match cmd {
        ScheduleCmd::List => api.get("/v1/schedules", &[]).await?,
        ScheduleCmd::Show { name } => api.get(&path(&name, ""), &[]).await?,
        ScheduleCmd::Delete { name } => {
            api.delete(&path(&name, "")).await?;
            json!({"deleted": name})
        }
        ScheduleCmd::Pause { name } => api.post(&path(&name, "/pause"), json!({})).await?,
        ScheduleCmd::Resume { name } => api.post(&path(&name, "/resume"), json!({})).await?,
        ScheduleCmd::Preview { name, n } => {
            api.get(&path(&name, "/preview"), &[("n", n.to_string())])
                .await?
        }
        ScheduleCmd::Fires { name, limit } => {
            api.get(&path(&name, "/fires"), &[("limit", limit.to_string())])
                .await?
        }
        ScheduleCmd::Backfill { name, from, to } => {
            api.post(&path(&name, "/backfill"), json!({"from": from, "to": to}))
                .await?
        }
        ScheduleCmd::Create(args) => {
            let CreateArgs {
                name,
                cron,
                every_ms,
                timezone,
                queue,
                kind,
                args,
                workflow,
                jitter_ms,
                start_at,
                end_at,
                missed,
                catchup_window_ms,
                catchup_max,
                overlap,
                grace_ms,
            } = *args;
            let args: Value = serde_json::from_str(&args)
                .map_err(|e| anyhow::anyhow!("--args is not JSON: {e}"))?;
            let target = if workflow {
                json!({"type": "workflow", "queue": queue, "kind": kind, "input": args})
            } else {
                json!({"type": "job", "queue": queue, "kind": kind, "args": args})
            };
            let mut body = Map::new();
            body.insert("name".into(), json!(name));
            body.insert("timezone".into(), json!(timezone));
            body.insert("target".into(), target);
            let optional = [
                ("cron", cron.map(Value::from)),
                ("interval_ms", every_ms.map(Value::from)),
                ("jitter_ms", jitter_ms.map(Value::from)),
                ("start_at", start_at.map(Value::from)),
                ("end_at", end_at.map(Value::from)),
                ("missed", missed.map(Value::from)),
                ("catchup_window_ms", catchup_window_ms.map(Value::from)),
                ("catchup_max", catchup_max.map(Value::from)),
                ("overlap", overlap.map(Value::from)),
                ("grace_ms", grace_ms.map(Value::from)),
            ];
            for (k, v) in optional {
                if let Some(v) = v {
                    body.insert(k.into(), v);
                }
            }
            api.post("/v1/schedules", Value::Object(body)).await?
        }
    };
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}
