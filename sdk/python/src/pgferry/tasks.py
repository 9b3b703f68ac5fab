"""Tasks: functions bound to a job kind, with typed handles to enqueue them and await
their results (see `pgferry.App.task`).

    @app.task(queue="emails", retries=5, timeout=30)
    async def send_email(to: str, subject: str) -> str: ...

    job = await send_email.enqueue("a@example.com", subject="hi")   # checked here
    message_id = await job.result(timeout=60)                      # str, typed

A `Task[P, R]` carries the function's parameters `P` and result `R`, so `mypy --strict`
checks enqueue arguments and infers what `result()` returns."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeAlias, TypeVar

from pgferry._handlers import argument_mismatch, failure_text
from pgferry._results import raise_unless_completed
from pgferry._signature import Signature
from pgferry._types import EnqueuedJob, JobInfo
from pgferry.context import JobCancelled, JobContext, _current
from pgferry.outcomes import Fail, NonRetryable, Outcome

if TYPE_CHECKING:
    from pgferry.app import App

P = ParamSpec("P")
R = TypeVar("R")

Backoff: TypeAlias = "float | Callable[[int], float]"
"""Seconds before retry n: a number is the base of an exponential backoff (base, 2*base,
4*base ... capped at an hour); a callable gets the attempt that failed and returns seconds."""

_BACKOFF_CAP = 3600.0


class TaskTimeout(TimeoutError):
    """A task ran past its `timeout`: its handler was cancelled and the attempt is recorded
    as failed with error kind "TaskTimeout" (retried while attempts remain)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TaskOptions:
    """A task's settings (from `@app.task(...)`), and per-call ones from `.options()`."""

    name: str
    queue: str
    retries: int | None = None
    backoff: Backoff | None = None
    timeout: float | None = None
    retry_on: tuple[type[BaseException], ...] = ()
    dont_retry_on: tuple[type[BaseException], ...] = ()
    priority: int = 0
    unique: bool | Callable[..., str] = False
    # Per call:
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    unique_key: str | None = None
    meta: Mapping[str, str] | None = None
    idempotency_key: str | None = None


class JobHandle(Generic[R]):
    """An enqueued job of a task whose function returns `R`."""

    __slots__ = ("id", "duplicate", "kind", "_app", "_sig")

    def __init__(self, app: App, job: EnqueuedJob, kind: str, sig: Signature | None) -> None:
        self.id = job.id
        self.duplicate = job.duplicate
        self.kind = kind
        self._app = app
        self._sig = sig

    def __repr__(self) -> str:
        return f"<JobHandle {self.kind} id={self.id}>"

    def __int__(self) -> int:
        return self.id

    async def result(self, timeout: float | None = None) -> R:
        """The task's return value once the job completed (no polling: the server answers
        when it finishes). Raises JobDead or JobCancelledError (both JobFailed) when it
        ended otherwise, ResultTimeout after `timeout` seconds (None: no limit)."""
        job = await self._app._backend().wait(self.id, timeout)
        raise_unless_completed(job)
        value: R = self._sig.result(job.result) if self._sig is not None else job.result
        return value

    def result_sync(self, timeout: float | None = None) -> R:
        """`result()` from synchronous code (a Django view, a script)."""
        return self._app._sync(self.result(timeout))

    async def info(self) -> JobInfo:
        """The job's state, attempts and result as the server has them now."""
        return await self._app._backend().get_job(self.id)

    async def cancel(self) -> JobInfo:
        return await self._app._backend().cancel(self.id)


class TaskCall(Generic[R]):
    """One checked call of a task, not yet enqueued (`task.call(...)`), for enqueue_many.

    It is the request itself (a `SpecSource`: kind, args, queue, ...): what is the same
    for every call of a task lives on a class made per task (see `Task._call_class`), so a
    call stores only its arguments and unique key. Enqueueing many calls then costs about
    what enqueueing JobRequests does."""

    __slots__ = ("args", "unique_key")
    task: Task[Any, R]
    kind: str
    queue: str
    priority: int
    run_at: datetime | None
    delay: float | timedelta | None
    max_attempts: int | None
    meta: Mapping[str, str] | None
    idempotency_key: str | None

    def __init__(self, args: dict[str, Any] | None, unique_key: str | None) -> None:
        self.args = args
        self.unique_key = unique_key

    def request(self) -> TaskCall[R]:
        return self


