"""The worker: one Worker stream per process, credits = free execution slots.

Every Job the server sends has a slot (the server never exceeds the credits granted), so a
job starts the moment it arrives and there is no local queue. When a handler finishes, its
result goes out and one credit is returned.

The worker asks for batches in its hello (docs/protocol.md): a server that grants them
sends jobs as JobBatch and acks as ResultAckBatch, and the results of every handler that
finished since the last write go out as one ResultBatch carrying the freed slots' credits
— a few messages per event-loop turn instead of three per job, which is what a Python
process pays most for. Against a server without batches, results go one message each and
credits are coalesced into one Credit message per write burst."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from pgferry import _conn, _tracing
from pgferry._handlers import Handler, argument_mismatch, call_args, result_not_json
from pgferry._heartbeats import Heartbeats, auto_heartbeats
from pgferry._resend import Resends
from pgferry._steps import OK_NONE, Key, Result, drive, first_step, outcome_of, result_pb
from pgferry._types import dumps, loads
from pgferry._wf_worker import serve_with_companion
from pgferry.context import JobCancelled, JobContext
from pgferry.errors import (
    AuthError,
    Conflict,
    InvalidArgument,
    NotFound,
    PgferryError,
    ProtocolError,
    Unavailable,
    from_rpc_error,
)
from pgferry.outcomes import Fail, Outcome
from pgferry.v1 import common_pb2, worker_pb2

log = logging.getLogger("pgferry.worker")

_WORKER_STREAM = "/pgferry.v1.Worker/Stream"
# Most items per batch this worker asks for (the server may grant fewer).
_MAX_BATCH = 500

F = TypeVar("F", bound=Callable[..., Any])
# Errors that end `run` instead of a reconnect: another try would get the same answer.
_FATAL = (AuthError, InvalidArgument, NotFound, Conflict)


class Worker:
    """Runs registered handlers for jobs from `queues`.

    >>> app = pgferry.Worker(url, api_key, queues=["emails"], concurrency=50)
    >>> @app.job("send_email")
    ... async def send_email(ctx, to: str, subject: str): ...
    >>> app.run()            # or: await app.run_async()

    SIGTERM/SIGINT drain: no new jobs, in-flight ones get `grace_period` seconds, jobs
    received but not started are handed back. A second signal stops at once.

    A handler's exception is retried (queue backoff) until the job's attempts run out,
    except what no attempt can fix, which is dead-lettered at once: a
    `pgferry.NonRetryable`, an instance of `dont_retry_on`, arguments that do not fit the
    handler's parameters (kind TaskArgumentError), a result that is not JSON (kind
    ResultNotJSON)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        queues: Sequence[str],
        concurrency: int = 10,
        worker_id: str | None = None,
        grace_period: float = 30.0,
        handle_signals: bool = True,
        hard_cancel: bool = False,
        reconnect_cap: float = 10.0,
        auto_heartbeat: bool = False,
        dont_retry_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not queues:
            raise ValueError("Worker needs at least one queue")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.url = url
        self._api_key = api_key
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = worker_id or f"py-{socket.gethostname()}-{os.getpid()}"
        self.grace_period = grace_period
        self.handle_signals = handle_signals
        # hard_cancel: a server Cancel also cancels the handler's asyncio task.
        self.hard_cancel = hard_cancel
        # Exception types that dead-letter the job at once instead of being retried.
        self.dont_retry_on = tuple(dont_retry_on)
        self._backoff = _conn.Backoff(base=0.1, cap=reconnect_cap)
        # auto_heartbeat: extend the lease of every job still running at a third of its
        # lease, so a long handler is not rescued (and run twice) for want of heartbeat().
        self.auto_heartbeat = auto_heartbeat
        # The pgferry.App whose tasks this worker runs (its startup/shutdown hooks run
        # around run_async), if any.
        self._app: Any = None
        # A pgferry WorkflowWorker run alongside (an App with workflows), if any.
        self._companion: Any = None
        self._handlers: dict[str, Handler] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.stats: collections.Counter[str] = collections.Counter()
        self._ran = False
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        # Jobs started and not finished, with the task running each once it has suspended
        # (None before that: see _steps).
        self._running: dict[Key, tuple[JobContext, asyncio.Task[None] | None]] = {}
        # Runner tasks, referenced until done (the loop keeps only weak references).
        self._runners: set[asyncio.Task[None]] = set()
        # Control messages (credits, heartbeats, drains) waiting for the writer.
        self._outbox: collections.deque[worker_pb2.WorkerRequest] = collections.deque()
        # Results waiting for the writer, and those written but not yet acked.
        self._results: list[Result] = []
        self._unacked: dict[Key, Result] = {}
        # Results the server refused as unavailable (not recorded, its database was down):
        # they stay in _unacked (a new stream resends them anyway) and go out again when
        # the resend timer fires. Without this a result lost to a database blip left its job
        # running until the lease ran out, then ran it again.
        self._resends: Resends[Key] = Resends(self._resend_refused)
        self._batch = 0  # items per batch granted on this stream; 0: single messages
        self._credits = 0  # freed slots not yet granted to the server
        self._server_credits = 0  # granted on this stream and not yet used by a Job
        self._hb = Heartbeats()
        self._unstarted: list[common_pb2.AttemptRef] = []
        # Events are not bound to a loop until first awaited (3.10+), so they can be made here.
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()
        self._draining = False
        self._drain_sent = False
        self._drains_unanswered = 0  # Drain messages sent on this stream without a Drained
        self._drain_deadline = 0.0
        self._call: Any = None
        self._hello_ack: worker_pb2.WorkerHelloAck | None = None

    # -- registration ------------------------------------------------------------------

    def job(self, kind: str | None = None) -> Callable[[F], F]:
        """Decorator: `@app.job("send_email")` (the function name when kind is omitted)."""

        def deco(fn: F) -> F:
            self.register(kind or fn.__name__, fn)
            return fn

        return deco

    def register(self, kind: str, fn: Callable[..., Any], *, is_async: bool | None = None) -> None:
        """`fn(ctx, **args)`; is_async overrides the check for a coroutine function (a
        plain function returning an awaitable is awaited when it is True)."""
        if kind in self._handlers:
            raise ValueError(f"handler for {kind!r} already registered")
        h = Handler(fn)
        if is_async is not None:
            h.is_async = is_async
        self._handlers[kind] = h

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    # -- running -----------------------------------------------------------------------

    def run(self) -> None:
        """Block until stopped (signal or `stop()`) and drained."""
        asyncio.run(self.run_async())

    async def run_async(self) -> None:
        """Run on the current event loop until stopped and drained."""
        if self._ran:
            self._reset_runtime()
        self._ran = True
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass  # not the main thread, or no signals on this platform
        channel = _conn.open_channel(self.url)
        ticker = asyncio.create_task(auto_heartbeats(self)) if self.auto_heartbeat else None
        try:
            if self._app is not None:
                await self._app._startup_worker()
            await self._serve_all(channel)
        finally:
            self._resends.cancel()
            if ticker is not None:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
            if self._app is not None:
                await self._app.shutdown()
            for sig in installed:
                loop.remove_signal_handler(sig)
            await channel.close(grace=None)
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    async def _serve_all(self, channel: grpc.aio.Channel) -> None:
        """The job stream, and the workflow worker alongside when there is one."""
        if self._companion is None:
            await self._serve(channel)
        else:
            await serve_with_companion(self, channel)

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the worker stream is open (hello acknowledged and credits sent), and
        the workflow worker's too when there is one."""
        await asyncio.wait_for(self._ready.wait(), timeout)
        if self._companion is not None:
            await self._companion.wait_ready(timeout)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def stop(self) -> None:
        """Start a graceful drain. Call it on the worker's event loop (signals do); from
        another thread use `loop.call_soon_threadsafe(app.stop)`."""
        if self._companion is not None:
            self._companion.stop()
        if not self._stopping.is_set():
            log.info("pgferry worker %s: draining (%d in flight)", self.worker_id, len(self._running))
            self._draining = True
            self._drain_deadline = asyncio.get_running_loop().time() + self.grace_period
            self._stopping.set()
            self._kick()

    def _on_signal(self) -> None:
        if self._stopping.is_set():
            log.warning("pgferry worker: second signal, stopping now")
            self._drain_deadline = 0.0
            return
        self.stop()

    def _finished(self) -> bool:
        """Drain is complete: nothing running, every result acked, Drain answered."""
        return (
            not self._running
            and not self._outbox
            and not self._results
            and not self._unacked
            and not self._unstarted
            and ((self._drain_sent and self._drains_unanswered == 0) or self._call is None)
        )

    async def _serve(self, channel: grpc.aio.Channel) -> None:
        loop = asyncio.get_running_loop()
        while True:
            session = asyncio.create_task(self._session(channel))
            watch = asyncio.create_task(self._drain_watch(session))
            err: BaseException | None = None
            try:
                await session
            except _FATAL:
                raise  # retrying cannot help: a bad key, scope or hello
            except (PgferryError, OSError) as e:
                err = e
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
                self._call = None
                self._hb.fail_all()
            if self._stopping.is_set():
                if self._finished() or loop.time() >= self._drain_deadline:
                    self._abandon()
                    return
            delay = self._backoff.next_delay()
            self.stats["reconnects"] += 1
            log.warning("pgferry worker: stream ended (%s); reconnecting in %.2fs", err, delay)
            await asyncio.sleep(delay)

    async def _drain_watch(self, session: asyncio.Task[None]) -> None:
        """While draining, close the stream once everything is acked or grace runs out."""
        await self._stopping.wait()
        loop = asyncio.get_running_loop()
        while not self._finished() and loop.time() < self._drain_deadline:
            await asyncio.sleep(0.02)
        if not self._finished():
            self._abandon()
        call = self._call
        if call is None:
            return
        try:
            await asyncio.wait_for(call.done_writing(), 2)
            await asyncio.wait_for(asyncio.shield(session), 3)
        except (asyncio.TimeoutError, grpc.RpcError, asyncio.InvalidStateError, PgferryError):
            call.cancel()

    def _abandon(self) -> None:
        """Grace is over: stop the handlers still running. Their leases expire and the
        server retries them; nothing is lost, the attempt just waits for its lease."""
        if self._running:
            log.warning(
                "pgferry worker: grace period over; %d job(s) left to lease expiry",
                len(self._running),
            )
        for ctx, task in list(self._running.values()):
            ctx._set_cancelled()
            if task is not None:
                task.cancel()
        self.stats["abandoned"] += len(self._running)
        self._running.clear()
        self._outbox.clear()
        self._results.clear()
        self._unacked.clear()
        self._resends.cancel()
        self._unstarted.clear()

    async def _session(self, channel: grpc.aio.Channel) -> None:
        """One stream's life: hello, credits (or Drain when stopping), then read until the
        stream ends. Raises on transport errors so `_serve` can reconnect."""
        method = channel.stream_stream(
            _WORKER_STREAM,
            request_serializer=worker_pb2.WorkerRequest.SerializeToString,
            response_deserializer=worker_pb2.WorkerResponse.FromString,
        )
        call: Any = method(metadata=_conn.auth_metadata(self._api_key))
        hello = worker_pb2.WorkerHello(
            api_key=self._api_key,
            worker_id=self.worker_id,
            queues=self.queues,
            kinds=self.kinds,
            max_batch=_MAX_BATCH,
        )
        try:
            await call.write(worker_pb2.WorkerRequest(hello=hello))
            first = await call.read()
        except grpc.RpcError as e:
            call.cancel()
            raise from_rpc_error(e) from None
        if first is grpc.aio.EOF or first.WhichOneof("msg") != "hello_ack":
            call.cancel()
            raise ProtocolError("worker stream: expected hello_ack")
        self._hello_ack = first.hello_ack
        # Never more than asked for, whatever the server says.
        self._batch = min(first.hello_ack.max_batch, _MAX_BATCH)
        self._call = call
        self._backoff.reset()
        # Results sent on a lost stream may not have been recorded: send them again (the
        # server keeps the first outcome of an attempt, so a repeat is answered stale).
        # Control messages of the old stream (credits, heartbeats, drain) mean nothing here.
        # Refused results are among the unacked ones: no separate resend of them.
        self._results = list(self._unacked.values()) + self._results
        self._outbox.clear()
        self._unacked.clear()
        self._resends.cancel()
        self._drain_sent = False
        self._drains_unanswered = 0
        self._credits = 0 if self._draining else self.concurrency - len(self._running)
        self._server_credits = 0
        writer = asyncio.create_task(self._write_loop(call))
        self._kick()
        self._ready.set()
        try:
            await self._read_loop(call)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _read_loop(self, call: Any) -> None:
        while True:
            resp = await call.read()
            if resp is grpc.aio.EOF:
                if self._stopping is not None and self._stopping.is_set():
                    return
                raise Unavailable("worker stream closed by the server")
            which = resp.WhichOneof("msg")
            if which == "jobs":
                self._on_jobs(resp.jobs.jobs)
            elif which == "result_acks":
                self._on_result_acks(resp.result_acks.acks)
            elif which == "job":
                self._on_jobs((resp.job,))
            elif which == "result_ack":
                self._on_result_acks((resp.result_ack,))
            elif which == "cancel":
                self._on_cancel(resp.cancel.ref)
            elif which == "heartbeat_ack":
                self._on_heartbeat_ack(resp.heartbeat_ack)
            elif which == "drained":
                self._drains_unanswered = max(0, self._drains_unanswered - 1)

    async def _write_loop(self, call: Any) -> None:
        assert self._wake is not None
        wake = self._wake
        while True:
            await wake.wait()
            wake.clear()
            if self._draining and not self._drain_sent:
                self._drain_sent = True
                release, self._unstarted = self._unstarted, []
                self.stats["released"] += len(release)
                self._drains_unanswered += 1
                self._outbox.append(worker_pb2.WorkerRequest(drain=worker_pb2.Drain(release=release)))
            elif self._draining and self._unstarted:
                # Jobs that crossed our Drain on the wire: hand them back too.
                release, self._unstarted = self._unstarted, []
                self.stats["released"] += len(release)
                self._drains_unanswered += 1
                self._outbox.append(worker_pb2.WorkerRequest(drain=worker_pb2.Drain(release=release)))
            if self._results:
                self._queue_results()
            if self._credits > 0 and not self._draining and self._credit_due():
                n, self._credits = self._credits, 0
                self._server_credits += n
                self._outbox.append(worker_pb2.WorkerRequest(credit=worker_pb2.Credit(n=n)))
            while self._outbox:
                await call.write(self._outbox.popleft())

    def _queue_results(self) -> None:
        """Moves finished results to the outbox: every one finished since the last write in
        ResultBatch messages (with the freed slots' credits) when batching, else one each.
        From here they count as sent: a lost stream sends them again."""
        results, self._results = self._results, []
        unacked = self._unacked
        for r in results:
            unacked[r[0]] = r
        if not self._batch:
            self._outbox.extend(
                worker_pb2.WorkerRequest(result=result_pb(worker_pb2.JobResult, r)) for r in results
            )
            return
        credit = 0
        if not self._draining:
            credit, self._credits = self._credits, 0
            self._server_credits += credit
        for i in range(0, len(results), self._batch):
            req = worker_pb2.WorkerRequest()
            batch = req.results
            batch.credit = credit
            add = batch.results.add
            for r in results[i : i + self._batch]:
                result_pb(add, r)
            self._outbox.append(req)
            credit = 0

    def _credit_due(self) -> bool:
        """Grant freed slots in bunches: each message costs a write, so while the server
        still holds plenty of unused credits, wait until an eighth of the slots are free.
        Once its unused credits run low (or at concurrency 1) grant at once."""
        threshold = max(1, self.concurrency // 8)
        return self._credits >= threshold or self._server_credits < threshold

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- incoming ----------------------------------------------------------------------

    def _on_jobs(self, jobs: Iterable[worker_pb2.Job]) -> None:
        """Starts the jobs of one message (a Job, or a JobBatch) in one runner task."""
        # Once per message, not per job: whether a tracer provider is configured.
        traced = _tracing.enabled()
        loop = asyncio.get_running_loop()
        running = self._running
        # Looked up once per message (a bound method is a new object on every access).
        heartbeat, worker_id = self._heartbeat, self.worker_id
        start: list[tuple[JobContext, str]] = []
        n = 0
        for job in jobs:
            n += 1
            ref = job.ref
            if self._draining:
                self._unstarted.append(ref)
                continue
            ctx = JobContext(
                ref=ref,
                queue=job.queue,
                kind=job.kind,
                args=None,
                meta=job.meta,
                max_attempts=job.max_attempts,
                priority=job.priority,
                enqueued_at_ms=job.enqueued_at_unix_ms,
                enqueued_at_us=job.enqueued_at_unix_us,
                lease_until_ms=job.lease_until_unix_ms,
                worker_id=worker_id,
                heartbeat=heartbeat,
                loop=loop,
            )
            running[(ctx.id, ctx.attempt)] = (ctx, None)
            start.append((ctx, job.args))
        self.stats["received"] += n
        self._server_credits -= n
        if start:
            self._start_runner(start, traced)
        if self._draining:
            self._kick()

    def _start_runner(self, jobs: list[tuple[JobContext, str]], traced: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._run_jobs(jobs, traced))
        self._runners.add(task)
        task.add_done_callback(self._runners.discard)

    async def _run_jobs(self, jobs: list[tuple[JobContext, str]], traced: bool) -> None:
        """Starts `jobs` in order; stays with the first that suspends (see _steps)."""
        running = self._running
        for i, (ctx, args) in enumerate(jobs):
            key = (ctx.id, ctx.attempt)
            entry = running.get(key)
            if entry is None or entry[0] is not ctx:
                continue  # abandoned (shutdown) before its turn
            coro = self._execute(ctx, args, traced)
            context = contextvars.copy_context()
            try:
                suspended, yielded = first_step(coro, context)
            except asyncio.CancelledError:
                # The handler raised it itself: that ends this job alone, as it ended the
                # job's own task before; the jobs after it still run.
                continue
            if not suspended:
                continue
            if i + 1 < len(jobs):
                self._start_runner(jobs[i + 1 :], traced)
            task = asyncio.current_task()
            if key in running:
                running[key] = (ctx, task)
            await drive(coro, context, yielded)
            return

    def _on_result_acks(self, acks: Iterable[worker_pb2.ResultAck]) -> None:
        n = stale = 0
        for ack in acks:
            ref = ack.ref
            key = (ref.id, ref.attempt)
            code = ack.error.code if ack.HasField("error") else ""
            if code == "unavailable":
                # Not recorded, and nothing else recorded either: send it again shortly.
                if key in self._unacked:
                    self._refuse(key, ack.error.message)
                continue
            n += 1
            self._unacked.pop(key, None)
            if ack.stale:
                stale += 1
            if code:
                self.stats["result_errors"] += 1
                log.warning("pgferry worker: result for job %d rejected: %s %s",
                            ref.id, ack.error.code, ack.error.message)
            else:
                self._resends.recorded()
        self.stats["acked"] += n
        if stale:
            self.stats["stale"] += stale

    def _refuse(self, key: Key, message: str) -> None:
        """The server could not record this result for now (its database is unavailable):
        keep it unacked and send it again after a pause that doubles per resend while the
        outage lasts (a successful ack resets it)."""
        self.stats["results_resent"] += 1
        # Debug, not warning: an outage refuses every result, repeatedly.
        log.debug("pgferry worker: result for job %d not recorded yet (%s); resending", key[0], message)
        self._resends.refuse(key)

    def _resend_refused(self, keys: set[Key]) -> None:
        """Sends the refused results (those still unacked) again through the writer, the
        way every finished result goes: in a ResultBatch with the owed credits when batching,
        else one message each. Out of _unacked until written, so a reconnect in between
        sends each of them once."""
        for key in keys:
            r = self._unacked.pop(key, None)
            if r is not None:
                self._results.append(r)
        if self._results:
            self._kick()

    def _on_cancel(self, ref: common_pb2.AttemptRef) -> None:
        entry = self._running.get((ref.id, ref.attempt))
        if entry is None:
            return
        ctx, task = entry
        ctx._set_cancelled()
        # A job not started yet (task None) is reported cancelled when its turn comes.
        if self.hard_cancel and task is not None:
            task.cancel()

    def _on_heartbeat_ack(self, ack: worker_pb2.HeartbeatAck) -> None:
        self._hb.on_ack(ack, self._running)
        self._flush_heartbeats()

    async def _heartbeat(self, ctx: JobContext) -> bool:
        if self._call is None:
            raise Unavailable("worker is not connected")
        fut = self._hb.request(ctx)
        self._flush_heartbeats()
        return await fut

    def _flush_heartbeats(self) -> None:
        msg = self._hb.next_message()
        if msg is not None:
            self._outbox.append(msg)
            self._kick()

    # -- execution ---------------------------------------------------------------------

    async def _execute(self, ctx: JobContext, args_json: str, traced: bool) -> None:
        started = time.monotonic()
        outcome: Any
        handler: Handler | None = None
        pos: tuple[Any, ...] = ()
        kw: dict[str, Any] = {}
        try:
            if self.hard_cancel and ctx.cancelled:
                # Cancelled between arrival and start: its task would have been cancelled.
                raise JobCancelled("cancelled by the server")
            handler = self._handlers.get(ctx.kind)
            if handler is None:
                raise Fail(f"no handler registered for kind {ctx.kind!r}", kind="UnknownKind")
            ctx.args = loads(args_json)
            pos, kw = call_args(ctx.args)
            if traced:
                with _tracing.job_span(ctx.kind, ctx.queue, ctx.id, ctx.meta):
                    value = await self._invoke(handler, ctx, pos, kw)
            elif handler.is_async:
                value = await handler.fn(ctx, *pos, **kw)
            else:
                value = await self._run_sync(handler.fn, ctx, pos, kw)
            if isinstance(value, Outcome):  # Snooze, Cancel or Fail, returned
                raise value
            try:
                field, outcome = "ok", OK_NONE if value is None else worker_pb2.Success(result=dumps(value))
            except (TypeError, ValueError) as e:
                raise result_not_json(ctx.kind, e) from e
            self.stats["completed"] += 1
        except asyncio.CancelledError:
            if not ctx.cancelled or (self._stopping is not None and self._stopping.is_set()):
                raise  # abandoned at shutdown: the lease hands the job back
            field, outcome = "cancelled", worker_pb2.Cancelled(message="cancelled by the server")
            self.stats["cancelled"] += 1
        except Exception as e:  # an outcome raised (Snooze, Cancel, Fail) or a failure
            if isinstance(e, TypeError) and handler is not None and not handler.binds((ctx, *pos), kw):
                # The call itself failed: these arguments never fit this handler.
                e = argument_mismatch(ctx.kind, e)
            field, outcome, stat = outcome_of(e, self.dont_retry_on)
            self.stats[stat] += 1
            if not isinstance(e, (Outcome, JobCancelled)):
                log.debug("pgferry worker: job %d (%s) failed", ctx.id, ctx.kind, exc_info=True)
        key = (ctx.id, ctx.attempt)
        self._running.pop(key, None)
        self._results.append((key, ctx.ref, field, outcome, int((time.monotonic() - started) * 1000)))
        if not self._draining:
            self._credits += 1
        self._kick()

    async def _invoke(
        self, handler: Handler, ctx: JobContext, pos: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        if handler.is_async:
            return await handler.fn(ctx, *pos, **kw)
        return await self._run_sync(handler.fn, ctx, pos, kw)

    async def _run_sync(
        self, fn: Callable[..., Any], ctx: JobContext, pos: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix="pgferry-job"
            )
        # copy_context: the handler sees the tracing span and any contextvars of the task.
        call = functools.partial(contextvars.copy_context().run, fn, ctx, *pos, **kw)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)


def run_worker(app: Worker) -> None:
    """Entry used by the `pgferry-worker` command."""
    app.run()


__all__ = ["Worker", "JobContext", "run_worker"]
