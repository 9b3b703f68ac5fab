//! An outcome as a remote worker sends it (one flat object; HTTP JSON, or the gRPC
//! `StepOutcome` converted to it) checked field by field and turned into the engine's
//! [`Outcome`]. Every field present is checked whatever the outcome, so a bad value is
//! never silently ignored; a field the outcome needs and lacks is named too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgferry_core::workflow::{Child, ChildFailure, Join, Outcome};
use serde::Deserialize;
use serde_json::Value;

use super::tenant_key;
use crate::auth::Principal;
use crate::http::extract::has_nul;

/// Longest delay, await timeout or sleep a step may ask for (a year).
pub const MAX_DELAY_MS: u64 = 31_536_000_000;
/// Latest instant a sleep may name (the end of the year 9999).
pub const MAX_UNIX_MS: u64 = 253_402_300_799_000;
pub const MAX_REASON: usize = 8192;
pub const MAX_SIGNALS: usize = 64;
pub const MAX_CHILDREN: usize = 1000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeBody {
    pub token: String,
    pub outcome: String,
    #[serde(default)]
    pub step: Option<String>,
    #[serde(default)]
    pub state: Option<Value>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub signals: Option<Vec<String>>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub until_unix_ms: Option<u64>,
    #[serde(default)]
    pub for_ms: Option<u64>,
    #[serde(default)]
    pub children: Option<Vec<ChildBody>>,
    #[serde(default)]
    pub join: Option<String>,
    #[serde(default)]
    pub on_child_failure: Option<String>,
    #[serde(default)]
    pub result: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildBody {
    pub kind: String,
    #[serde(default)]
    pub input: Value,
    #[serde(default)]
    pub step: Option<String>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub concurrency_key: Option<String>,
    #[serde(default)]
    pub concurrency_limit: Option<i32>,
    #[serde(default)]
    pub rate_key: Option<String>,
    #[serde(default)]
    pub priority: Option<u8>,
    #[serde(default)]
    pub max_attempts: Option<i32>,
}

/// The field of an outcome that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadField {
    pub field: String,
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> BadField {
    BadField {
        field: field.into(),
        message: message.into(),
    }
}

fn text(field: &str, v: &str, min: usize, max: usize) -> Result<(), BadField> {
    let n = v.chars().count();
    if n < min || n > max {
        return Err(bad(field, format!("must be {min} to {max} characters")));
    }
    if v.contains('\0') {
        return Err(bad(field, "may not contain U+0000"));
    }
    Ok(())
}

fn json(field: &str, v: &Option<Value>) -> Result<(), BadField> {
    match v {
        Some(v) if has_nul(v) => Err(bad(field, "strings may not contain U+0000")),
        _ => Ok(()),
    }
}

fn at_most(field: &str, v: Option<u64>, max: u64) -> Result<(), BadField> {
    match v {
        Some(n) if n > max => Err(bad(field, format!("must be at most {max}"))),
        _ => Ok(()),
    }
}

fn need<T>(field: &str, outcome: &str, v: Option<T>) -> Result<T, BadField> {
    v.ok_or_else(|| bad(field, format!("required by outcome {outcome}")))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Checks every field, then builds the outcome for the caller's tenant.
pub fn parse(p: &Principal, b: OutcomeBody) -> Result<(String, Outcome), BadField> {
    text("token", &b.token, 1, 1024)?;
    if let Some(s) = &b.step {
        text("step", s, 1, 128)?;
    }
    json("state", &b.state)?;
    json("result", &b.result)?;
    at_most("delay_ms", b.delay_ms, MAX_DELAY_MS)?;
    at_most("timeout_ms", b.timeout_ms, MAX_DELAY_MS)?;
    at_most("for_ms", b.for_ms, MAX_DELAY_MS)?;
    at_most("until_unix_ms", b.until_unix_ms, MAX_UNIX_MS)?;
    if let Some(r) = &b.reason {
        text("reason", r, 0, MAX_REASON)?;
    }
    if let Some(s) = &b.signals {
        if s.is_empty() || s.len() > MAX_SIGNALS {
            return Err(bad(
                "signals",
                format!("must name 1 to {MAX_SIGNALS} signals"),
            ));
        }
        for (i, name) in s.iter().enumerate() {
            text(&format!("signals[{i}]"), name, 1, 128)?;
        }
    }
    let join = match b.join.as_deref() {
        None | Some("all") => Join::All,
        Some("any") => Join::Any,
        Some(_) => return Err(bad("join", "must be all or any")),
    };
    let on_child_failure = match b.on_child_failure.as_deref() {
        None | Some("fail_parent") => ChildFailure::FailParent,
        Some("deliver") => ChildFailure::Deliver,
        Some(_) => return Err(bad("on_child_failure", "must be fail_parent or deliver")),
    };
    let children = match b.children {
        Some(cs) => {
            if cs.is_empty() || cs.len() > MAX_CHILDREN {
                return Err(bad(
                    "children",
                    format!("must hold 1 to {MAX_CHILDREN} children"),
                ));
            }
            let mut out = Vec::with_capacity(cs.len());
            for (i, c) in cs.into_iter().enumerate() {
                out.push(child(p, &format!("children[{i}]"), c)?);
            }
            Some(out)
        }
        None => None,
    };
    if b.until_unix_ms.is_some() && b.for_ms.is_some() {
        return Err(bad("for_ms", "give until_unix_ms or for_ms, not both"));
    }
    let o = b.outcome.as_str();
    let outcome = match o {
        "next" => Outcome::Next {
            step: need("step", o, b.step)?,
            state: b.state,
        },
        "retry" => Outcome::Retry {
            delay: ms(b.delay_ms.unwrap_or(0)),
            reason: b.reason.unwrap_or_else(|| "retry".into()),
        },
        "await" => Outcome::Await {
            signals: need("signals", o, b.signals)?,
            next: need("step", o, b.step)?,
            timeout: b.timeout_ms.map(ms),
            state: b.state,
        },
        "sleep" => {
            let until = match (b.until_unix_ms, b.for_ms) {
                (Some(t), None) => UNIX_EPOCH + ms(t),
                (None, Some(d)) => SystemTime::now() + ms(d),
                _ => {
                    return Err(bad(
                        "until_unix_ms",
                        "required by outcome sleep (or for_ms)",
                    ))
                }
            };
            Outcome::Sleep {
                until,
                next: need("step", o, b.step)?,
                state: b.state,
            }
        }
        "spawn" => Outcome::Spawn {
            children: need("children", o, children)?,
            next: need("step", o, b.step)?,
            join,
            on_child_failure,
            state: b.state,
        },
        "done" => Outcome::Done {
            result: b.result.unwrap_or(Value::Null),
        },
        "fail" => Outcome::Fail {
            reason: b.reason.unwrap_or_else(|| "failed".into()),
        },
        _ => {
            return Err(bad(
                "outcome",
                "must be next, retry, await, sleep, spawn, done or fail",
            ))
        }
    };
    // What the engine checks beyond the wire's limits (control characters, sizes).
    outcome
        .check()
        .map_err(|e| bad(engine_field(&e), e.public_message()))?;
    Ok((b.token, outcome))
}

fn engine_field(e: &pgferry_core::Error) -> String {
    match e {
        pgferry_core::Error::InvalidName { field, .. }
        | pgferry_core::Error::InvalidArgument { field, .. } => field.to_string(),
        _ => String::new(),
    }
}

fn child(p: &Principal, at: &str, c: ChildBody) -> Result<Child, BadField> {
    let f = |name: &str| format!("{at}.{name}");
    pgferry_core::job::validate_kind(&c.kind).map_err(|e| bad(f("kind"), e.public_message()))?;
    if has_nul(&c.input) {
        return Err(bad(f("input"), "strings may not contain U+0000"));
    }
    let mut out = Child::new(c.kind, c.input);
    if let Some(s) = c.step {
        text(&f("step"), &s, 1, 128)?;
        out.step = s;
    }
    if let Some(q) = c.queue {
        out.queue = Some(
            p.queue(&q)
                .map_err(|e| bad(f("queue"), e.public_message()))?,
        );
    }
    for (name, key, slot) in [
        (
            "concurrency_key",
            c.concurrency_key,
            &mut out.concurrency_key,
        ),
        ("rate_key", c.rate_key, &mut out.rate_key),
    ] {
        if let Some(k) = key {
            text(&f(name), &k, 1, 256)?;
            *slot = Some(tenant_key(p, &k));
        }
    }
    if let Some(n) = c.concurrency_limit {
        if n < 1 {
            return Err(bad(f("concurrency_limit"), "must be at least 1"));
        }
        out.concurrency_limit = Some(n);
    }
    if let Some(n) = c.priority {
        if n > pgferry_core::workflow::MAX_PRIORITY {
            return Err(bad(f("priority"), "must be 0 to 9"));
        }
        out.priority = Some(n);
    }
    if let Some(n) = c.max_attempts {
        if !(1..=pgferry_core::job::MAX_ATTEMPTS_LIMIT).contains(&n) {
            return Err(bad(f("max_attempts"), "must be 1 to 1000"));
        }
        out.max_attempts = Some(n);
    }
    Ok(out)
}
