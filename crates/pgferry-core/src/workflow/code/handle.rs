//! Starting a code-first workflow and the typed handle on its instance.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Workflow, NONDETERMINISM};
use crate::workflow::{InstanceInfo, SignalSent, Start, Target, Workflows};

/// What waiting on, or talking to, an instance can end with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Engine(#[from] crate::Error),
    #[error("workflow instance {id} failed: {error}")]
    Failed { id: i64, error: String },
    /// Its code diverged from its journal: it is parked `failed` until retried.
    #[error("workflow instance {id} is parked: {error}")]
    NonDeterminism { id: i64, error: String },
    #[error("workflow instance {id} was cancelled")]
    Cancelled { id: i64 },
    #[error("workflow instance {id} did not end within {waited:?} (status {status})")]
    Timeout {
        id: i64,
        waited: Duration,
        status: String,
    },
    #[error("invalid {field}: {reason}")]
    Decode { field: &'static str, reason: String },
}

impl<I, O> Workflow<I, O>
where
    I: Serialize + serde::de::DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    /// Starts an instance on `queue` (one statement).
    pub async fn start(&self, wf: &Workflows, queue: &str, input: &I) -> Result<Handle<O>, Error> {
        let value = encode(input)?;
        self.start_with(wf, Start::new(self.kind(), queue, value))
            .await
    }

    /// Starts an instance with the engine's options (correlation key, concurrency key, rate
    /// key, priority, run-at, max attempts); `start.kind` and `start.step` are this
    /// workflow's, and `start.state` is ignored (it holds the journal).
    pub async fn start_with(&self, wf: &Workflows, mut start: Start) -> Result<Handle<O>, Error> {
        start.kind = self.kind().to_string();
        start.step = super::ENGINE_STEP.to_string();
        start.state = None;
        let started = wf.start(&start).await?;
        Ok(Handle {
            wf: wf.clone(),
            id: started.id,
            duplicate: started.duplicate,
            _o: PhantomData,
        })
    }

    /// A handle on an existing instance of this workflow.
    pub fn handle(&self, wf: &Workflows, id: i64) -> Handle<O> {
        Handle {
            wf: wf.clone(),
            id,
            duplicate: false,
            _o: PhantomData,
        }
    }
}

fn encode<T: Serialize>(v: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(v).map_err(|e| Error::Decode {
        field: "input",
        reason: e.to_string(),
    })
}

/// A started instance whose result is an `O`.
pub struct Handle<O> {
    wf: Workflows,
    id: i64,
    duplicate: bool,
    _o: PhantomData<fn() -> O>,
}

impl<O: DeserializeOwned> Handle<O> {
    pub fn id(&self) -> i64 {
        self.id
    }

    /// An active instance with the same correlation key existed: this handle is on it.
    pub fn duplicate(&self) -> bool {
        self.duplicate
    }

    /// Waits until the instance ends (at most `timeout`): its result, or why it has none.
    pub async fn result(&self, timeout: Duration) -> Result<O, Error> {
        let began = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            let info = self.wf.get(self.id).await?;
            match info.status.as_str() {
                "done" => {
                    return serde_json::from_value(info.result.unwrap_or_default()).map_err(|e| {
                        Error::Decode {
                            field: "result",
                            reason: e.to_string(),
                        }
                    })
                }
                "failed" => {
                    let error = info.error.unwrap_or_default();
                    return Err(if error.starts_with(NONDETERMINISM) {
                        Error::NonDeterminism { id: self.id, error }
                    } else {
                        Error::Failed { id: self.id, error }
                    });
                }
                "cancelled" => return Err(Error::Cancelled { id: self.id }),
                status if began.elapsed() >= timeout => {
                    return Err(Error::Timeout {
                        id: self.id,
                        waited: timeout,
                        status: status.to_string(),
                    })
                }
                _ => {}
            }
            tokio::time::sleep(pause.min(timeout.saturating_sub(began.elapsed()))).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Sends a signal to the instance (one statement; kept in its inbox if it does not
    /// wait for it yet).
    pub async fn signal<P: Serialize>(&self, name: &str, payload: &P) -> Result<SignalSent, Error> {
        let payload = serde_json::to_value(payload).map_err(|e| Error::Decode {
            field: "payload",
            reason: e.to_string(),
        })?;
        Ok(self.wf.signal(&Target::Id(self.id), name, &payload).await?)
    }

    /// Cancels the instance and its children; returns the status it had.
    pub async fn cancel(&self, reason: Option<&str>) -> Result<String, Error> {
        Ok(self.wf.cancel(self.id, reason).await?)
    }

    /// Status, step history, journal (its `state`), result or error.
    pub async fn describe(&self) -> Result<InstanceInfo, Error> {
        Ok(self.wf.get(self.id).await?)
    }
}
