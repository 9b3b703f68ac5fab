"""`pgferry.App`: tasks, their worker, shared resources, lifecycle hooks and middleware.

    app = pgferry.App()          # PGFERRY_URL, PGFERRY_HTTP_URL, PGFERRY_API_KEY

    @app.task(queue="emails", retries=3, timeout=30)
    async def send_email(to: str) -> str: ...

    job = await send_email.enqueue("a@example.com")
    print(await job.result(timeout=60))

    app.run_worker(concurrency=50)   # or `pgferry-worker module:app`
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from pgferry._backends import Backend, Eager, Remote
from pgferry._signature import Signature
from pgferry.errors import PgferryError
from pgferry._types import DEFAULT_QUEUE, EnqueuedJob, SpecSource
from pgferry.context import JobContext
from pgferry.tasks import Backoff, JobHandle, Task, TaskCall, TaskOptions
from pgferry.worker import Worker
from pgferry.workflows import Machine, Workflow, WorkflowHandle
from pgferry._journal import WorkflowContext
from pgferry._schedules import CronSpec, ScheduleSync
from pgferry._schedules import sync as _sync_schedules
from pgferry._wf_eager import EagerWorkflows
from pgferry._wf_worker import WorkflowWorker

log = logging.getLogger("pgferry.app")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
O = TypeVar("O")

Hook = Callable[[dict[str, Any]], Awaitable[None] | None]
"""A startup/shutdown hook: gets the App's `resources` dict (async or sync)."""
Middleware = Callable[[JobContext, Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""`async def mw(ctx, call_next): ... return await call_next()` — around every task run."""


class TaskDecorator:
    """What `@app.task(...)` with options returns: applied to a function, a Task."""

    def __init__(self, app: App, options: dict[str, Any]) -> None:
        self._app = app
        self._options = options

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any]) -> Task[Any, Any]:
        return self._app._register(fn, **self._options)


class App:
    """Tasks bound to functions, over one pgferry server (or in memory, `eager()`).

    url / api_key / http_url default to $PGFERRY_URL, $PGFERRY_API_KEY and
    $PGFERRY_HTTP_URL (http_url is where results are awaited). `client_options` go to the
    underlying `pgferry.Client` (timeout, connect_timeout, ...)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        http_url: str | None = None,
        default_queue: str = DEFAULT_QUEUE,
        eager: bool = False,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self.url = url or os.environ.get("PGFERRY_URL")
        self.api_key = api_key or os.environ.get("PGFERRY_API_KEY")
        self.http_url = http_url or os.environ.get("PGFERRY_HTTP_URL")
        self.default_queue = default_queue
        self.client_options = dict(client_options or {})
        self.tasks: dict[str, Task[Any, Any]] = {}
        # Periodic tasks (`@app.task(cron=...)`), by kind.
        self.cron_tasks: dict[str, CronSpec] = {}
        # Workflow kinds: code-first (`@app.workflow`) and state machines (`app.machine`).
        self.workflows: dict[str, Workflow[Any, Any] | Machine] = {}
        # Shared by every task run: what startup hooks put here (a DB pool, an HTTP session).
        self.resources: dict[str, Any] = {}
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        self._middleware: list[Middleware] = []
        self._started = False
        self._eager: Eager | None = Eager(self) if eager else None
        # One Client per event loop (grpc.aio channels belong to the loop that made them).
        self._remotes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Remote] = weakref.WeakKeyDictionary()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._sync_loop: asyncio.AbstractEventLoop | None = None
        self._sync_lock = threading.Lock()

    # -- registration ------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        retries: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
        dont_retry_on: tuple[type[BaseException], ...] = (),
        priority: int = 0,
        unique: bool | Callable[..., str] = False,
        cron: str | None = None,
        tz: str = "UTC",
        cron_args: dict[str, Any] | None = None,
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str | None = None,
        retries: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
        dont_retry_on: tuple[type[BaseException], ...] = (),
        priority: int = 0,
        unique: bool | Callable[..., str] = False,
        cron: str | None = None,
        tz: str = "UTC",
        cron_args: dict[str, Any] | None = None,
    ) -> Any:
        """Register a function as a task: `@app.task` or `@app.task(queue=..., retries=...,
        backoff=..., timeout=..., retry_on=(...), dont_retry_on=(...), priority=...,
        unique=...)`.

        name: the job kind (default: the function's name). retries: attempts after the
        first (default: the queue's max_attempts). backoff: seconds, exponential from this
        base, or attempt -> seconds. timeout: seconds per attempt; past it the handler is
        cancelled and the attempt fails as TaskTimeout. retry_on: only these exceptions
        retry (others dead-letter at once); dont_retry_on: these dead-letter at once.
        unique: True (one job per distinct arguments while it is pending or running) or a
        function of the arguments returning the key. cron (with tz, an IANA zone): also a
        periodic task, enqueued by the server's scheduler at each fire time with
        `cron_args` (checked against the signature now); registered by
        `app.sync_schedules()`, which the worker runs at startup."""
        options: dict[str, Any] = dict(
            name=name,
            queue=queue,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            retry_on=retry_on,
            dont_retry_on=dont_retry_on,
            priority=priority,
            unique=unique,
            cron=cron,
            tz=tz,
            cron_args=cron_args,
        )
        if fn is not None:
            return self._register(fn, **options)
        return TaskDecorator(self, options)

    def _register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str | None = None,
        retries: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
        dont_retry_on: tuple[type[BaseException], ...] = (),
        priority: int = 0,
        unique: bool | Callable[..., str] = False,
        cron: str | None = None,
        tz: str = "UTC",
        cron_args: dict[str, Any] | None = None,
    ) -> Task[Any, Any]:
        kind = name or fn.__name__
        if kind in self.tasks:
            raise ValueError(f"a task named {kind!r} is already registered")
        if retries is not None and retries < 0:
            raise ValueError(f"task {kind}: retries must be >= 0")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"task {kind}: timeout must be > 0 seconds")
        opts = TaskOptions(
            name=kind,
            queue=queue or self.default_queue,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            retry_on=tuple(retry_on),
            dont_retry_on=tuple(dont_retry_on),
            priority=priority,
            unique=unique,
        )
        t: Task[Any, Any] = Task(self, fn, opts)
        if cron is not None:
            # The arguments every fire enqueues, checked now (a typo fails at import).
            args = t._sig.encode((), cron_args or {})
            t._sig.check_json(args)
            self.cron_tasks[kind] = CronSpec(kind, cron, tz, opts.queue, args)
        elif cron_args is not None:
            raise ValueError(f"task {kind}: cron_args without cron")
        self.tasks[kind] = t
        return t

    async def sync_schedules(self, *, prune: bool = False) -> ScheduleSync:
        """Make the server's `task:<kind>` schedules match this App's cron tasks: create
        missing ones, replace changed ones, leave equal ones alone (idempotent); report
        `task:` schedules with no cron task here as `removed` (deleted with prune=True)."""
        return await _sync_schedules(self, prune=prune)

    def workflow(
        self,
        kind: str | None = None,
        *,
        queue: str | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        cron_input: Any = None,
    ) -> Callable[[Callable[[WorkflowContext, I], Awaitable[O]]], Workflow[I, O]]:
        """Register an async function `fn(ctx, input) -> result` as a code-first workflow
        kind (default: the function's name); `await wf.start(input)` returns a typed handle.
        cron (with tz): the server's scheduler also starts one with `cron_input` at each
        fire time (registered by `app.sync_schedules()`, like cron tasks)."""

        def deco(fn: Callable[[WorkflowContext, I], Awaitable[O]]) -> Workflow[I, O]:
            k = kind or fn.__name__
            self._check_kind(k)
            wf: Workflow[I, O] = Workflow(self, k, queue or self.default_queue, fn)
            self.workflows[k] = wf
            if cron is not None:
                self.cron_tasks[k] = CronSpec(k, cron, tz, wf.queue, wf._codec.encode(cron_input) if cron_input is not None else {}, workflow=True)
            return wf

        return deco

    def machine(
        self,
        kind: str,
        *,
        queue: str | None = None,
        inbox: bool = False,
        children: bool = False,
        retry_delay: float = 1.0,
    ) -> Machine:
        """A state-machine workflow kind: register its steps with `@m.step("name")`.
        inbox / children: steps resumed by a signal / a join see the signals / the
        children's ends."""
        self._check_kind(kind)
        m = Machine(self, kind, queue or self.default_queue, inbox=inbox, children=children, retry_delay=retry_delay)
        self.workflows[kind] = m
        return m

    def _check_kind(self, kind: str) -> None:
        if kind in self.workflows or kind in self.tasks:
            raise ValueError(f"a task or workflow named {kind!r} is already registered")

    def _workflow_client(self) -> Any:
        backend = self._backend()
        if isinstance(backend, Eager):
            # app.eager(): the workflows run in memory too (pgferry._wf_eager).
            if backend.workflows is None:
                backend.workflows = EagerWorkflows(
                    {k: wf.kind_entry() for k, wf in self.workflows.items()}, self.default_queue
                )
            return backend.workflows
        if not isinstance(backend, Remote):
            raise PgferryError("workflows need a server or app.eager()", code="not_configured")
        return backend.client

    async def start_workflow(self, kind: str, input: Any = None, **options: Any) -> WorkflowHandle[Any]:
        """Start a workflow by kind name (see Client.start_workflow for the options)."""
        h: WorkflowHandle[Any] = await self._workflow_client().start_workflow(kind, input, **options)
        return h

    def workflow_handle(self, id: int) -> WorkflowHandle[Any]:
        return WorkflowHandle(self._workflow_client(), int(id))

    def on_startup(self, fn: Hook) -> Hook:
        """Decorator: run before the first task (worker start, or first eager run) with the
        `resources` dict to fill; tasks reach it as `pgferry.current_job().resources`."""
        self._startup.append(fn)
        return fn

    def on_shutdown(self, fn: Hook) -> Hook:
        """Decorator: run when the worker stops (or `await app.shutdown()`), in reverse
        order of registration."""
        self._shutdown.append(fn)
        return fn

    def middleware(self, fn: Middleware) -> Middleware:
        """Decorator: `async def mw(ctx, call_next)` wraps every task run (the first
        registered is outermost). Return what call_next returned, or raise."""
        self._middleware.append(fn)
        return fn

    # -- lifecycle ---------------------------------------------------------------------

    async def startup(self) -> None:
        """Run the startup hooks once (the worker and eager mode call this)."""
        if self._started:
            return
        self._started = True
        for hook in self._startup:
            r = hook(self.resources)
            if inspect.isawaitable(r):
                await r

    async def shutdown(self) -> None:
        """Run the shutdown hooks (if startup ran)."""
        if not self._started:
            return
        self._started = False
        for hook in reversed(self._shutdown):
            r = hook(self.resources)
            if inspect.isawaitable(r):
                await r

    async def close(self) -> None:
        """Close this loop's connection to the server, and the one `enqueue_sync` /
        `result_sync` use (with its thread)."""
        remote = self._remotes.pop(asyncio.get_running_loop(), None)
        if remote is not None:
            await remote.close()
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        """Close the connection and thread of the synchronous calls (if they were used)."""
        with self._sync_lock:
            loop, self._sync_loop = self._sync_loop, None
        if loop is None:
            return
        remote = self._remotes.pop(loop, None)
        if remote is not None:
            asyncio.run_coroutine_threadsafe(remote.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.contextmanager
    def eager(self) -> Iterator[Eager]:
        """Within the block, tasks run in-process as they are enqueued (no server): for
        application tests. Yields the in-memory store (`.jobs`)."""
        prev, self._eager = self._eager, Eager(self)
        try:
            yield self._eager
        finally:
            self._eager = prev

    # -- producing ---------------------------------------------------------------------

    def _backend(self) -> Backend:
        if self._eager is not None:
            return self._eager
        loop = asyncio.get_running_loop()
        remote = self._remotes.get(loop)
        if remote is None:
            remote = self._remotes[loop] = Remote(self)
        return remote

    async def _enqueue(
        self, reqs: Sequence[SpecSource], sigs: Sequence[Signature], idempotency_key: str | None = None
    ) -> list[EnqueuedJob]:
        """Enqueue; a value that is not JSON (found while building the request) becomes a
        TaskArgumentError naming the argument."""
        try:
            return await self._backend().enqueue(reqs, idempotency_key)
        except (TypeError, ValueError):
            for r, sig in zip(reqs, itertools.cycle(sigs)):
                if isinstance(r.args, dict):
                    sig.check_json(r.args)
            raise

    async def enqueue_many(
        self, calls: Iterable[TaskCall[Any]], *, idempotency_key: str | None = None
    ) -> list[JobHandle[Any]]:
        """Enqueue calls of any tasks (`task.call(...)`) in one all-or-nothing batch."""
        calls = list(calls)
        jobs = await self._enqueue([c.request() for c in calls], [c.task._sig for c in calls], idempotency_key)
        return [JobHandle(self, j, c.kind, c.task._sig) for c, j in zip(calls, jobs)]

    def job(self, job_id: int, task: Task[Any, R] | None = None) -> JobHandle[R]:
        """A handle to await a job enqueued elsewhere (its id stored in your database)."""
        t = task
        return JobHandle(self, EnqueuedJob(int(job_id)), t.name if t else "", t._sig if t else None)

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs `coro` on the App's own event loop thread (for synchronous callers)."""
        with self._sync_lock:
            if self._sync_loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=_serve_loop, args=(loop,), name="pgferry-app", daemon=True).start()
                self._sync_loop = loop
        return asyncio.run_coroutine_threadsafe(coro, self._sync_loop).result()

    # -- working -----------------------------------------------------------------------

    def worker(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        auto_heartbeat: bool = True,
        **options: Any,
    ) -> Worker:
        """A Worker running this App's tasks, from every queue a task uses unless
        `queues` is given. Heartbeats go out automatically while tasks run (a long task is
        not rescued and run twice); `options` go to pgferry.Worker."""
        if not self.url or not self.api_key:
            raise ValueError("pgferry.App.worker needs url= and api_key= (or PGFERRY_URL / PGFERRY_API_KEY)")
        qs = list(queues) if queues else sorted({t.opts.queue for t in self.tasks.values()})
        wf_queues = sorted({w.queue for w in self.workflows.values()})
        if not qs:
            qs = wf_queues
        if not qs:
            raise ValueError("pgferry.App.worker: no tasks or workflows registered (and no queues given)")
        wf_options = {k: options.pop(k) for k in ("lease_ms",) if k in options}
        w = Worker(self.url, self.api_key, queues=qs, concurrency=concurrency, auto_heartbeat=auto_heartbeat, **options)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="pgferry-task")
        for kind, t in self.tasks.items():
            w.register(kind, t.worker_handler(), is_async=True)
        w._app = self
        if self.workflows:
            # Jobs and workflow steps run together: the workflow worker is the job
            # worker's companion (started, stopped and drained with it).
            w._companion = WorkflowWorker(
                self.url,
                self.api_key,
                queues=list(queues) if queues else wf_queues,
                kinds={k: wf.kind_entry() for k, wf in self.workflows.items()},
                concurrency=concurrency,
                **wf_options,
            )
        return w

    async def _startup_worker(self) -> None:
        """What a worker does before its first job: startup hooks, then the cron tasks'
        schedules (reported in the log)."""
        await self.startup()
        if self.cron_tasks:
            r = await self.sync_schedules()
            log.info(
                "pgferry: schedules created=%s updated=%s unchanged=%s removed (not pruned)=%s",
                r.created, r.updated, r.unchanged, r.removed,
            )

    async def run_worker_async(self, **options: Any) -> None:
        """Startup hooks, the worker until stopped and drained, shutdown hooks."""
        await self.worker(**options).run_async()

    def run_worker(self, **options: Any) -> None:
        """Block running the worker (SIGTERM/SIGINT drain it)."""
        asyncio.run(self.run_worker_async(**options))


def _serve_loop(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


__all__ = ["App", "Hook", "Middleware", "TaskDecorator"]
