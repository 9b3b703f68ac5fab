//! A schedule's definition, its policies and their validation (every error names the field
//! as the HTTP API spells it).

use std::time::SystemTime;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Result, ScheduleError};
use crate::timing::Timing;

/// What happens to fires the engine could not make on time (it was down, or the leader was
/// being replaced) once they are older than the schedule's grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// None of them runs; each is recorded as `missed`.
    Skip,
    /// The latest one within the catch-up window runs (unless an on-time fire runs anyway).
    RunOnce,
    /// The latest `catchup_max` within the catch-up window run, oldest first.
    RunAll,
}

/// What a fire does while the job of the previous fire is still pending or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    Allow,
    /// Not run; recorded as `skipped` with the reason.
    Skip,
    /// One fire waits and runs when the previous run ends; further ones are skipped.
    BufferOne,
    /// The previous job is cancelled, then the fire runs.
    CancelPrevious,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::RunOnce => "run_once",
            Missed::RunAll => "run_all",
        }
    }
    pub fn parse(s: &str) -> Result<Missed> {
        serde_json::from_value(Value::String(s.into()))
            .map_err(|_| ScheduleError::invalid("missed", "must be one of skip, run_once, run_all"))
    }
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }
    pub fn parse(s: &str) -> Result<Overlap> {
        serde_json::from_value(Value::String(s.into())).map_err(|_| {
            ScheduleError::invalid(
                "overlap",
                "must be one of allow, skip, buffer_one, cancel_previous",
            )
        })
    }
}

/// What a fire starts. Queue names are the engine's (the server maps a tenant's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Target {
    Job {
        queue: String,
        kind: String,
        #[serde(default)]
        args: Value,
        #[serde(default)]
        priority: u8,
        #[serde(default)]
        max_attempts: Option<i32>,
    },
    /// A workflow instance of `kind`; its correlation key is `schedule:<id>:<fire time>`.
    Workflow {
        queue: String,
        kind: String,
        #[serde(default)]
        input: Value,
    },
}

impl Target {
    pub fn queue(&self) -> &str {
        match self {
            Target::Job { queue, .. } | Target::Workflow { queue, .. } => queue,
        }
    }
}

/// A schedule to create.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    pub name: String,
    pub cron: Option<String>,
    pub interval_ms: Option<i64>,
    pub timezone: String,
    pub jitter_ms: i64,
    pub start_at: Option<SystemTime>,
    pub end_at: Option<SystemTime>,
    pub paused: bool,
    pub target: Target,
    pub missed: Missed,
    pub catchup_window_ms: i64,
    pub catchup_max: i32,
    pub overlap: Overlap,
    pub grace_ms: i64,
}

impl NewSchedule {
    /// A cron schedule in UTC with the default policies.
    pub fn cron(name: impl Into<String>, expr: impl Into<String>, target: Target) -> NewSchedule {
        NewSchedule {
            name: name.into(),
            cron: Some(expr.into()),
            interval_ms: None,
            timezone: "UTC".into(),
            jitter_ms: 0,
            start_at: None,
            end_at: None,
            paused: false,
            target,
            missed: Missed::RunOnce,
            catchup_window_ms: 3_600_000,
            catchup_max: 10,
            overlap: Overlap::Allow,
            grace_ms: 60_000,
        }
    }

    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        match (&self.cron, self.interval_ms) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(ScheduleError::invalid(
                    "cron",
                    "give exactly one of cron and interval_ms",
                ))
            }
            _ => {}
        }
        if self.cron.as_ref().is_some_and(|c| c.len() > 256) {
            return Err(ScheduleError::invalid("cron", "at most 256 characters"));
        }
        if self.timezone.len() > 64 {
            return Err(ScheduleError::invalid("timezone", "at most 64 characters"));
        }
        self.timing(SystemTime::now())?;
        // A cron is read in the zone (timing checked it); an interval ignores it, but a
        // stored and shown zone must still be one.
        if self.cron.is_none() {
            crate::timing::zone(&self.timezone)?;
        }
        let ms = |field: &'static str, v: i64, max: i64| {
            if (0..=max).contains(&v) {
                Ok(())
            } else {
                Err(ScheduleError::invalid(
                    field,
                    format!("must be 0 to {max} milliseconds"),
                ))
            }
        };
        const DAY: i64 = 86_400_000;
        ms("jitter_ms", self.jitter_ms, DAY)?;
        ms("catchup_window_ms", self.catchup_window_ms, 366 * DAY)?;
        ms("grace_ms", self.grace_ms, 366 * DAY)?;
        if !(1..=1000).contains(&self.catchup_max) {
            return Err(ScheduleError::invalid("catchup_max", "must be 1 to 1000"));
        }
        if let (Some(s), Some(e)) = (self.start_at, self.end_at) {
            if e <= s {
                return Err(ScheduleError::invalid("end_at", "must be after start_at"));
            }
        }
        match &self.target {
            Target::Job {
                kind, max_attempts, ..
            } => {
                pgferry_core::job::validate_kind(kind)?;
                if max_attempts.is_some_and(|n| !(1..=1000).contains(&n)) {
                    return Err(ScheduleError::invalid(
                        "target.max_attempts",
                        "must be 1 to 1000",
                    ));
                }
            }
            Target::Workflow { kind, .. } => pgferry_core::job::validate_kind(kind)?,
        }
        pgferry_core::job::validate_queue_name(self.target.queue())?;
        Ok(())
    }

    /// The timing; intervals count from `start_at`, else from `created`.
    pub fn timing(&self, created: SystemTime) -> Result<Timing> {
        match (&self.cron, self.interval_ms) {
            (Some(expr), _) => Timing::cron(expr, &self.timezone),
            (None, Some(ms)) => Timing::interval(ms, ts(self.start_at.unwrap_or(created))),
            (None, None) => Err(ScheduleError::invalid("cron", "missing")),
        }
    }
}

pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(ScheduleError::invalid(
            "name",
            "must be 1 to 128 characters of letters, digits, - _ . :",
        ))
    }
}

/// A stored schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub id: i64,
    pub tenant_id: i64,
    pub spec: NewSchedule,
    pub next_fire_at: Option<SystemTime>,
    pub last_fire_at: Option<SystemTime>,
    pub last_job_id: Option<i64>,
    pub buffered_fire_at: Option<SystemTime>,
    pub created_at: SystemTime,
}

impl Schedule {
    pub fn from_row(row: &tokio_postgres::Row) -> Result<Schedule> {
        let target: Value = row.try_get("target")?;
        let target: Target = serde_json::from_value(target)
            .map_err(|e| ScheduleError::invalid("target", e.to_string()))?;
        Ok(Schedule {
            id: row.try_get("id")?,
            tenant_id: row.try_get("tenant_id")?,
            spec: NewSchedule {
                name: row.try_get("name")?,
                cron: row.try_get("cron")?,
                interval_ms: row.try_get("interval_ms")?,
                timezone: row.try_get("timezone")?,
                jitter_ms: row.try_get("jitter_ms")?,
                start_at: row.try_get("start_at")?,
                end_at: row.try_get("end_at")?,
                paused: row.try_get("paused")?,
                target,
                missed: Missed::parse(row.try_get("missed")?)?,
                catchup_window_ms: row.try_get("catchup_window_ms")?,
                catchup_max: row.try_get("catchup_max")?,
                overlap: Overlap::parse(row.try_get("overlap")?)?,
                grace_ms: row.try_get("grace_ms")?,
            },
            next_fire_at: row.try_get("next_fire_at")?,
            last_fire_at: row.try_get("last_fire_at")?,
            last_job_id: row.try_get("last_job_id")?,
            buffered_fire_at: row.try_get("buffered_fire_at")?,
            created_at: row.try_get("created_at")?,
        })
    }

    pub fn timing(&self) -> Result<Timing> {
        self.spec.timing(self.created_at)
    }

    /// The first fire strictly after `after` within start/end.
    pub fn next_after(&self, after: SystemTime) -> Result<Option<SystemTime>> {
        first_fire(&self.spec, &self.timing()?, after)
    }

    /// The next `n` fires after `after` (the preview).
    pub fn upcoming(&self, after: SystemTime, n: usize) -> Result<Vec<SystemTime>> {
        let timing = self.timing()?;
        let mut out = Vec::new();
        let mut at = after;
        while out.len() < n {
            match first_fire(&self.spec, &timing, at)? {
                Some(t) => {
                    out.push(t);
                    at = t;
                }
                None => break,
            }
        }
        Ok(out)
    }
}

/// The first fire strictly after `after`, not before start_at and not after end_at.
pub fn first_fire(
    spec: &NewSchedule,
    timing: &Timing,
    after: SystemTime,
) -> Result<Option<SystemTime>> {
    let mut from = ts(after);
    if let Some(start) = spec.start_at {
        // A fire exactly at start_at counts.
        let just_before = ts(start) - jiff::SignedDuration::from_nanos(1);
        from = from.max(just_before);
    }
    let Some(next) = timing.next_after(from) else {
        return Ok(None);
    };
    let next = st(next);
    Ok(spec.end_at.is_none_or(|e| next <= e).then_some(next))
}

pub(crate) fn ts(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(crate) fn st(t: Timestamp) -> SystemTime {
    SystemTime::from(t)
}

/// An RFC 3339 instant from the API; the error names `field`.
pub fn parse_time(field: &'static str, text: &str) -> Result<SystemTime> {
    let t: Timestamp = text
        .parse()
        .map_err(|e| ScheduleError::invalid(field, format!("not an RFC 3339 time ({e})")))?;
    Ok(SystemTime::from(t))
}

/// An instant as the API shows it (RFC 3339, UTC).
pub fn format_time(t: SystemTime) -> String {
    ts(t).to_string()
}
