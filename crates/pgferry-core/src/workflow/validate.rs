//! Input checks of the workflow API: bad input is a typed error naming the field, raised
//! before anything is written.

use serde_json::Value;

use super::client::MAX_PAYLOAD_BYTES;
use super::machine::Outcome;
use crate::error::{Error, Result};

/// Priorities of workflow steps: 0 (least urgent) to 9.
pub const MAX_PRIORITY: u8 = 9;

fn bad(field: &'static str, reason: String) -> Error {
    Error::InvalidArgument { field, reason }
}

/// Step and signal names: 1 to 128 characters, no control characters.
pub(crate) fn name(field: &'static str, v: &str) -> Result<()> {
    if v.is_empty() || v.len() > 128 || v.chars().any(char::is_control) {
        return Err(bad(
            field,
            format!(
                "{:?} must be 1 to 128 characters without control characters",
                v.chars().take(80).collect::<String>()
            ),
        ));
    }
    Ok(())
}

/// Correlation, concurrency and rate keys: 1 to 256 characters.
pub(crate) fn key(field: &'static str, v: &str) -> Result<()> {
    if v.is_empty() || v.len() > 256 {
        return Err(bad(field, "must be 1 to 256 characters".into()));
    }
    Ok(())
}

pub(crate) fn payload(field: &'static str, v: &Value) -> Result<()> {
    // Counted, not collected: every outcome's state passes here before it is encoded.
    let size = crate::job::json_size(v);
    if size > MAX_PAYLOAD_BYTES {
        return Err(bad(
            field,
            format!("{size} bytes is over the limit of {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    Ok(())
}

pub(crate) fn priority(p: u8) -> Result<()> {
    if p > MAX_PRIORITY {
        return Err(bad("priority", format!("{p} is not in 0..={MAX_PRIORITY}")));
    }
    Ok(())
}

pub(crate) fn positive(field: &'static str, n: i32) -> Result<()> {
    if n < 1 {
        return Err(bad(field, format!("{n} is not at least 1")));
    }
    Ok(())
}

pub(crate) fn attempts(n: i32) -> Result<()> {
    if !(1..=crate::job::MAX_ATTEMPTS_LIMIT).contains(&n) {
        return Err(bad(
            "max_attempts",
            format!("{n} is not in 1..={}", crate::job::MAX_ATTEMPTS_LIMIT),
        ));
    }
    Ok(())
}

/// What a handler returned, checked like a request.
pub(crate) fn outcome(o: &Outcome) -> Result<()> {
    match o {
        Outcome::Next { step, state } => {
            name("step", step)?;
            state.as_ref().map_or(Ok(()), |s| payload("state", s))
        }
        Outcome::Retry { .. } | Outcome::Fail { .. } => Ok(()),
        Outcome::Await {
            signals,
            next,
            state,
            ..
        } => {
            name("step", next)?;
            if signals.is_empty() {
                return Err(bad("signals", "an await names at least one signal".into()));
            }
            for s in signals {
                name("signal name", s)?;
            }
            state.as_ref().map_or(Ok(()), |s| payload("state", s))
        }
        Outcome::Sleep { next, state, .. } => {
            name("step", next)?;
            state.as_ref().map_or(Ok(()), |s| payload("state", s))
        }
        Outcome::Spawn {
            children,
            next,
            state,
            ..
        } => {
            name("step", next)?;
            if children.len() > 10_000 {
                return Err(bad(
                    "children",
                    format!("{} children is over the limit of 10000", children.len()),
                ));
            }
            for c in children {
                crate::job::validate_kind(&c.kind)?;
                name("step", &c.step)?;
                payload("input", &c.input)?;
                if let Some(q) = &c.queue {
                    crate::job::validate_queue_name(q)?;
                }
                if let Some(p) = c.priority {
                    priority(p)?;
                }
                if let Some(k) = &c.concurrency_key {
                    key("concurrency_key", k)?;
                }
                if let Some(k) = &c.rate_key {
                    key("rate_key", k)?;
                }
                if let Some(n) = c.max_attempts {
                    attempts(n)?;
                }
                if let Some(n) = c.concurrency_limit {
                    positive("concurrency_limit", n)?;
                }
            }
            state.as_ref().map_or(Ok(()), |s| payload("state", s))
        }
        Outcome::Done { result } => payload("result", result),
    }
}
