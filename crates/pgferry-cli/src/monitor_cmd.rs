//! `pgferry monitor …`: heartbeat monitors of the key's tenant through the HTTP API
//! (docs/monitors.md). Answers are printed as the API's JSON.

use serde_json::{json, Map, Value};

use crate::admin::api::{segment, Api, Target};

#[derive(clap::Subcommand, Debug)]
pub enum MonitorCmd {
    /// Every monitor of the key's tenant.
    List,
    /// One monitor, with its ping path.
    Get { name: String },
    /// Create a monitor (admin scope): --period-ms or --cron, and a grace.
    Create(CreateArgs),
    /// Delete a monitor and its pings (admin scope).
    Delete { name: String },
    /// Expect nothing and alert on nothing (admin scope).
    Pause { name: String },
    /// Expect the next run from now (admin scope).
    Resume { name: String },
    /// Ping it (what the monitored job does): success, or --start / --fail.
    Ping {
        name: String,
        #[arg(long, conflicts_with = "fail")]
        start: bool,
        #[arg(long)]
        fail: bool,
    },
    /// The newest pings.
    Pings {
        name: String,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Its alerts (late, failed, recovered), newest first.
    Alerts {
        name: String,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    name: String,
    /// A run is expected this long after the previous one.
    #[arg(long)]
    period_ms: Option<i64>,
    /// Runs are expected at these times (5 or 6 fields, or @daily style).
    #[arg(long)]
    cron: Option<String>,
    /// IANA time zone of the cron expression.
    #[arg(long)]
    timezone: Option<String>,
    /// How late a run may be (and how long a started run may take).
    #[arg(long)]
    grace_ms: Option<i64>,
    /// Consecutive failed runs before it is down.
    #[arg(long)]
    failure_threshold: Option<i64>,
    /// Send its alerts only to these notification targets (repeat or comma-separate;
    /// default: every target of the tenant).
    #[arg(long = "target", value_delimiter = ',')]
    targets: Vec<String>,
    /// While late or down, repeat the alert this often (at least 60000; default: once).
    #[arg(long)]
    realert_ms: Option<i64>,
}

pub async fn run(t: &Target, cmd: MonitorCmd) -> anyhow::Result<()> {
    let api = Api::new(t).await?;
    let path = |name: &str, rest: &str| format!("/v1/monitors/{}{rest}", segment(name));
    let v = match cmd {
        MonitorCmd::List => api.get("/v1/monitors", &[]).await?,
        MonitorCmd::Get { name } => api.get(&path(&name, ""), &[]).await?,
        MonitorCmd::Delete { name } => {
            api.delete(&path(&name, "")).await?;
            json!({"deleted": name})
        }
        MonitorCmd::Pause { name } => api.post(&path(&name, "/pause"), json!({})).await?,
        MonitorCmd::Resume { name } => api.post(&path(&name, "/resume"), json!({})).await?,
        MonitorCmd::Ping { name, start, fail } => {
            let m = api.get(&path(&name, ""), &[]).await?;
            let ping = m["ping_path"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("the monitor has no ping_path: {m}"))?;
            let suffix = match (start, fail) {
                (true, _) => "/start",
                (_, true) => "/fail",
                _ => "",
            };
            api.get(&format!("{ping}{suffix}"), &[]).await?
        }
        MonitorCmd::Pings { name, limit } => {
            api.get(&path(&name, "/pings"), &[("limit", limit.to_string())])
                .await?
        }
        MonitorCmd::Alerts { name, limit } => {
            let q = [
                ("type", "monitor".to_string()),
                ("subject", name),
                ("limit", limit.to_string()),
            ];
            api.get("/v1/alerts", &q).await?
        }
        MonitorCmd::Create(a) => {
            let mut body = Map::new();
            body.insert("name".into(), json!(a.name));
            let optional = [
                ("period_ms", a.period_ms.map(Value::from)),
                ("cron", a.cron.map(Value::from)),
                ("timezone", a.timezone.map(Value::from)),
                ("grace_ms", a.grace_ms.map(Value::from)),
                ("failure_threshold", a.failure_threshold.map(Value::from)),
                ("targets", (!a.targets.is_empty()).then(|| json!(a.targets))),
                ("realert_ms", a.realert_ms.map(Value::from)),
            ];
            for (k, v) in optional {
                if let Some(v) = v {
                    body.insert(k.into(), v);
                }
            }
            api.post("/v1/monitors", Value::Object(body)).await?
        }
    };
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}
