//! Defining a machine: its kind, its steps, and per step a handler that receives the claimed
//! step and returns exactly one [`Outcome`]. Handlers run outside any transaction.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

/// What a machine loads with each claimed step. A plain machine declares neither and its
/// claims read nothing but the instance row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// The signals that resumed an await.
    pub inbox: bool,
    /// The results of the children a spawn joined.
    pub children: bool,
}

impl Caps {
    pub(crate) fn bits(self) -> i16 {
        i16::from(self.inbox) | (i16::from(self.children) << 1)
    }
}

/// How a parent joins the children of one spawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Join {
    /// Resume when every child ended.
    #[default]
    All,
    /// Resume when the first child ended; the others are cancelled.
    Any,
}

/// What a child that ends `failed` or `cancelled` does to its parent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChildFailure {
    /// The parent fails (its other children are cancelled).
    #[default]
    FailParent,
    /// The parent is handed the child's status and error with the other results.
    Deliver,
}

/// A child workflow a spawn starts.
#[derive(Debug, Clone)]
pub struct Child {
    pub kind: String,
    pub input: Value,
    /// First step; "start" unless set.
    pub step: String,
    /// Queue; the parent's unless set.
    pub queue: Option<String>,
    pub concurrency_key: Option<String>,
    pub concurrency_limit: Option<i32>,
    pub rate_key: Option<String>,
    /// 0..=9; the parent's unless set.
    pub priority: Option<u8>,
    pub max_attempts: Option<i32>,
}

impl Child {
    pub fn new(kind: impl Into<String>, input: Value) -> Child {
        Child {
            kind: kind.into(),
            input,
            step: "start".into(),
            queue: None,
            concurrency_key: None,
            concurrency_limit: None,
            rate_key: None,
            priority: None,
            max_attempts: None,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "kind": self.kind, "input": self.input, "step": self.step, "queue": self.queue,
            "concurrency_key": self.concurrency_key,
            "concurrency_limit": self.concurrency_limit, "rate_key": self.rate_key,
            "priority": self.priority, "max_attempts": self.max_attempts,
        })
    }
}

/// The one thing a step handler returns. `state: None` keeps the instance's state as it is.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Run `step` next (claimable at once).
    Next { step: String, state: Option<Value> },
    /// Run this step again after `delay` (attempt + 1; the instance fails past its
    /// max_attempts).
    Retry { delay: Duration, reason: String },
    /// Park until one of `signals` arrives (an earlier one in the inbox counts), then run
    /// `next`; after `timeout` run `next` anyway, with [`Wake::Timeout`].
    Await {
        signals: Vec<String>,
        next: String,
        timeout: Option<Duration>,
        state: Option<Value>,
    },
    /// Park until `until`, then run `next`.
    Sleep {
        until: SystemTime,
        next: String,
        state: Option<Value>,
    },
    /// Start `children` and park until they are joined, then run `next`.
    Spawn {
        children: Vec<Child>,
        next: String,
        join: Join,
        on_child_failure: ChildFailure,
        state: Option<Value>,
    },
    /// End `done` with `result`.
    Done { result: Value },
    /// End `failed` with `reason`.
    Fail { reason: String },
}

impl Outcome {
    pub fn next(step: impl Into<String>, state: Value) -> Outcome {
        Outcome::Next {
            step: step.into(),
            state: Some(state),
        }
    }

    pub fn retry(delay: Duration, reason: impl Into<String>) -> Outcome {
        Outcome::Retry {
            delay,
            reason: reason.into(),
        }
    }

    pub fn await_signals(
        signals: &[&str],
        next: impl Into<String>,
        timeout: Option<Duration>,
    ) -> Outcome {
        Outcome::Await {
            signals: signals.iter().map(|s| s.to_string()).collect(),
            next: next.into(),
            timeout,
            state: None,
        }
    }

    pub fn sleep_for(d: Duration, next: impl Into<String>) -> Outcome {
        Outcome::Sleep {
            until: SystemTime::now() + d,
            next: next.into(),
            state: None,
        }
    }

    pub fn sleep_until(until: SystemTime, next: impl Into<String>) -> Outcome {
        Outcome::Sleep {
            until,
            next: next.into(),
            state: None,
        }
    }

    pub fn spawn(children: Vec<Child>, next: impl Into<String>, join: Join) -> Outcome {
        Outcome::Spawn {
            children,
            next: next.into(),
            join,
            on_child_failure: ChildFailure::FailParent,
            state: None,
        }
    }

    pub fn done(result: Value) -> Outcome {
        Outcome::Done { result }
    }

    pub fn fail(reason: impl Into<String>) -> Outcome {
        Outcome::Fail {
            reason: reason.into(),
        }
    }

    /// The same outcome, writing `state` as the instance's new state (next, await, sleep,
    /// spawn; other outcomes keep theirs).
    pub fn with_state(mut self, new: Value) -> Outcome {
        match &mut self {
            Outcome::Next { state, .. }
            | Outcome::Await { state, .. }
            | Outcome::Sleep { state, .. }
            | Outcome::Spawn { state, .. } => *state = Some(new),
            _ => {}
        }
        self
    }

    /// A spawn that hands failed children to the parent instead of failing it.
    pub fn delivering_child_failures(mut self) -> Outcome {
        if let Outcome::Spawn {
            on_child_failure, ..
        } = &mut self
        {
            *on_child_failure = ChildFailure::Deliver;
        }
        self
    }

