//! The readers: thin Rust over the SQL functions of `sql/functions/` (the same answers
//! in psql and over HTTP). Times are unix milliseconds in every output.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio_postgres::{Client, Row};

use crate::error::{AshError, Result};

const AAS_BY: &str = include_str!("../sql/read/aas_by.sql");
const TOP_WAITS: &str = include_str!("../sql/read/top_waits.sql");
const TOP_QUERIES: &str = include_str!("../sql/read/top_queries.sql");
const CPU_VS_WAITING: &str = include_str!("../sql/read/cpu_vs_waiting.sql");
const TIMELINE: &str = include_str!("../sql/read/timeline.sql");
const ACTIVITY_AT: &str = include_str!("../sql/read/activity_at.sql");
const BLOCKING_AT: &str = include_str!("../sql/read/blocking_at.sql");
const PARSE_TIME: &str = include_str!("../sql/read/parse_time.sql");

/// Longest window a reader accepts.
pub const MAX_WINDOW: Duration = Duration::from_secs(400 * 86_400);
/// Most buckets of one timeline.
pub const MAX_BUCKETS: u64 = 10_000;
/// Most rows of a top-N reader.
pub const MAX_LIMIT: i32 = 1000;

/// A half-open time window [since, until).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub since: SystemTime,
    pub until: SystemTime,
}

impl Window {
    /// From unix milliseconds, checked: since before until, at most [`MAX_WINDOW`] long.
    pub fn from_ms(since_ms: i64, until_ms: i64) -> Result<Window> {
        if since_ms < 0 {
            return Err(AshError::invalid(
                "since_ms",
                "must be a unix time in ms (≥ 0)",
            ));
        }
        if until_ms <= since_ms {
            return Err(AshError::invalid("until_ms", "must be after since"));
        }
        if (until_ms - since_ms) as u128 > MAX_WINDOW.as_millis() {
            return Err(AshError::invalid(
                "since_ms",
                "the window is longer than 400 days",
            ));
        }
        if until_ms > 253_402_300_799_999 {
            return Err(AshError::invalid("until_ms", "is past the year 9999"));
        }
        Ok(Window {
            since: UNIX_EPOCH + Duration::from_millis(since_ms as u64),
            until: UNIX_EPOCH + Duration::from_millis(until_ms as u64),
        })
    }

    /// The last `length` up to now.
    pub fn last(length: Duration) -> Result<Window> {
        let until = ms(SystemTime::now());
        Window::from_ms(until - length.as_millis() as i64, until)
    }

    fn seconds(&self) -> f64 {
        self.until
            .duration_since(self.since)
            .unwrap_or_default()
            .as_secs_f64()
    }
}

/// Unix milliseconds of a time.
pub fn ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// What average active sessions are broken down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    WaitType,
    WaitEvent,
    Query,
    Database,
    User,
    Application,
    PgferryRole,
    BackendType,
    /// The engine queue a pgferry backend served (`t<tenant>.<queue>`).
    Queue,
    JobKind,
    Tenant,
}

impl Dimension {
    pub const ALL: [Dimension; 11] = [
        Dimension::WaitType,
        Dimension::WaitEvent,
        Dimension::Query,
        Dimension::Database,
        Dimension::User,
        Dimension::Application,
        Dimension::PgferryRole,
        Dimension::BackendType,
        Dimension::Queue,
        Dimension::JobKind,
        Dimension::Tenant,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::WaitType => "wait_type",
            Dimension::WaitEvent => "wait_event",
            Dimension::Query => "query",
            Dimension::Database => "database",
            Dimension::User => "user",
            Dimension::Application => "application",
            Dimension::PgferryRole => "pgferry_role",
            Dimension::BackendType => "backend_type",
            Dimension::Queue => "queue",
            Dimension::JobKind => "job_kind",
            Dimension::Tenant => "tenant",
        }
    }
}