class Task(Generic[P, R]):
    """A function registered as a task. Not called directly (`task.fn(...)` is the
    function itself); enqueue it, or enqueue and await it with `run`."""

    def __init__(self, app: App, fn: Callable[P, Awaitable[R]] | Callable[P, R], opts: TaskOptions) -> None:
        self.app = app
        self.fn = fn
        self._fn: Callable[..., Any] = fn  # called with the decoded JSON object
        self.opts = opts
        self.name = opts.name
        self._sig = Signature(opts.name, fn)
        self._is_async = asyncio.iscoroutinefunction(fn)
        self._call_cls = self._call_class()
        # Set by _prepare: the worker may call the function straight away (async, no
        # timeout, no retry policy of its own, no middleware, no models to rebuild).
        self._direct = False

    def _call_class(self) -> type[TaskCall[R]]:
        o = self.opts
        attrs = {
            "__slots__": (),
            "task": self,
            "kind": o.name,
            "queue": o.queue,
            "priority": o.priority,
            "run_at": o.run_at,
            "delay": o.delay,
            "max_attempts": None if o.retries is None else o.retries + 1,
            "meta": o.meta,
            "idempotency_key": o.idempotency_key,
        }
        cls: type[TaskCall[R]] = type(f"{o.name}_call", (TaskCall,), attrs)
        return cls

    def _prepare(self) -> None:
        """Decides the fast path once the App is complete (middleware is often added after
        the tasks)."""
        self._sig._hints()
        o = self.opts
        self._direct = (
            self._is_async
            and o.timeout is None
            and o.backoff is None
            and not o.retry_on
            and not o.dont_retry_on
            and not self.app._middleware
            and not self._sig._models
            and self._sig._returns is None
        )

    def worker_handler(self) -> Callable[..., Any]:
        """What a Worker registers for this task (always called as a coroutine function).
        On the fast path that is a plain function returning the task function's own
        coroutine: no coroutine of ours around it, nothing to map on failure (no retry
        policy of the task's own, the worker reports the exception as it is)."""
        self._prepare()
        if not self._direct:
            return self.work
        fn, app, set_current = self._fn, self.app, _current.set

        def direct(ctx: JobContext, /, **kwargs: Any) -> Any:
            set_current(ctx)
            ctx.resources = app.resources
            return fn(**kwargs)

        # The worker reads it after a TypeError to tell arguments that do not fit the
        # function (dead-lettered at once) from a TypeError inside it.
        sig = self._sig.handler_signature()
        if sig is not None:
            direct.__signature__ = sig  # type: ignore[attr-defined]
        return direct

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.opts.queue}>"

    # -- producing ---------------------------------------------------------------------

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        unique_key: str | None = None,
        meta: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> Task[P, R]:
        """This task with per-call settings: `await t.options(priority=2).enqueue(...)`.
        idempotency_key: a key of yours for the enqueue request (e.g. the Idempotency-Key
        of the HTTP request that caused it): a repeat within the server's retention answers
        the first job's id and enqueues nothing. Without it each request gets a fresh key,
        which covers the SDK's own retries."""
        o = self.opts
        new = dataclasses.replace(
            o,
            queue=queue if queue is not None else o.queue,
            priority=priority if priority is not None else o.priority,
            run_at=run_at if run_at is not None else o.run_at,
            delay=delay if delay is not None else o.delay,
            unique_key=unique_key if unique_key is not None else o.unique_key,
            meta=meta if meta is not None else o.meta,
            idempotency_key=idempotency_key if idempotency_key is not None else o.idempotency_key,
        )
        t: Task[P, R] = Task.__new__(Task)
        t.__dict__.update(self.__dict__)
        t.opts = new
        t._call_cls = t._call_class()
        return t

    def schedule(self, *, at: datetime | None = None, delay: float | timedelta | None = None) -> Task[P, R]:
        """This task to run at `at` (timezone-aware) or after `delay` (seconds or a
        timedelta): `await t.schedule(delay=60).enqueue(...)`."""
        if (at is None) == (delay is None):
            raise TypeError(f"{self.name}.schedule(): give exactly one of at= or delay=")
        if at is not None and at.tzinfo is None:
            raise TypeError(f"{self.name}.schedule(at=...): a timezone-aware datetime is needed")
        return self.options(run_at=at, delay=delay)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> TaskCall[R]:
        """A checked call for `enqueue_many` (raises TaskArgumentError like enqueue)."""
        return self._request(self._sig.encode(args, kwargs))

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue one job; returns once it is committed. The arguments are checked
        against the function's signature first (TaskArgumentError names the bad one)."""
        req = self._request(self._sig.encode(args, kwargs))
        job = (await self.app._enqueue([req], [self._sig]))[0]
        return JobHandle(self.app, job, self.name, self._sig)

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """`enqueue` from synchronous code (e.g. in Django's transaction.on_commit)."""
        req = self._request(self._sig.encode(args, kwargs))
        job = self.app._sync(self.app._enqueue([req], [self._sig]))[0]
        return JobHandle(self.app, job, self.name, self._sig)

    async def enqueue_many(
        self, calls: Iterable[TaskCall[R]], *, idempotency_key: str | None = None
    ) -> list[JobHandle[R]]:
        """Enqueue several calls of this task in one all-or-nothing batch (one
        idempotency key for the batch: yours, or a fresh one)."""
        calls = list(calls)
        for c in calls:
            if c.task.name != self.name:
                raise TypeError(f"{self.name}.enqueue_many: got a call of {c.task.name}")
        jobs = await self.app._enqueue([c.request() for c in calls], [self._sig], idempotency_key)
        return [JobHandle(self.app, j, self.name, self._sig) for j in jobs]

    async def run(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Enqueue and await the result (raises like `JobHandle.result`)."""
        job = await self.enqueue(*args, **kwargs)
        return await job.result()

    def _request(self, args: dict[str, Any]) -> TaskCall[R]:
        o = self.opts
        unique_key = o.unique_key
        if unique_key is None and o.unique:
            unique_key = o.unique(**args) if callable(o.unique) else _args_key(self.name, args)
        # No arguments: JSON null, which the worker need not parse.
        return self._call_cls(args or None, unique_key)

    # -- running (worker side) ---------------------------------------------------------

    async def execute(self, ctx: JobContext, kwargs: dict[str, Any] | None) -> Any:
        """Runs the function for one attempt: in the job's context (`current_job()`),
        through the App's middleware, within `timeout`. Failures are mapped to the task's
        retry policy (retry_on / dont_retry_on / backoff). For callers running it in their
        own context (eager mode): current_job() is restored afterwards."""
        self._prepare()
        token = _current.set(ctx)
        try:
            return await self.work(ctx, **(kwargs or {}))
        finally:
            _current.reset(token)

    async def work(self, ctx: JobContext, /, **kwargs: Any) -> Any:
        """`execute` in the shape a Worker calls a handler, (ctx, **json_object), in the
        job's own contextvars context (the worker copies one per job, so current_job() is
        set without a reset)."""
        _current.set(ctx)
        ctx.resources = self.app.resources
        try:
            value = await self._slow(ctx, self._sig.decode(kwargs))
            return value if value is None else self._sig.result_json(value)
        except (Outcome, JobCancelled):
            raise
        except Exception as e:
            raise self._failure(ctx, e, kwargs) from e

    async def _slow(self, ctx: JobContext, kw: dict[str, Any]) -> Any:
        middleware = self.app._middleware
        if not middleware:
            return await self._invoke(ctx, kw)
        call: Callable[[], Awaitable[Any]] = functools.partial(self._invoke, ctx, kw)
        for mw in reversed(middleware):
            call = functools.partial(mw, ctx, call)
        return await call()

    async def _invoke(self, ctx: JobContext, kw: dict[str, Any]) -> Any:
        t = self.opts.timeout
        if self._is_async:
            coro: Awaitable[Any] = self._fn(**kw)
        else:
            loop = asyncio.get_running_loop()
            # copy_context: the function sees current_job() and the tracing span.
            run = functools.partial(contextvars.copy_context().run, self._fn, **kw)
            coro = loop.run_in_executor(self.app._pool, run)
        if t is None:
            return await coro
        try:
            return await _within(coro, t)
        except _Expired:
            ctx._set_cancelled()  # a sync function in its thread can see ctx.cancelled
            raise TaskTimeout(f"{self.name}: timed out after {t}s") from None

    def _failure(self, ctx: JobContext, e: Exception, kwargs: dict[str, Any]) -> Exception:
        if isinstance(e, TypeError) and not self._sig.binds(kwargs):
            return argument_mismatch(self.name, e)
        o = self.opts
        retryable = (
            not isinstance(e, NonRetryable)
            and not (o.dont_retry_on and isinstance(e, o.dont_retry_on))
            and (not o.retry_on or isinstance(e, o.retry_on))
        )
        retry_in = None
        if retryable and o.backoff is not None:
            retry_in = o.backoff(ctx.attempt) if callable(o.backoff) else min(
                o.backoff * 2 ** max(0, ctx.attempt - 1), _BACKOFF_CAP
            )
        if retryable and retry_in is None:
            return e  # the queue's backoff decides; the worker records the exception
        return Fail(failure_text(e), permanent=not retryable, retry_in=retry_in, kind=type(e).__name__)


class _Expired(Exception):
    pass


async def _within(aw: Awaitable[Any], seconds: float) -> Any:
    """`aw` under asyncio.timeout (3.11+), telling our expiry apart from a TimeoutError the
    function raised itself (on 3.10, wait_for: it cannot tell them apart)."""
    if not hasattr(asyncio, "timeout"):  # pragma: no cover - Python 3.10
        try:
            return await asyncio.wait_for(aw, seconds)
        except asyncio.TimeoutError:
            raise _Expired() from None
    cm = asyncio.timeout(seconds)
    try:
        async with cm:
            return await aw
    except TimeoutError:
        if cm.expired():
            raise _Expired() from None
        raise


def _args_key(name: str, args: dict[str, Any]) -> str:
    digest = hashlib.sha256(
        json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()[:40]
    return f"{name}:{digest}"


__all__ = ["Backoff", "JobHandle", "Task", "TaskCall", "TaskOptions", "TaskTimeout"]
