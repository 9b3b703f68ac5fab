//! The journal of a code-first instance: what its workflow function did so far, in order.
//! It is the instance's `state` (`{"journal": [...]}`), so an outcome that writes state
//! writes the journal in the same statement: no table of its own, no extra round trip.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One recorded call of the context, in the order the workflow made them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Entry {
    /// A step ended: its result, or the error it ended with after its retries.
    Step {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        err: Option<String>,
    },
    /// A sleep until this instant (milliseconds since the epoch).
    Sleep { until_ms: f64 },
    /// A wait for one of `names`; `done` once resumed, `got` None on a timeout.
    Signal {
        names: Vec<String>,
        #[serde(default)]
        done: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        got: Option<SignalRecord>,
    },
    /// Children started together and joined; `results` once joined.
    Children {
        kinds: Vec<String>,
        /// Joined by the first to end (`first_of`), the others cancelled.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        any: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        results: Option<Vec<ChildRecord>>,
    },
    /// `ctx.now()`, milliseconds since the epoch.
    Now { ms: f64 },
    /// `ctx.random()`.
    Random { v: u64 },
    /// `ctx.patched(name)` on a run that took the new branch.
    Patch { name: String },
}

impl Entry {
    /// What a divergence report calls this entry: the call and its name.
    pub fn label(&self) -> String {
        match self {
            Entry::Step { name, .. } => format!("step {name:?}"),
            Entry::Sleep { .. } => "sleep".into(),
            Entry::Signal { names, .. } => format!("wait_for_signal {names:?}"),
            Entry::Children { kinds, any, .. } => {
                format!("{} {kinds:?}", if *any { "first_of" } else { "children" })
            }
            Entry::Now { .. } => "now".into(),
            Entry::Random { .. } => "random".into(),
            Entry::Patch { name } => format!("patched {name:?}"),
        }
    }
}

/// A signal as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalRecord {
    pub signal_id: i64,
    pub name: String,
    pub payload: Value,
}

/// A joined child as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildRecord {
    pub id: i64,
    pub kind: String,
    /// done, failed or cancelled.
    pub status: String,
    pub result: Option<Value>,
    pub error: Option<String>,
}

/// Reads the journal out of an instance's state (`{}` for a new instance: an empty one).
pub fn from_state(state: &Value) -> Result<Vec<Entry>, String> {
    match state.get("journal") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(j) => serde_json::from_value(j.clone()).map_err(|e| format!("journal: {e}")),
    }
}

/// The state that holds `journal`.
pub fn to_state(journal: &[Entry]) -> Value {
    json!({ "journal": journal })
}
