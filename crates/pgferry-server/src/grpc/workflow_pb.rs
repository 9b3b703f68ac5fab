//! WorkflowWorker messages as the shared workflow-step types: a StepOutcome as the flat
//! outcome HTTP workers send (JSON texts parsed), and the answers to outcomes.

use super::convert::parse_json;
use crate::proto::v1 as pb;
use crate::wfsteps::{self, Answer, OutcomeBody};

pub(super) fn refused(r: Option<pb::StepRef>, e: pb::Error) -> pb::StepAck {
    pb::StepAck {
        r#ref: r,
        result: pb::StepResult::Unspecified as i32,
        error: Some(e),
    }
}

pub(super) fn result_pb(a: Answer) -> pb::StepResult {
    match a {
        Answer::Applied => pb::StepResult::StepApplied,
        Answer::Cancelled => pb::StepResult::StepCancelled,
        Answer::Stale => pb::StepResult::StepStale,
    }
}

/// A StepOutcome as the flat outcome the HTTP workers send (JSON texts parsed).
pub(super) fn outcome_body(
    o: pb::StepOutcome,
    token: String,
) -> Result<OutcomeBody, wfsteps::BadField> {
    let json = |field: &str,
                text: Option<String>|
     -> Result<Option<serde_json::Value>, wfsteps::BadField> {
        text.map(|t| {
            parse_json(&t).map_err(|e| wfsteps::BadField {
                field: field.to_string(),
                message: format!("not JSON: {e}"),
            })
        })
        .transpose()
    };
    let mut children = Vec::with_capacity(o.children.len());
    for (i, c) in o.children.into_iter().enumerate() {
        let input = parse_json(&c.input).map_err(|e| wfsteps::BadField {
            field: format!("children[{i}].input"),
            message: format!("not JSON: {e}"),
        })?;
        let priority = match c.priority {
            Some(p) => Some(u8::try_from(p).map_err(|_| wfsteps::BadField {
                field: format!("children[{i}].priority"),
                message: "must be 0 to 9".into(),
            })?),
            None => None,
        };
        children.push(wfsteps::ChildBody {
            kind: c.kind,
            input,
            step: c.step,
            queue: c.queue,
            concurrency_key: c.concurrency_key,
            concurrency_limit: c.concurrency_limit,
            rate_key: c.rate_key,
            priority,
            max_attempts: c.max_attempts,
        });
    }
    Ok(OutcomeBody {
        token,
        outcome: o.outcome,
        step: o.step,
        state: json("state", o.state)?,
        delay_ms: o.delay_ms,
        reason: o.reason,
        signals: (!o.signals.is_empty()).then_some(o.signals),
        timeout_ms: o.timeout_ms,
        until_unix_ms: o.until_unix_ms,
        for_ms: o.for_ms,
        children: (!children.is_empty()).then_some(children),
        join: o.join,
        on_child_failure: o.on_child_failure,
        result: json("result", o.result)?,
    })
}
