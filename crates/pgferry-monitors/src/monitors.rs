//! Heartbeat monitors (dead-man switches): a job pings `/ping/{token}` when it ran (or
//! `/start` before and `/fail` on failure); a monitor that misses its deadline (expected
//! run plus grace) turns late, one that fails `failure_threshold` times in a row turns
//! down, and the next good ping recovers it. Each transition records one alert and
//! notifies, in the transaction that makes it.
//!
//! States: `new` (never pinged: nothing expected yet), `up`, `late`, `down`, `paused`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgferry_core::Engine;
use pgferry_schedules::schedule::format_time;
use pgferry_schedules::timing::Timing;
use serde_json::json;
use tokio_postgres::{GenericClient, Transaction};

use crate::alerts::{self, Event};
use crate::error::{validate_name, MonitorError, Result};

const INSERT: &str = include_str!("../sql/monitor_insert.sql");
const GET: &str = include_str!("../sql/monitor_get.sql");
const GET_FOR_UPDATE: &str = include_str!("../sql/monitor_get_for_update.sql");
const BY_TOKEN: &str = include_str!("../sql/monitor_by_token.sql");
const LIST: &str = include_str!("../sql/monitor_list.sql");
const DELETE: &str = include_str!("../sql/monitor_delete.sql");
pub(crate) const SET: &str = include_str!("../sql/monitor_set.sql");
pub(crate) const REALERT_SET: &str = include_str!("../sql/monitor_realert_set.sql");
const PING_INSERT: &str = include_str!("../sql/ping_insert.sql");
const PING_TRIM: &str = include_str!("../sql/ping_trim.sql");
const PING_LIST: &str = include_str!("../sql/ping_list.sql");

/// Pings kept per monitor.
pub const PING_HISTORY: i64 = 100;
/// Longest ping body kept (bytes; longer ones are cut at a character boundary).
pub const MAX_PING_BODY: usize = 1000;
/// Longest period and grace: 366 days.
pub const MAX_MS: i64 = 366 * 86_400_000;
pub const MAX_THRESHOLD: i32 = 100;
/// Most notification targets one monitor names.
pub const MAX_ROUTES: usize = 10;
/// Shortest interval of repeated alerts: one minute.
pub const MIN_REALERT_MS: i64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingKind {
    /// The run finished well (`/ping/{token}`).
    Success,
    /// A run began (`/ping/{token}/start`): it must finish within the grace.
    Start,
    /// The run failed (`/ping/{token}/fail`).
    Fail,
}

impl PingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PingKind::Success => "success",
            PingKind::Start => "start",
            PingKind::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewMonitor {
    pub name: String,
    pub period_ms: Option<i64>,
    pub cron: Option<String>,
    pub timezone: String,
    pub grace_ms: i64,
    /// Consecutive failed pings before the monitor is down (flap suppression).
    pub failure_threshold: i32,
    /// The notification targets (by name) its alerts go to; None: every target of the
    /// tenant whose event filter matches.
    pub targets: Option<Vec<String>>,
    /// While late or down, the alert is repeated this often (None: once per outage).
    pub realert_ms: Option<i64>,
}

