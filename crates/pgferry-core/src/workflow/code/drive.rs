//! Running a workflow function until it returns or suspends, and turning that into the
//! engine's outcome (on a worker) or a verdict (in a replay).

use std::future::Future;
use std::task::Poll;

use serde_json::Value;

use super::context::{Ctx, Suspend};
use super::{journal, Body, ENGINE_STEP, NONDETERMINISM};
use crate::workflow::{ChildFailure, ClaimedStep, Join, Outcome};

pub(crate) enum Ending {
    Returned(Result<Value, String>),
    Suspended(Suspend),
}

/// Polls the function until it returns or a context call suspends it; then drops it.
pub(crate) async fn run(ctx: &Ctx, fut: impl Future<Output = Result<Value, String>>) -> Ending {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let polled = fut.as_mut().poll(cx);
        // A suspension wins over a return: the return may rest on a halted call.
        if let Some(s) = ctx.take_suspend() {
            return Poll::Ready(Ending::Suspended(s));
        }
        match polled {
            Poll::Ready(r) => Poll::Ready(Ending::Returned(r)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// One claim of a code-first instance: replay the journal, run on, one outcome.
pub(crate) async fn claimed<I>(body: &Body<I>, s: ClaimedStep) -> Outcome
where
    I: serde::de::DeserializeOwned,
{
    let recorded = match journal::from_state(&s.state) {
        Ok(j) => j,
        Err(e) => return Outcome::fail(format!("{NONDETERMINISM} unreadable {e}")),
    };
    let input: I = match serde_json::from_value(s.input.clone()) {
        Ok(i) => i,
        Err(e) => return Outcome::fail(format!("input does not decode: {e}")),
    };
    let ctx = Ctx::live(s.id, recorded, s.attempt, s.wake, s.inbox, s.children);
    let ending = run(&ctx, body(ctx.clone(), input)).await;
    let state = || Some(journal::to_state(&ctx.journal()));
    let next = || ENGINE_STEP.to_string();
    let fail = |reason: String| {
        if ctx.dirty() {
            // A fail writes no state: what this claim added to the journal (a step's
            // result, a consumed signal, joined children) is written first, and the
            // replay of the next claim fails the same way with nothing left unwritten
            // (a retried instance must not wait again for a signal it consumed).
            Outcome::Next {
                step: next(),
                state: state(),
            }
        } else {
            Outcome::fail(reason)
        }
    };
    match ending {
        Ending::Returned(Ok(result)) => match ctx.unconsumed() {
            Some(d) => fail(format!("{NONDETERMINISM} {d}")),
            None => Outcome::done(result),
        },
        Ending::Returned(Err(e)) => fail(e),
        Ending::Suspended(Suspend::Next) => Outcome::Next {
            step: next(),
            state: state(),
        },
        Ending::Suspended(Suspend::Retry { delay, reason }) => Outcome::retry(delay, reason),
        Ending::Suspended(Suspend::Sleep { until }) => Outcome::Sleep {
            until,
            next: next(),
            state: state(),
        },
        Ending::Suspended(Suspend::Await { names, timeout }) => Outcome::Await {
            signals: names,
            next: next(),
            timeout,
            state: state(),
        },
        Ending::Suspended(Suspend::Spawn { children, any }) => Outcome::Spawn {
            children,
            next: next(),
            join: if any { Join::Any } else { Join::All },
            on_child_failure: ChildFailure::Deliver,
            state: state(),
        },
        Ending::Suspended(Suspend::Diverged(d)) => fail(format!("{NONDETERMINISM} {d}")),
        Ending::Suspended(Suspend::EndOfRecord) => {
            Outcome::fail("a live run reached the end of a replay record (a bug in pgferry)")
        }
    }
}
