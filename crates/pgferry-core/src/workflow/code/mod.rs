//! Code-first workflows (issue 20): a workflow is an async function of a [`Ctx`] and its
//! typed input. `ctx.step(name, f)` runs `f` once and records its result in a journal; when
//! the function runs again (after a crash, a sleep, a signal, a child's end) recorded calls
//! return their recorded results without running. See docs/workflows.md ("Code-first").
//!
//! It is a layer on the state-machine engine, not a second engine: a code-first kind is a
//! [`Machine`] with one step, `start`, that replays the function and maps where it stopped
//! onto one outcome: a step ended and another is due → `next` (the journal is the state the
//! outcome writes, so a step costs the one statement its outcome costs, batched with the
//! worker's other outcomes); `ctx.sleep` → `sleep`; `ctx.wait_for_signal` → `await`;
//! `ctx.fan_out`/`ctx.child` → `spawn` (join all); the function's return → `done`/`fail`.
//! A suspended instance holds no worker slot and no connection.

mod children;
mod context;
mod drive;
pub mod examples;
mod handle;
pub mod journal;
mod replay;

use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use children::ChildError;
pub use context::{Ctx, Divergence, Retries, StepError};
pub use handle::{Error, Handle};
pub use journal::{ChildRecord, Entry, SignalRecord};
pub use replay::{replay_kind, InstanceReplay, ReplayReport, ReplayVerdict, Replayable};

use super::{ClaimedStep, Machine};

/// The one engine step of a code-first kind.
pub const ENGINE_STEP: &str = "start";

/// How a failed instance's error starts when its code diverged from its journal (the
/// instance is parked `failed`; `retry` it after deploying code that matches).
pub const NONDETERMINISM: &str = "non-determinism:";

type Body<I> =
    Arc<dyn Fn(Ctx, I) -> BoxFuture<'static, Result<serde_json::Value, String>> + Send + Sync>;

/// A code-first workflow: a kind, and the function that runs its instances. `I` is its
/// input and `O` its result (both JSON through serde).
pub struct Workflow<I, O> {
    kind: String,
    body: Body<I>,
    _o: PhantomData<fn() -> O>,
}

impl<I, O> Clone for Workflow<I, O> {
    fn clone(&self) -> Self {
        Workflow {
            kind: self.kind.clone(),
            body: self.body.clone(),
            _o: PhantomData,
        }
    }
}

impl<I, O> Workflow<I, O> {
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

impl<I, O> Workflow<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    /// `f(ctx, input)` returns the result, or an error that fails the instance.
    pub fn new<F, Fut, E>(kind: impl Into<String>, f: F) -> Workflow<I, O>
    where
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
        E: Display + 'static,
    {
        let f = Arc::new(f);
        Workflow {
            kind: kind.into(),
            body: Arc::new(move |ctx, input| {
                let fut = f(ctx, input);
                Box::pin(async move {
                    match fut.await {
                        Ok(o) => serde_json::to_value(o)
                            .map_err(|e| format!("the result does not serialize: {e}")),
                        Err(e) => Err(e.to_string()),
                    }
                })
            }),
            _o: PhantomData,
        }
    }

    /// The engine machine that runs this workflow's instances (add it to a `Worker`).
    pub fn machine(&self) -> Machine {
        let wf = self.clone();
        Machine::new(self.kind.clone())
            .with_inbox()
            .with_children()
            .step(ENGINE_STEP, move |s: ClaimedStep| {
                let wf = wf.clone();
                async move { drive::claimed(&wf.body, s).await }
            })
    }
}