impl NewMonitor {
    pub fn every(name: impl Into<String>, period_ms: i64, grace_ms: i64) -> NewMonitor {
        NewMonitor {
            name: name.into(),
            period_ms: Some(period_ms),
            cron: None,
            timezone: "UTC".into(),
            grace_ms,
            failure_threshold: 1,
            targets: None,
            realert_ms: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        validate_name("name", &self.name)?;
        if self.cron.as_ref().is_some_and(|c| c.len() > 256) {
            return Err(MonitorError::invalid("cron", "at most 256 characters"));
        }
        if self.timezone.len() > 64 {
            return Err(MonitorError::invalid("timezone", "at most 64 characters"));
        }
        match (&self.period_ms, &self.cron) {
            (Some(p), None) => {
                if !(1000..=MAX_MS).contains(p) {
                    return Err(MonitorError::invalid(
                        "period_ms",
                        format!("must be 1000 (one second) to {MAX_MS} (366 days)"),
                    ));
                }
            }
            (None, Some(c)) => {
                Timing::cron(c, &self.timezone)?;
            }
            _ => {
                return Err(MonitorError::invalid(
                    "period_ms",
                    "give exactly one of period_ms and cron",
                ))
            }
        }
        if self.period_ms.is_some() {
            pgferry_schedules::timing::zone(&self.timezone)?;
        }
        if !(0..=MAX_MS).contains(&self.grace_ms) {
            return Err(MonitorError::invalid(
                "grace_ms",
                format!("must be 0 to {MAX_MS}"),
            ));
        }
        if !(1..=MAX_THRESHOLD).contains(&self.failure_threshold) {
            return Err(MonitorError::invalid(
                "failure_threshold",
                format!("must be 1 to {MAX_THRESHOLD}"),
            ));
        }
        if let Some(t) = &self.targets {
            if t.is_empty() || t.len() > MAX_ROUTES {
                return Err(MonitorError::invalid(
                    "targets",
                    format!("1 to {MAX_ROUTES} notification target names (omit for all)"),
                ));
            }
            for name in t {
                validate_name("targets", name)?;
            }
            if (1..t.len()).any(|i| t[..i].contains(&t[i])) {
                return Err(MonitorError::invalid("targets", "a name is given twice"));
            }
        }
        if self
            .realert_ms
            .is_some_and(|r| !(MIN_REALERT_MS..=MAX_MS).contains(&r))
        {
            return Err(MonitorError::invalid(
                "realert_ms",
                format!("must be {MIN_REALERT_MS} (one minute) to {MAX_MS}"),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Monitor {
    pub id: i64,
    pub tenant_id: i64,
    pub spec: NewMonitor,
    pub token: String,
    pub state: String,
    pub due_at: Option<SystemTime>,
    pub started_at: Option<SystemTime>,
    pub consecutive_failures: i32,
    pub last_ping_at: Option<SystemTime>,
    pub created_at: SystemTime,
}

impl Monitor {
    pub(crate) fn from_row(r: &tokio_postgres::Row) -> Result<Monitor> {
        Ok(Monitor {
            id: r.try_get("id")?,
            tenant_id: r.try_get("tenant_id")?,
            spec: NewMonitor {
                name: r.try_get("name")?,
                period_ms: r.try_get("period_ms")?,
                cron: r.try_get("cron")?,
                timezone: r.try_get("timezone")?,
                grace_ms: r.try_get("grace_ms")?,
                failure_threshold: r.try_get("failure_threshold")?,
                targets: r.try_get("targets")?,
                realert_ms: r.try_get("realert_ms")?,
            },
            token: r.try_get("token")?,
            state: r.try_get("state")?,
            due_at: r.try_get("due_at")?,
            started_at: r.try_get("started_at")?,
            consecutive_failures: r.try_get("consecutive_failures")?,
            last_ping_at: r.try_get("last_ping_at")?,
            created_at: r.try_get("created_at")?,
        })
    }

    fn grace(&self) -> Duration {
        Duration::from_millis(self.spec.grace_ms.max(0) as u64)
    }

    /// When the next run is expected after one at `t` (period or next cron time).
    pub fn expected_after(&self, t: SystemTime) -> Result<Option<SystemTime>> {
        if let Some(p) = self.spec.period_ms {
            return Ok(Some(t + Duration::from_millis(p as u64)));
        }
        let timing = Timing::cron(self.spec.cron.as_deref().unwrap_or(""), &self.spec.timezone)?;
        let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        Ok(timing.next_after(ts).map(SystemTime::from))
    }

    /// The deadline after a completed (or failed) run at `t`.
    fn deadline_after(&self, t: SystemTime) -> Result<Option<SystemTime>> {
        Ok(self.expected_after(t)?.map(|e| e + self.grace()))
    }

    /// Writes the monitor's new state.
    async fn set<C: GenericClient>(
        &self,
        c: &C,
        state: &str,
        due_at: Option<SystemTime>,
        started_at: Option<SystemTime>,
        failures: i32,
        last_ping_at: Option<SystemTime>,
    ) -> Result<Monitor> {
        let r = c
            .query_one(
                SET,
                &[
                    &self.id,
                    &state,
                    &due_at,
                    &started_at,
                    &failures,
                    &last_ping_at,
                ],
            )
            .await?;
        Monitor::from_row(&r)
    }

    /// After an alert of an outage at `now`: the first repeat is due `realert_ms` later
    /// (nothing when repeats are off).
    pub(crate) async fn schedule_repeat<C: GenericClient>(
        &self,
        c: &C,
        now: SystemTime,
    ) -> Result<()> {
        if let Some(every) = self.spec.realert_ms {
            let at = now + Duration::from_millis(every.max(0) as u64);
            c.execute(REALERT_SET, &[&self.id, &at]).await?;
        }
        Ok(())
    }
}

/// One recorded ping.
#[derive(Debug, Clone, PartialEq)]
pub struct Ping {
    pub kind: String,
    pub at: SystemTime,
    pub body: Option<String>,
}

/// A new unguessable ping token (256 bits, hex).
fn new_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Monitors on the engine's database, scoped to one tenant per call (pings by token).
#[derive(Clone)]
pub struct Monitors {
    engine: Arc<Engine>,
}

impl Monitors {
    pub fn new(engine: Arc<Engine>) -> Monitors {
        Monitors { engine }
    }

    pub async fn create(&self, tenant_id: i64, m: &NewMonitor) -> Result<Monitor> {
        m.validate()?;
        let c = self.engine.pool().get().await?;
        let row = c
            .query_opt(
                INSERT,
                &[
                    &tenant_id,
                    &m.name,
                    &new_token(),
                    &m.period_ms,
                    &m.cron,
                    &m.timezone,
                    &m.grace_ms,
                    &m.failure_threshold,
                    &"new",
                    &m.targets,
                    &m.realert_ms,
                ],
            )
            .await?;
        match row {
            Some(r) => Monitor::from_row(&r),
            None => Err(MonitorError::Exists {
                what: "monitor",
                name: m.name.clone(),
            }),
        }
    }

    pub async fn get(&self, tenant_id: i64, name: &str) -> Result<Monitor> {
        let c = self.engine.pool().get().await?;
        match c.query_opt(GET, &[&tenant_id, &name]).await? {
            Some(r) => Monitor::from_row(&r),
            None => Err(MonitorError::not_found("monitor")),
        }
    }

    pub async fn list(&self, tenant_id: i64, after: &str, limit: i64) -> Result<Vec<Monitor>> {
        let c = self.engine.pool().get().await?;
        let rows = c.query(LIST, &[&tenant_id, &after, &limit]).await?;
        rows.iter().map(Monitor::from_row).collect()
    }

    pub async fn delete(&self, tenant_id: i64, name: &str) -> Result<()> {
        let c = self.engine.pool().get().await?;
        match c.execute(DELETE, &[&tenant_id, &name]).await? {
            0 => Err(MonitorError::not_found("monitor")),
            _ => Ok(()),
        }
    }

    /// Pauses (nothing expected, pings only recorded) or resumes: a resumed monitor that
    /// was pinged before expects its next run from now; one never pinged is `new` again.
    pub async fn set_paused(&self, tenant_id: i64, name: &str, paused: bool) -> Result<Monitor> {
        let mut c = self.engine.pool().get().await?;
        let tx = c.transaction().await?;
        let m = match tx.query_opt(GET_FOR_UPDATE, &[&tenant_id, &name]).await? {
            Some(r) => Monitor::from_row(&r)?,
            None => return Err(MonitorError::not_found("monitor")),
        };
        let out = if paused {
            m.set(&*tx, "paused", None, None, 0, m.last_ping_at).await?
        } else if m.state != "paused" {
            m
        } else if m.last_ping_at.is_none() {
            m.set(&*tx, "new", None, None, 0, None).await?
        } else {
            let due = m.deadline_after(SystemTime::now())?;
            m.set(&*tx, "up", due, None, 0, m.last_ping_at).await?
        };
        tx.commit().await?;
        Ok(out)
    }

    /// The newest pings, newest first.
    pub async fn pings(&self, tenant_id: i64, name: &str, limit: i64) -> Result<Vec<Ping>> {
        self.get(tenant_id, name).await?;
        let c = self.engine.pool().get().await?;
        let rows = c.query(PING_LIST, &[&tenant_id, &name, &limit]).await?;
        rows.iter()
            .map(|r| {
                Ok(Ping {
                    kind: r.try_get("kind")?,
                    at: r.try_get("at")?,
                    body: r.try_get("body")?,
                })
            })
            .collect()
    }

    /// A ping by token at the current time. `NotFound` for an unknown token. Returns once
    /// committed.
    pub async fn ping(&self, token: &str, kind: PingKind, body: Option<&str>) -> Result<Monitor> {
        self.ping_at(token, kind, body, SystemTime::now()).await
    }

    /// A ping received at `now` (tests drive time through it).
    pub async fn ping_at(
        &self,
        token: &str,
        kind: PingKind,
        body: Option<&str>,
        now: SystemTime,
    ) -> Result<Monitor> {
        // Tokens are 64 hex digits: anything else is unknown without a lookup.
        if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MonitorError::not_found("monitor"));
        }
        let mut c = self.engine.pool().get().await?;
        let tx = c.transaction().await?;
        let m = match tx.query_opt(BY_TOKEN, &[&token]).await? {
            Some(r) => Monitor::from_row(&r)?,
            None => return Err(MonitorError::not_found("monitor")),
        };
        let body = body.map(|b| cut(b, MAX_PING_BODY));
        tx.execute(PING_INSERT, &[&m.id, &kind.as_str(), &now, &body])
            .await?;
        tx.execute(PING_TRIM, &[&m.id, &PING_HISTORY]).await?;
        let before = m.state.clone();
        let out = apply_ping(&self.engine, &tx, m, kind, now).await?;
        tx.commit().await?;
        if out.state != before {
            // A transition may have notified (an alert's HTTP jobs, `enqueue_tx`): tell the
            // ticker now that they exist.
            self.engine.signals().growth().grew();
        }
        crate::metrics::ping(kind);
        Ok(out)
    }
}

/// A ping's transition (see the module doc), with its alert.
async fn apply_ping(
    engine: &Engine,
    tx: &Transaction<'_>,
    m: Monitor,
    kind: PingKind,
    now: SystemTime,
) -> Result<Monitor> {
    if m.state == "paused" {
        return Ok(m);
    }
    let alerting = m.state == "late" || m.state == "down";
    let name = m.spec.name.clone();
    match kind {
        PingKind::Success => {
            let due = m.deadline_after(now)?;
            let out = m.set(tx, "up", due, None, 0, Some(now)).await?;
            if alerting {
                let reason = format!("pinged at {} after being {}", format_time(now), m.state);
                let details = json!({"previous": m.state});
                alerts::raise(
                    engine,
                    tx,
                    m.tenant_id,
                    ("monitor", &name, m.spec.targets.as_deref()),
                    "recovered",
                    &reason,
                    now,
                    details,
                )
                .await?;
            }
            Ok(out)
        }
        PingKind::Start => {
            let state = if m.state == "new" { "up" } else { &m.state };
            let due = Some(now + m.grace());
            let failures = m.consecutive_failures;
            m.set(tx, state, due, Some(now), failures, Some(now)).await
        }
        PingKind::Fail => {
            let failures = m.consecutive_failures.saturating_add(1);
            let due = m.deadline_after(now)?;
            let down = failures >= m.spec.failure_threshold;
            let state = match (down, m.state.as_str()) {
                (true, _) => "down",
                (false, "new") => "up",
                (false, s) => s,
            }
            .to_string();
            let out = m.set(tx, &state, due, None, failures, Some(now)).await?;
            if down && m.state != "down" {
                let reason = format!(
                    "{failures} consecutive failed runs (threshold {})",
                    m.spec.failure_threshold
                );
                let details = json!({
                    "consecutive_failures": failures,
                    "failure_threshold": m.spec.failure_threshold,
                    "previous": m.state,
                });
                alerts::raise(
                    engine,
                    tx,
                    m.tenant_id,
                    ("monitor", &name, m.spec.targets.as_deref()),
                    "failed",
                    &reason,
                    now,
                    details,
                )
                .await?;
                out.schedule_repeat(tx, now).await?;
            }
            Ok(out)
        }
    }
}

/// Marks a due monitor late (the duty's verdict), recording one alert unless it already
/// alerts; returns the alert's event for the caller to notify. Called with the monitor's
/// row locked.
pub(crate) async fn mark_late(
    tx: &Transaction<'_>,
    m: Monitor,
    now: SystemTime,
) -> Result<Option<(i64, Event)>> {
    let Some(due) = m.due_at else {
        return Ok(None);
    };
    let reason = match (m.started_at, m.last_ping_at) {
        (Some(s), _) => format!(
            "started at {} and not finished within its grace of {} ms",
            format_time(s),
            m.spec.grace_ms
        ),
        (None, Some(p)) => format!(
            "no ping since {}; expected by {} (grace {} ms)",
            format_time(p),
            format_time(due),
            m.spec.grace_ms
        ),
        (None, None) => format!("no ping by {}", format_time(due)),
    };
    let alerting = m.state == "late" || m.state == "down";
    let state = if alerting {
        m.state.clone()
    } else {
        "late".into()
    };
    let failures = m.consecutive_failures;
    let last = m.last_ping_at;
    m.set(tx, &state, None, None, failures, last).await?;
    if alerting {
        return Ok(None);
    }
    let details = json!({
        "due_at": format_time(due),
        "started_at": m.started_at.map(format_time),
        "last_ping_at": m.last_ping_at.map(format_time),
    });
    let (_, mut event) = alerts::record(
        tx,
        m.tenant_id,
        "monitor",
        &m.spec.name,
        "late",
        &reason,
        now,
        details,
    )
    .await?;
    event.routes = m.spec.targets.clone();
    m.schedule_repeat(tx, now).await?;
    Ok(Some((m.tenant_id, event)))
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