impl std::str::FromStr for Dimension {
    type Err = AshError;
    fn from_str(s: &str) -> Result<Dimension> {
        Dimension::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                AshError::invalid(
                    "by",
                    format!(
                        "{s:?} is not one of {}",
                        Dimension::ALL.map(|d| d.as_str()).join(", ")
                    ),
                )
            })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Slice {
    pub key: String,
    pub seconds: f64,
    pub aas: Option<f64>,
    pub db_time_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Wait {
    pub wait_type: String,
    pub wait_event: String,
    pub seconds: f64,
    pub aas: Option<f64>,
    pub db_time_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Query {
    pub query_id: Option<i64>,
    pub query_text: Option<String>,
    pub seconds: f64,
    pub aas: Option<f64>,
    pub db_time_pct: Option<f64>,
    pub top_wait: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CpuVsWaiting {
    pub cpu: Option<f64>,
    pub waiting: Option<f64>,
    pub idle_in_transaction: Option<f64>,
    /// Seconds of the window the sampler covered; less than window_seconds means it was
    /// down (or not yet started) for the rest.
    pub covered_seconds: f64,
    pub window_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TimelinePoint {
    pub bucket_start_ms: i64,
    /// None: nothing was active in the bucket.
    pub wait_type: Option<String>,
    pub aas: f64,
    /// Share of the bucket the sampler covered (0: down, 1: fully sampled).
    pub coverage: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Activity {
    pub sample_at_ms: i64,
    pub sessions: i32,
    pub wait_type: String,
    pub wait_event: String,
    pub query_id: Option<i64>,
    pub query_text: Option<String>,
    pub database: String,
    pub user_name: String,
    pub application: String,
    pub pgferry_role: Option<String>,
    pub backend_type: String,
    /// The engine queue a pgferry backend was serving (`t<tenant>.<queue>`), if known.
    pub queue: Option<String>,
    pub job_kind: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Blocking {
    pub sample_at_ms: i64,
    /// None: a group of waiters that block nobody (`sessions` of them).
    pub pid: Option<i32>,
    pub sessions: i32,
    pub blocked_by: Vec<i32>,
    /// 0: a root (blocks others, waits for nobody); None: part of a cycle.
    pub depth: Option<i32>,
    pub root_pid: Option<i32>,
    pub wait_type: Option<String>,
    pub wait_event: Option<String>,
    pub query_id: Option<i64>,
    pub application: Option<String>,
    pub pgferry_role: Option<String>,
}

fn check_limit(limit: i32) -> Result<()> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AshError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    Ok(())
}

async fn query(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<Row>> {
    client.query(sql, params).await.map_err(AshError::from_db)
}

/// The key of a tenant-scoped breakdown ([`aas_by_tenant`]) under which every other
/// tenant's attributed load is summed.
pub const OTHER_TENANTS: &str = "(other tenants)";

/// Average active sessions over `w` by `by`, largest first: the database-wide view (every
/// tenant's queues and job kinds by name), for operators.
pub async fn aas_by(client: &Client, by: Dimension, w: Window) -> Result<Vec<Slice>> {
    aas_by_scoped(client, by, w, None).await
}

/// [`aas_by`] as one tenant may see it: by queue, job kind or tenant, only `tenant_id`'s
/// own load keeps its names (queues stay engine names, `t<id>.<queue>`); all other
/// attributed load is one [`OTHER_TENANTS`] slice. The other dimensions are unchanged.
pub async fn aas_by_tenant(
    client: &Client,
    by: Dimension,
    w: Window,
    tenant_id: i64,
) -> Result<Vec<Slice>> {
    aas_by_scoped(client, by, w, Some(tenant_id.to_string())).await
}

async fn aas_by_scoped(
    client: &Client,
    by: Dimension,
    w: Window,
    tenant: Option<String>,
) -> Result<Vec<Slice>> {
    let rows = query(client, AAS_BY, &[&by.as_str(), &w.since, &w.until, &tenant]).await?;
    Ok(rows
        .iter()
        .map(|r| Slice {
            key: r.get("key"),
            seconds: r.get("seconds"),
            aas: r.get("aas"),
            db_time_pct: r.get("db_time_pct"),
        })
        .collect())
}

pub async fn top_waits(client: &Client, w: Window, limit: i32) -> Result<Vec<Wait>> {
    check_limit(limit)?;
    let rows = query(client, TOP_WAITS, &[&w.since, &w.until, &limit]).await?;
    Ok(rows
        .iter()
        .map(|r| Wait {
            wait_type: r.get("wait_type"),
            wait_event: r.get("wait_event"),
            seconds: r.get("seconds"),
            aas: r.get("aas"),
            db_time_pct: r.get("db_time_pct"),
        })
        .collect())
}

pub async fn top_queries(client: &Client, w: Window, limit: i32) -> Result<Vec<Query>> {
    check_limit(limit)?;
    let rows = query(client, TOP_QUERIES, &[&w.since, &w.until, &limit]).await?;
    Ok(rows
        .iter()
        .map(|r| Query {
            query_id: r.get("query_id"),
            query_text: r.get("query_text"),
            seconds: r.get("seconds"),
            aas: r.get("aas"),
            db_time_pct: r.get("db_time_pct"),
            top_wait: r.get("top_wait"),
        })
        .collect())
}

pub async fn cpu_vs_waiting(client: &Client, w: Window) -> Result<CpuVsWaiting> {
    let rows = query(client, CPU_VS_WAITING, &[&w.since, &w.until]).await?;
    let r = rows.first().ok_or(AshError::NotInstalled)?;
    Ok(CpuVsWaiting {
        cpu: r.get("cpu"),
        waiting: r.get("waiting"),
        idle_in_transaction: r.get("idle_in_transaction"),
        covered_seconds: r.get("covered_seconds"),
        window_seconds: r.get("window_seconds"),
    })
}

/// AAS per bucket and wait type; every bucket of the window appears.
pub async fn timeline(client: &Client, w: Window, bucket: Duration) -> Result<Vec<TimelinePoint>> {
    if bucket < Duration::from_secs(1) {
        return Err(AshError::invalid("bucket", "must be at least 1 second"));
    }
    if w.seconds() / bucket.as_secs_f64() > MAX_BUCKETS as f64 {
        return Err(AshError::invalid(
            "bucket",
            format!("the window would have more than {MAX_BUCKETS} buckets"),
        ));
    }
    let secs = bucket.as_secs_f64();
    let rows = query(client, TIMELINE, &[&w.since, &w.until, &secs]).await?;
    Ok(rows
        .iter()
        .map(|r| TimelinePoint {
            bucket_start_ms: ms(r.get("bucket_start")),
            wait_type: r.get("wait_type"),
            aas: r.get("aas"),
            coverage: r.get("coverage"),
        })
        .collect())
}

/// What was running at `moment` (the last sample at or before it, at most a minute old).
pub async fn activity_at(client: &Client, moment: SystemTime) -> Result<Vec<Activity>> {
    let rows = query(client, ACTIVITY_AT, &[&moment]).await?;
    Ok(rows
        .iter()
        .map(|r| Activity {
            sample_at_ms: ms(r.get("sample_at")),
            sessions: r.get("sessions"),
            wait_type: r.get("wait_type"),
            wait_event: r.get("wait_event"),
            query_id: r.get("query_id"),
            query_text: r.get("query_text"),
            database: r.get("database"),
            user_name: r.get("user_name"),
            application: r.get("application"),
            pgferry_role: r.get("pgferry_role"),
            backend_type: r.get("backend_type"),
            queue: r.get("queue"),
            job_kind: r.get("job_kind"),
        })
        .collect())
}

/// Blocking chains at `moment`.
pub async fn blocking_at(client: &Client, moment: SystemTime) -> Result<Vec<Blocking>> {
    let rows = query(client, BLOCKING_AT, &[&moment]).await?;
    Ok(rows
        .iter()
        .map(|r| Blocking {
            sample_at_ms: ms(r.get("sample_at")),
            pid: r.get("pid"),
            sessions: r.get("sessions"),
            blocked_by: r.get("blocked_by"),
            depth: r.get("depth"),
            root_pid: r.get("root_pid"),
            wait_type: r.get("wait_type"),
            wait_event: r.get("wait_event"),
            query_id: r.get("query_id"),
            application: r.get("application"),
            pgferry_role: r.get("pgferry_role"),
        })
        .collect())
}

/// A time as the user wrote it, in any format Postgres accepts (`2026-11-24 05:00+00`,
/// `yesterday`, ...); `field` names the input in errors.
pub async fn parse_time(client: &Client, field: &'static str, s: &str) -> Result<SystemTime> {
    use tokio_postgres::error::SqlState;
    match client.query_one(PARSE_TIME, &[&s]).await {
        Ok(row) => Ok(row.get("t")),
        Err(e)
            if e.code().is_some_and(|c| {
                *c == SqlState::INVALID_DATETIME_FORMAT
                    || *c == SqlState::DATETIME_FIELD_OVERFLOW
                    || *c == SqlState::INVALID_TEXT_REPRESENTATION
            }) =>
        {
            Err(AshError::invalid(
                field,
                format!("{s:?} is not a time Postgres understands"),
            ))
        }
        Err(e) => Err(e.into()),
    }
}
