//! Children from a workflow function: started together and joined by all (`fan_out`,
//! `child`, `spawn_children`) or by the first to end (`first_of`), through the engine's
//! `spawn` outcome. The join's results are journaled like any other call.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::context::{Ctx, Slot, Suspend};
use super::journal::{ChildRecord, Entry};
use super::Workflow;
use crate::workflow::Child;

/// A child that did not end `done` (or whose result does not decode).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("child {id} ({kind}) ended {status}: {error}")]
pub struct ChildError {
    pub id: i64,
    pub kind: String,
    pub status: String,
    pub error: String,
}

impl Ctx {
    /// Starts `children` together and waits durably until every one ended (fan-out and
    /// fan-in); their ends in the order given. A failed child does not fail this workflow:
    /// its record says so.
    pub async fn spawn_children(&self, children: Vec<Child>) -> Vec<ChildRecord> {
        self.join_children(children, false).await
    }

    async fn join_children(&self, children: Vec<Child>, any: bool) -> Vec<ChildRecord> {
        if children.is_empty() {
            return Vec::new();
        }
        let kinds: Vec<String> = children.iter().map(|c| c.kind.clone()).collect();
        let same = |e: &Entry| matches!(e, Entry::Children { kinds: k, any: a, .. } if *k == kinds && *a == any);
        let call = if any { "first_of" } else { "children" };
        match self.slot(|| format!("{call} {kinds:?}"), same) {
            // Children are inserted in the order given, so ids order them.
            Slot::Recorded(Entry::Children {
                results: Some(mut r),
                ..
            }) => {
                r.sort_by_key(|c| c.id);
                r
            }
            Slot::Recorded(_) => {
                let replay = self.is_replay();
                if replay {
                    self.suspend(Suspend::EndOfRecord);
                } else {
                    let pos = self.progress().0 - 1;
                    self.diverge(
                        pos,
                        format!("{call} {kinds:?}"),
                        "children whose join was not delivered".into(),
                    );
                }
                Ctx::halt().await
            }
            Slot::Halt => Ctx::halt().await,
            Slot::New => {
                self.push(Entry::Children {
                    kinds,
                    any,
                    results: None,
                });
                self.suspend(Suspend::Spawn { children, any });
                Ctx::halt().await
            }
        }
    }

    /// Runs one child workflow and waits for its result.
    pub async fn child<I2, O2>(&self, wf: &Workflow<I2, O2>, input: &I2) -> Result<O2, ChildError>
    where
        I2: Serialize,
        O2: DeserializeOwned,
    {
        let mut all = self.fan_out(wf, std::slice::from_ref(input)).await;
        all.pop().unwrap_or_else(|| {
            Err(ChildError {
                id: 0,
                kind: wf.kind().into(),
                status: "missing".into(),
                error: "no child result was delivered".into(),
            })
        })
    }

    /// Runs a child workflow per input at once and waits until all ended (fan-out, fan-in).
    pub async fn fan_out<I2, O2>(
        &self,
        wf: &Workflow<I2, O2>,
        inputs: &[I2],
    ) -> Vec<Result<O2, ChildError>>
    where
        I2: Serialize,
        O2: DeserializeOwned,
    {
        let children = inputs
            .iter()
            .map(|i| Child::new(wf.kind(), serde_json::to_value(i).unwrap_or(Value::Null)))
            .collect();
        self.spawn_children(children)
            .await
            .iter()
            .map(child_result)
            .collect()
    }

    /// Runs a child workflow per input at once and waits for the first to end (the others
    /// are cancelled): its result, or its error when the first to end failed.
    pub async fn first_of<I2, O2>(
        &self,
        wf: &Workflow<I2, O2>,
        inputs: &[I2],
    ) -> Result<O2, ChildError>
    where
        I2: Serialize,
        O2: DeserializeOwned,
    {
        let children = inputs
            .iter()
            .map(|i| Child::new(wf.kind(), serde_json::to_value(i).unwrap_or(Value::Null)))
            .collect();
        let ends = self.join_children(children, true).await;
        // The first to end is the one not cancelled by the join.
        let first = ends
            .iter()
            .find(|c| c.status == "done")
            .or_else(|| ends.iter().find(|c| c.status != "cancelled"))
            .or(ends.first());
        match first {
            Some(c) => child_result(c),
            None => Err(ChildError {
                id: 0,
                kind: wf.kind().into(),
                status: "missing".into(),
                error: "no child was started".into(),
            }),
        }
    }
}

fn child_result<O2: DeserializeOwned>(c: &ChildRecord) -> Result<O2, ChildError> {
    let fail = |status: String, error: String| ChildError {
        id: c.id,
        kind: c.kind.clone(),
        status,
        error,
    };
    if c.status != "done" {
        return Err(fail(c.status.clone(), c.error.clone().unwrap_or_default()));
    }
    serde_json::from_value(c.result.clone().unwrap_or(Value::Null))
        .map_err(|e| fail("done".into(), format!("result does not decode: {e}")))
}
