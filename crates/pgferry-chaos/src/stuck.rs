//! Evidence for a drain that left acknowledged jobs unfinished: what the database says about
//! them (attempts, receipts, long leases, the rescue mark), which sessions were busy, whether
//! a leader held its lock, and the servers' last warnings. CI keeps no run directory, so the
//! report has to carry what a failed run needs to be understood.

use std::path::Path;

use serde_json::{json, Value};
use tokio_postgres::Client;

const STUCK_JOBS: &str = include_str!("sql/stuck_jobs.sql");
const BUSY_SESSIONS: &str = include_str!("sql/busy_sessions.sql");
/// Jobs described in full (the rest are counted only).
const JOBS_DESCRIBED: usize = 8;
/// Warning and error lines kept from the servers' logs (the last ones).
const LOG_LINES: usize = 40;

/// The evidence for `ids` (unfinished jobs), as one JSON value for the report's details.
/// Failures to gather a part are recorded in its place: evidence never fails a run.
pub async fn evidence(client: &Client, run_dir: &Path, ids: &[i64]) -> Value {
    let mut sample: Vec<i64> = ids.to_vec();
    sample.sort_unstable();
    sample.truncate(JOBS_DESCRIBED);
    let jobs = match client.query(STUCK_JOBS, &[&sample]).await {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                json!({
                    "job_id": r.get::<_, i64>("job_id"),
                    "looked_at": r.get::<_, f64>("looked_at"),
                    "rescue_mark": r.get::<_, i64>("rescue_mark"),
                    "ready": r.get::<_, Value>("ready"),
                    "receipts": r.get::<_, Value>("receipts"),
                    "long_leases": r.get::<_, Value>("long_leases"),
                })
            })
            .collect(),
        Err(e) => json!(format!("reading the jobs: {e}")),
    };
    let sessions = match client.query(BUSY_SESSIONS, &[]).await {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                json!({
                    "app": r.get::<_, String>("app"),
                    "state": r.get::<_, String>("state"),
                    "wait": format!("{}/{}", r.get::<_, String>("wait_type"),
                                    r.get::<_, String>("wait")),
                    "xact_s": r.get::<_, f64>("xact_s"),
                    "query": r.get::<_, String>("query"),
                })
            })
            .collect(),
        Err(e) => json!(format!("reading pg_stat_activity: {e}")),
    };
    let leader = match crate::faults::leader_held(client).await {
        Ok(held) => json!(held),
        Err(e) => json!(e.to_string()),
    };
    json!({
        "jobs": jobs,
        "busy_sessions": sessions,
        "leader_lock_held": leader,
        "server_warnings": server_warnings(run_dir),
    })
}

/// The last warning and error lines of the servers' logs (`server-*.log`), by file.
fn server_warnings(run_dir: &Path) -> Value {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return json!("run directory unreadable");
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("server-") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    let mut out = serde_json::Map::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        let last: Vec<String> = lines[lines.len().saturating_sub(LOG_LINES)..]
            .iter()
            .map(|l| l.chars().take(300).collect())
            .collect();
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        out.insert(
            name.unwrap_or_default(),
            json!({ "warnings": lines.len(), "last": last }),
        );
    }
    Value::Object(out)
}