    /// The outcome's name on the wire (`outcome` of `pgferry.wf_finish`'s elements, the
    /// kinds of `pgferry.wf_finish_arrays`).
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Next { .. } => "next",
            Outcome::Retry { .. } => "retry",
            Outcome::Await { .. } => "await",
            Outcome::Sleep { .. } => "sleep",
            Outcome::Spawn { .. } => "spawn",
            Outcome::Done { .. } => "done",
            Outcome::Fail { .. } => "fail",
        }
    }

    /// The element of `pgferry.wf_finish`'s array for the claim (`id`, `seq`): what other
    /// languages send to record an outcome.
    pub fn to_wire(&self, id: i64, seq: i32) -> Value {
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        let mut wire = match self {
            Outcome::Next { step, state } => json!({"step": step, "state": state}),
            Outcome::Retry { delay, reason } => json!({"delay_ms": ms(delay), "reason": reason}),
            Outcome::Await {
                signals,
                next,
                timeout,
                state,
            } => json!({"signals": signals, "step": next,
                "timeout_ms": timeout.as_ref().map(ms), "state": state}),
            Outcome::Sleep { until, next, state } => {
                let until_ms = until
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64() * 1000.0)
                    .unwrap_or(0.0);
                json!({"until_ms": until_ms, "step": next, "state": state})
            }
            Outcome::Spawn {
                children,
                next,
                join,
                on_child_failure,
                state,
            } => json!({"step": next, "state": state,
            "children": children.iter().map(Child::to_json).collect::<Vec<_>>(),
            "join": match join { Join::All => "all", Join::Any => "any" },
            "on_child_failure": match on_child_failure {
                ChildFailure::FailParent => "fail_parent",
                ChildFailure::Deliver => "deliver",
            }}),
            Outcome::Done { result } => json!({"result": result}),
            Outcome::Fail { reason } => json!({"reason": reason}),
        };
        wire["id"] = id.into();
        wire["seq"] = seq.into();
        wire["outcome"] = self.name().into();
        wire
    }
}

/// Why the current step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A signal resumed an await.
    Signal,
    /// An await's timeout passed without a signal.
    Timeout,
    /// The children of a spawn were joined.
    Children,
}

/// A signal as the step that consumed it sees it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Signal {
    pub signal_id: i64,
    pub name: String,
    pub payload: Value,
}

/// A child's end as its parent sees it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct ChildResult {
    pub id: i64,
    pub kind: String,
    /// done, failed or cancelled (still active children of an `any` join were cancelled).
    pub status: String,
    pub result: Option<Value>,
    pub error: Option<String>,
}

/// A claimed step: what a handler receives.
#[derive(Debug, Clone)]
pub struct ClaimedStep {
    pub id: i64,
    pub kind: String,
    pub step: String,
    pub state: Value,
    pub input: Value,
    pub attempt: i32,
    pub max_attempts: i32,
    /// Which claim this is: its outcome names it, and a later claim makes it stale.
    pub seq: i32,
    pub wake: Option<Wake>,
    pub parent_id: Option<i64>,
    /// Only for machines that declared [`Caps::inbox`]: the signals that resumed an await.
    pub inbox: Option<Vec<Signal>>,
    /// Only for machines that declared [`Caps::children`]: the joined children.
    pub children: Option<Vec<ChildResult>>,
    /// When this process sent the claim (or the renewal) that leased the step, by its own
    /// clock: the lease lasts at least until this plus the lease asked for. A continued
    /// step's lease is renewed from it (ADR 0016, addendum "The update is the lock").
    /// None: not known, and a continued step renews its lease.
    pub leased_at: Option<std::time::Instant>,
}

impl ClaimedStep {
    /// True when an await's timeout, not a signal, resumed this step.
    pub fn timed_out(&self) -> bool {
        self.wake == Some(Wake::Timeout)
    }
}

/// A step handler.
pub type Handler = Arc<dyn Fn(ClaimedStep) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// A state machine: a kind and a handler per step.
#[derive(Clone)]
pub struct Machine {
    pub(crate) kind: String,
    pub(crate) caps: Caps,
    pub(crate) steps: HashMap<String, Handler>,
}

impl Machine {
    pub fn new(kind: impl Into<String>) -> Machine {
        Machine {
            kind: kind.into(),
            caps: Caps::default(),
            steps: HashMap::new(),
        }
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Declares that steps read the signals that resumed them.
    pub fn with_inbox(mut self) -> Machine {
        self.caps.inbox = true;
        self
    }

    /// Declares that steps read their joined children's results.
    pub fn with_children(mut self) -> Machine {
        self.caps.children = true;
        self
    }

    /// Adds the handler of step `name`.
    pub fn step<F, Fut>(mut self, name: impl Into<String>, f: F) -> Machine
    where
        F: Fn(ClaimedStep) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let f = Arc::new(f);
        self.steps.insert(
            name.into(),
            Arc::new(move |s| {
                let f = f.clone();
                Box::pin(async move { f(s).await })
            }),
        );
        self
    }

    pub(crate) fn handler(&self, step: &str) -> Option<Handler> {
        self.steps.get(step).cloned()
    }
}
