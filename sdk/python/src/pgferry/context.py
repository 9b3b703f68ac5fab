"""What a handler sees: the job's identity and a way to talk back (heartbeat) and to learn
that the job was cancelled."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timezone
from typing import Any

from pgferry.v1 import common_pb2


class JobCancelled(Exception):
    """Raised by `ctx.raise_if_cancelled()`; the worker reports the attempt as cancelled."""


_NO_RESOURCES: dict[str, Any] = {}

# The job a task function is running for (set by the task runner in the job's own
# contextvars context; see pgferry.current_job).
_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("pgferry_current_job")


def current_job() -> JobContext:
    """The JobContext of the task running in this context (id, attempt, meta, heartbeat,
    cancellation, `resources`). Raises LookupError outside a task."""
    try:
        return _current.get()
    except LookupError:
        raise LookupError("pgferry.current_job(): not inside a running pgferry task") from None


class JobContext:
    """Passed as the first argument to every handler.

    `cancelled` becomes True (and `cancel_event` is set) when the server cancels the job or
    reports its lease lost; handlers doing long work should check it and stop. Sync handlers
    (run in a thread) use `heartbeat_sync()` and `cancelled`."""

    __slots__ = (
        "id",
        "attempt",
        "queue",
        "kind",
        "args",
        "_meta",
        "_meta_src",
        "max_attempts",
        "priority",
        "enqueued_at_ms",
        "enqueued_at_us",
        "lease_until_ms",
        "worker_id",
        "ref",
        "_cancel_event",
        "_cancelled",
        "_heartbeat",
        "_loop",
        "resources",
    )

    def __init__(
        self,
        *,
        ref: common_pb2.AttemptRef,
        queue: str,
        kind: str,
        args: Any,
        meta: Mapping[str, str],
        max_attempts: int,
        priority: int,
        enqueued_at_ms: int,
        lease_until_ms: int,
        worker_id: str,
        heartbeat: Callable[[JobContext], Coroutine[Any, Any, bool]],
        loop: asyncio.AbstractEventLoop,
        enqueued_at_us: int = 0,
    ) -> None:
        self.ref = ref
        self.id: int = ref.id
        self.attempt: int = ref.attempt
        self.queue = queue
        self.kind = kind
        self.args = args
        # Converted on first use: most handlers never read it, and copying a protobuf
        # map costs more per job than the rest of the context.
        self._meta: dict[str, str] | None = None
        self._meta_src: Mapping[str, str] | None = meta
        self.max_attempts = max_attempts
        self.priority = priority
        self.enqueued_at_ms = enqueued_at_ms
        # Microseconds when the server sends them (0: only the milliseconds are known).
        self.enqueued_at_us = enqueued_at_us
        self.lease_until_ms = lease_until_ms
        self.worker_id = worker_id
        self._cancel_event: asyncio.Event | None = None
        # A plain flag (set on the loop thread, read from any thread): cheaper per job
        # than a threading.Event, and a bool read is atomic under the GIL.
        self._cancelled = False
        self._heartbeat = heartbeat
        self._loop = loop
        # The App's shared resources (set by the task runner; see App.on_startup).
        self.resources: dict[str, Any] = _NO_RESOURCES

    def __repr__(self) -> str:
        return f"<JobContext {self.kind} id={self.id} attempt={self.attempt} queue={self.queue}>"

    @property
    def meta(self) -> dict[str, str]:
        """The job's headers (as enqueued; `traceparent` when enqueued inside a span)."""
        meta = self._meta
        if meta is None:
            # _meta_src stays: a sync handler's thread may convert it at the same time.
            src = self._meta_src
            meta = self._meta = dict(src) if src else {}
        return meta

    @meta.setter
    def meta(self, value: dict[str, str]) -> None:
        self._meta, self._meta_src = value, None

    @property
    def is_last_attempt(self) -> bool:
        return self.max_attempts > 0 and self.attempt >= self.max_attempts

    @property
    def enqueued_at(self) -> datetime:
        us = self.enqueued_at_us
        if us > 0:
            at = datetime.fromtimestamp(us // 1_000_000, tz=timezone.utc)
            return at.replace(microsecond=us % 1_000_000)
        return datetime.fromtimestamp(self.enqueued_at_ms / 1000, tz=timezone.utc)

    @property
    def lease_until(self) -> datetime:
        return datetime.fromtimestamp(self.lease_until_ms / 1000, tz=timezone.utc)

    # -- cancellation ------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def cancel_event(self) -> asyncio.Event:
        """An asyncio.Event set on cancellation (for `await ctx.cancel_event.wait()`)."""
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
            if self._cancelled:
                self._cancel_event.set()
        return self._cancel_event

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise JobCancelled(f"job {self.id} was cancelled")

    def _set_cancelled(self) -> None:
        # Runs on the event loop thread.
        self._cancelled = True
        if self._cancel_event is not None:
            self._cancel_event.set()

    # -- heartbeat ---------------------------------------------------------------------

    async def heartbeat(self) -> bool:
        """Extend the lease. True when the server confirmed it; False when the job is no
        longer held by this worker (rescued or cancelled: stop working on it; `cancelled`
        is then set). Raises pgferry.Unavailable when there is no connection."""
        return await self._heartbeat(self)

    def heartbeat_sync(self, timeout: float = 30.0) -> bool:
        """`heartbeat()` for sync handlers running in the worker's thread pool."""
        fut = asyncio.run_coroutine_threadsafe(self._heartbeat(self), self._loop)
        return bool(fut.result(timeout))
