//! A job as the API shows it (`GET /v1/jobs/{id}`, each job of `GET /v1/jobs`, the
//! answers of cancel and retry), written straight from the engine's [`JobInfo`].

use std::time::{SystemTime, UNIX_EPOCH};

use pgferry_core::{JobInfo, JsonText};
use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::Value;

use crate::auth::{user_queue, Principal};

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn job_json(p: &Principal, j: &JobInfo) -> Value {
    serde_json::to_value(JobView::new(p, j)).unwrap_or(Value::Null)
}

/// A job as the API shows it, serialized straight from the engine's [`JobInfo`]: a page of
/// 50 jobs is written to the response without a `Value` tree per job (nor a copy of each
/// job's args and meta), which was the largest share of a listing's time in this process
/// (issue 22's profile). Fields are declared in name order: the same bytes as the `Value`
/// form (serde_json's maps keep their keys sorted). Args and meta are written as the text
/// Postgres keeps (ADR 0026), in jsonb's key order.
#[derive(Serialize)]
pub(crate) struct JobView<'a> {
    args: &'a JsonText,
    attempts: Vec<AttemptView<'a>>,
    cancel_requested: bool,
    enqueued_at_unix_ms: Option<u64>,
    id: i64,
    kind: &'a str,
    max_attempts: i32,
    meta: MetaView<'a>,
    priority: i16,
    queue: &'a str,
    result: &'a Option<Value>,
    run_at_unix_ms: Option<u64>,
    state: &'static str,
    unique_key: &'a Option<String>,
}

/// A job's meta: `{}` when it has none.
struct MetaView<'a>(Option<&'a JsonText>);

impl Serialize for MetaView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => v.serialize(s),
            None => s.serialize_map(Some(0))?.end(),
        }
    }
}

#[derive(Serialize)]
struct AttemptView<'a> {
    attempt: i32,
    claimed_at_unix_ms: Option<u64>,
    duration_ms: Option<i32>,
    error: &'a Option<String>,
    finished_at_unix_ms: Option<u64>,
    outcome: &'static str,
    worker: &'a Option<String>,
}

impl<'a> JobView<'a> {
    pub(crate) fn new(p: &Principal, j: &'a JobInfo) -> Self {
        JobView {
            args: &j.args,
            attempts: j
                .attempts
                .iter()
                .map(|a| AttemptView {
                    attempt: a.attempt,
                    claimed_at_unix_ms: a.claimed_at.map(unix_ms),
                    duration_ms: a.duration_ms,
                    error: &a.error,
                    finished_at_unix_ms: a.finished_at.map(unix_ms),
                    outcome: a.outcome,
                    worker: &a.worker,
                })
                .collect(),
            cancel_requested: j.cancel_requested,
            enqueued_at_unix_ms: j.enqueued_at.map(unix_ms),
            id: j.id,
            kind: &j.kind,
            max_attempts: j.max_attempts,
            meta: MetaView(j.meta.as_ref()),
            priority: j.priority,
            queue: user_queue(p.tenant_id, &j.queue).unwrap_or_default(),
            result: &j.result,
            run_at_unix_ms: j.run_at.map(unix_ms),
            state: j.state.as_str(),
            unique_key: &j.unique_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use pgferry_core::{AttemptInfo, JobInfo, JobState, JsonText};
    use serde_json::json;

    use super::{job_json, unix_ms, JobView};
    use crate::auth::{Principal, Scopes};

    /// The form `job_json` had as a `json!` tree, field for field.
    fn as_tree(p: &Principal, j: &JobInfo) -> serde_json::Value {
        let attempts: Vec<serde_json::Value> = j
            .attempts
            .iter()
            .map(|a| {
                json!({
                    "attempt": a.attempt,
                    "outcome": a.outcome,
                    "error": a.error,
                    "duration_ms": a.duration_ms,
                    "claimed_at_unix_ms": a.claimed_at.map(unix_ms),
                    "worker": a.worker,
                    "finished_at_unix_ms": a.finished_at.map(unix_ms),
                })
            })
            .collect();
        json!({
            "id": j.id,
            "queue": crate::auth::user_queue(p.tenant_id, &j.queue).unwrap_or_default(),
            "kind": j.kind,
            "state": j.state.as_str(),
            "args": j.args,
            "meta": j.meta.as_ref().map_or_else(|| json!({}), |m| m.to_value()),
            "priority": j.priority,
            "max_attempts": j.max_attempts,
            "enqueued_at_unix_ms": j.enqueued_at.map(unix_ms),
            "run_at_unix_ms": j.run_at.map(unix_ms),
            "cancel_requested": j.cancel_requested,
            "attempts": attempts,
            "result": j.result,
            "unique_key": j.unique_key,
        })
    }

    fn text(s: &str) -> JsonText {
        serde_json::from_str::<serde_json::Value>(s)
            .map(|v| JsonText::from_value(&v))
            .unwrap()
    }

    #[test]
    fn the_view_writes_the_bytes_the_value_tree_wrote() {
        let p = Principal {
            tenant_id: 7,
            tenant: "acme".into(),
            key_id: 1,
            scopes: Scopes::all(),
        };
        let at = |ms: u64| Some(UNIX_EPOCH + Duration::from_millis(ms));
        let full = JobInfo {
            id: 42,
            queue: "t7.http".into(),
            kind: "http".into(),
            state: JobState::Completed,
            args: text(r#"{"a": {"b": "c"}, "z": [1, 2.5, null], "url": "http://x/"}"#),
            meta: Some(text(r#"{"k": "v", "traceparent": "00-x"}"#)),
            priority: 2,
            max_attempts: 5,
            enqueued_at: at(1_700_000_000_123),
            run_at: at(1_700_000_001_000),
            attempts: vec![
                AttemptInfo {
                    attempt: 1,
                    outcome: "failed",
                    error: Some("boom \"quoted\"".into()),
                    duration_ms: Some(12),
                    claimed_at: at(1_700_000_002_000),
                    worker: Some("w1".into()),
                    finished_at: at(1_700_000_002_012),
                },
                AttemptInfo {
                    attempt: 2,
                    outcome: "completed",
                    error: None,
                    duration_ms: None,
                    claimed_at: None,
                    worker: None,
                    finished_at: None,
                },
            ],
            cancel_requested: true,
            result: Some(json!({"ok": true})),
            unique_key: Some("u-1".into()),
        };
        let bare = JobInfo {
            queue: "t8.other".into(),
            state: JobState::Scheduled,
            meta: None,
            enqueued_at: None,
            run_at: None,
            attempts: vec![],
            cancel_requested: false,
            result: None,
            unique_key: None,
            ..full.clone()
        };
        for j in [&full, &bare] {
            let tree = serde_json::to_vec(&as_tree(&p, j)).unwrap();
            let view = serde_json::to_vec(&JobView::new(&p, j)).unwrap();
            assert_eq!(
                String::from_utf8(view).unwrap(),
                String::from_utf8(tree).unwrap()
            );
            assert_eq!(job_json(&p, j), as_tree(&p, j));
        }
    }
}
