"""Pieces of the worker's per-job hot path that are not about the stream (used by worker.py).

A Python worker is CPU-bound on bookkeeping, not on handlers: an asyncio Task per job
(creation, registration in the loop's task set, a scheduled first step) cost more than a
no-op handler and the protobuf work together. So the jobs of one message share a runner
task that starts them one after another; a job that finishes without awaiting anything
never needs a task of its own. When a job does suspend, the runner stays with that job
(`drive` passes every step through to it) and hands the jobs not yet started to a new
runner. The job therefore spends its whole suspended life in one task, as before: its
`asyncio.current_task()` (which `asyncio.timeout` uses) stays valid and cancelling that
task cancels exactly this job. Each job runs in its own copy of the contextvars context,
as it would in a task of its own.

Results are kept as plain values until written (`Result`), so each JobResult is built
once, in place inside the message that carries it."""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from pgferry._handlers import failure_text
from pgferry.context import JobCancelled
from pgferry.outcomes import Cancel, Fail, NonRetryable, Snooze
from pgferry.v1 import common_pb2, worker_pb2

Key = tuple[int, int]
# A finished attempt's result: (key, ref, outcome field of JobResult, outcome message,
# duration_ms). Built into a JobResult when written, and again if a lost stream resends it.
Result = tuple[Key, common_pb2.AttemptRef, str, Any, int]
# The outcome of nearly every job: success with no value (shared; adding it copies it).
OK_NONE = worker_pb2.Success()


def result_pb(new: Callable[..., worker_pb2.JobResult], r: Result) -> worker_pb2.JobResult:
    """The JobResult of `r`, made by `new` (the JobResult class, or a batch's `results.add`
    to build it in place)."""
    _, ref, field, outcome, duration_ms = r
    if field == "ok":
        return new(ref=ref, ok=outcome, duration_ms=duration_ms)
    return new(ref=ref, duration_ms=duration_ms, **{field: outcome})


def outcome_of(e: Exception, dont_retry_on: tuple[type[BaseException], ...] = ()) -> tuple[str, Any, str]:
    """(JobResult outcome field, its message, stats counter) for what a handler raised:
    an outcome (Snooze, Cancel, Fail), JobCancelled, or any other exception as a failure,
    retryable unless it is a NonRetryable or one of `dont_retry_on`."""
    if isinstance(e, Snooze):
        return "snooze", worker_pb2.Snooze(delay_ms=int(e.seconds * 1000)), "snoozed"
    if isinstance(e, (Cancel, JobCancelled)):
        return "cancelled", worker_pb2.Cancelled(message=str(e)), "cancelled"
    if isinstance(e, Fail):
        failure = worker_pb2.Failure(message=e.message, kind=e.kind, retryable=not e.permanent)
        if e.retry_in is not None:
            failure.retry_delay_ms = int(e.retry_in * 1000)
        return "error", failure, "failed"
    retryable = not isinstance(e, NonRetryable) and not (dont_retry_on and isinstance(e, dont_retry_on))
    failure = worker_pb2.Failure(message=failure_text(e), kind=type(e).__name__, retryable=retryable)
    return "error", failure, "failed"


def first_step(
    coro: Coroutine[Any, Any, None], context: contextvars.Context
) -> tuple[bool, Any]:
    """Runs a job's coroutine up to its first suspension, in `context`. Returns (False,
    None) when it finished, else (True, what it yielded for the task to wait on)."""
    try:
        return True, context.run(coro.send, None)
    except StopIteration:
        return False, None


@types.coroutine
def drive(
    coro: Coroutine[Any, Any, None], context: contextvars.Context, yielded: Any
) -> Generator[Any, Any, None]:
    """`await drive(...)` in a task continues a coroutine that `first_step` suspended: it
    hands the task what the coroutine yielded and passes back the task's answers (values,
    or exceptions such as a cancellation), every step in the job's own context. This is
    what `await coro` does, for a coroutine that was already started."""
    while True:
        try:
            value = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = context.run(coro.throw, exc)
            except StopIteration:
                return
        else:
            try:
                yielded = context.run(coro.send, value)
            except StopIteration:
                return
