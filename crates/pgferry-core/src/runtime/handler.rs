//! Typed job handlers and what they return.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

/// What a handler knows about the job it runs.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub job_id: i64,
    pub queue: String,
    pub kind: String,
    /// 1 for the first run.
    pub attempt: i32,
    pub max_attempts: i32,
    pub meta: Option<Value>,
    /// When this attempt entered the log (enqueue, or its retry).
    pub enqueued_at: std::time::SystemTime,
    pub(crate) stop: watch::Receiver<bool>,
}

impl JobContext {
    /// True once the job was cancelled, its lease was lost, or the runtime is shutting down
    /// past its grace: stop soon (the outcome is then recorded for you).
    pub fn should_stop(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves when [`JobContext::should_stop`] turns true: `select!` on it beside the
    /// work.
    pub async fn stopped(&mut self) {
        let _ = self.stop.wait_for(|s| *s).await;
    }
}

/// Why a handler did not complete its job.
#[derive(Debug, Clone, PartialEq)]
pub enum HandlerError {
    /// Try again: after `delay`, or the queue's backoff when `None`; dead-lettered after the
    /// job's last attempt.
    Retry {
        message: String,
        delay: Option<Duration>,
    },
    /// Retrying cannot help (bad input, a programming error): straight to the dead-letter
    /// queue.
    Discard { message: String },
    /// Not now: run again after `delay`, without spending an attempt of the job's budget
    /// beyond this one.
    Snooze { delay: Duration },
    /// Stop for good: the job ends `cancelled`.
    Cancel { reason: String },
}

impl HandlerError {
    pub fn retry(message: impl Into<String>) -> HandlerError {
        HandlerError::Retry {
            message: message.into(),
            delay: None,
        }
    }

    pub fn discard(message: impl Into<String>) -> HandlerError {
        HandlerError::Discard {
            message: message.into(),
        }
    }
}

/// Any error converts to a retry: `?` in a handler retries with backoff.
impl<E: std::error::Error> From<E> for HandlerError {
    fn from(e: E) -> HandlerError {
        HandlerError::retry(e.to_string())
    }
}

pub type HandlerResult = Result<Option<Value>, HandlerError>;
type BoxFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;

/// A handler of one kind, over the job's raw args.
pub trait Handler: Send + Sync + 'static {
    fn call(&self, ctx: JobContext, args: Value) -> BoxFuture;
}

/// A handler over args deserialized into `A`.
pub(crate) struct Typed<F, A> {
    f: F,
    _args: std::marker::PhantomData<fn() -> A>,
}

impl<F, A> Typed<F, A> {
    pub(crate) fn new(f: F) -> Self {
        Typed {
            f,
            _args: std::marker::PhantomData,
        }
    }
}

impl<F, A, Fut> Handler for Typed<F, A>
where
    A: serde::de::DeserializeOwned + Send + 'static,
    F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(&self, ctx: JobContext, args: Value) -> BoxFuture {
        match serde_json::from_value::<A>(args) {
            Ok(a) => Box::pin((self.f)(ctx, a)),
            Err(e) => {
                let message = format!("args do not fit {}: {e}", std::any::type_name::<A>());
                Box::pin(async move { Err(HandlerError::Discard { message }) })
            }
        }
    }
}
