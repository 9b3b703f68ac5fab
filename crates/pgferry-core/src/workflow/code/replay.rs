//! `replay_kind`: re-runs recorded instances of a kind against the current code, without
//! side effects (no step runs, nothing is written), and reports where the code no longer
//! matches the journal. What Temporal users run in CI before a deploy.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::context::{Ctx, Divergence, Suspend};
use super::drive::{self, Ending};
use super::{journal, Workflow};
use crate::workflow::Workflows;

const REPLAY_INSTANCES: &str = include_str!("../../sql/workflow/code/replay_instances.sql");

/// What replaying one instance found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum ReplayVerdict {
    /// The code made the recorded calls in order (`replayed` of `recorded`); `returned`:
    /// it went on to return (the record's last step is not in a finished instance's
    /// journal, so most `done` instances stop at their last step instead).
    Consistent {
        replayed: usize,
        recorded: usize,
        returned: bool,
    },
    Diverged {
        position: usize,
        recorded: String,
        found: String,
    },
    /// The journal or input does not decode, or the code waited on something other than
    /// the context for longer than the replay's limit.
    Unreadable { reason: String },
}

/// A workflow whose records can be replayed, whatever its input and result types.
pub trait Replayable: Send + Sync {
    fn kind(&self) -> &str;
    fn replay(&self, id: i64, input: Value, state: Value) -> BoxFuture<'static, ReplayVerdict>;
}

impl<I, O> Replayable for Workflow<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    fn kind(&self) -> &str {
        Workflow::kind(self)
    }

    fn replay(&self, id: i64, input: Value, state: Value) -> BoxFuture<'static, ReplayVerdict> {
        let body = self.body.clone();
        Box::pin(async move {
            let recorded = match journal::from_state(&state) {
                Ok(j) => j,
                Err(reason) => return ReplayVerdict::Unreadable { reason },
            };
            let input: I = match serde_json::from_value(input) {
                Ok(i) => i,
                Err(e) => {
                    return ReplayVerdict::Unreadable {
                        reason: format!("input does not decode: {e}"),
                    }
                }
            };
            let ctx = Ctx::replay(id, recorded);
            let ending = drive::run(&ctx, body(ctx.clone(), input));
            let ending = match tokio::time::timeout(Duration::from_secs(10), ending).await {
                Ok(e) => e,
                Err(_) => {
                    return ReplayVerdict::Unreadable {
                        reason: "the code did not reach its next context call within 10 s".into(),
                    }
                }
            };
            let diverged = |d: Divergence| ReplayVerdict::Diverged {
                position: d.position,
                recorded: d.recorded,
                found: d.found,
            };
            let (replayed, recorded) = ctx.progress();
            match ending {
                Ending::Suspended(Suspend::Diverged(d)) => diverged(d),
                Ending::Returned(_) => match ctx.unconsumed() {
                    Some(d) => diverged(d),
                    None => ReplayVerdict::Consistent {
                        replayed,
                        recorded,
                        returned: true,
                    },
                },
                Ending::Suspended(_) => ReplayVerdict::Consistent {
                    replayed,
                    recorded,
                    returned: false,
                },
            }
        })
    }
}

/// One replayed instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceReplay {
    pub id: i64,
    pub status: String,
    #[serde(flatten)]
    pub verdict: ReplayVerdict,
}

/// What a replay of a kind found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub kind: String,
    pub instances: usize,
    pub consistent: usize,
    /// Instances whose record the current code does not follow (and unreadable ones).
    pub divergent: Vec<InstanceReplay>,
}

impl ReplayReport {
    pub fn ok(&self) -> bool {
        self.divergent.is_empty()
    }
}

/// Replays the newest `limit` instances of `workflow`'s kind (any status) against it.
/// Read-only: one query per page of 500 instances; no step runs.
pub async fn replay_kind(
    wf: &Workflows,
    workflow: &dyn Replayable,
    limit: usize,
) -> crate::Result<ReplayReport> {
    let client = wf.pool().get().await?;
    let mut report = ReplayReport {
        kind: workflow.kind().to_string(),
        instances: 0,
        consistent: 0,
        divergent: Vec::new(),
    };
    let mut below = i64::MAX;
    while report.instances < limit {
        let page = (limit - report.instances).min(500) as i32;
        let rows = client
            .query(REPLAY_INSTANCES, &[&workflow.kind(), &below, &page])
            .await?;
        for r in &rows {
            let id: i64 = r.try_get("id")?;
            below = id;
            let verdict = workflow
                .replay(id, r.try_get("input")?, r.try_get("state")?)
                .await;
            report.instances += 1;
            if matches!(verdict, ReplayVerdict::Consistent { .. }) {
                report.consistent += 1;
            } else {
                report.divergent.push(InstanceReplay {
                    id,
                    status: r.try_get("status")?,
                    verdict,
                });
            }
        }
        if rows.len() < page as usize {
            break;
        }
    }
    Ok(report)
}
