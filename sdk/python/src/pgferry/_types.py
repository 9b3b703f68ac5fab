"""Value types of the public API and their conversion to and from the protocol."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol

from pgferry import _tracing
from pgferry.v1 import admin_pb2, common_pb2

DEFAULT_QUEUE = "default"


# Compact separators: args are stored as jsonb; spaces only cost bytes on the wire. One
# encoder for the process: json.dumps with any option builds a new JSONEncoder per call,
# which cost more than the encoding itself for small args.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dumps(value: Any) -> str:
    # None (no args, a handler returning nothing) is the common case; skip the encoder.
    return "null" if value is None else _encode(value)


def loads(text: str) -> Any:
    # Empty and "null" (no args) need no parser.
    return json.loads(text) if text and text != "null" else None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job for `enqueue_many`. Same fields as `Client.enqueue`."""

    kind: str
    args: Any = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    meta: Mapping[str, str] | None = None


class SpecSource(Protocol):
    """What a JobSpec is built from: a JobRequest, or a task call (pgferry.TaskCall)."""

    @property
    def kind(self) -> str: ...
    @property
    def args(self) -> Any: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def run_at(self) -> datetime | None: ...
    @property
    def delay(self) -> float | timedelta | None: ...
    @property
    def unique_key(self) -> str | None: ...
    @property
    def max_attempts(self) -> int | None: ...
    @property
    def meta(self) -> Mapping[str, str] | None: ...


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """The answer to an enqueue: the job's id, and whether a unique job with the same key
    already existed (then `id` is that job's id and nothing new was enqueued)."""

    id: int
    duplicate: bool = False

    def __int__(self) -> int:
        return self.id


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    attempt: int
    outcome: str
    error: str
    error_kind: str
    claimed_at: datetime | None
    finished_at: datetime | None
    duration_ms: int
    worker: str


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as the server reports it (`Client.get_job`, `cancel`, `retry`)."""

    id: int
    queue: str
    kind: str
    state: str
    args: Any
    meta: dict[str, str]
    priority: int
    max_attempts: int
    enqueued_at: datetime | None
    run_at: datetime | None
    attempts: list[AttemptInfo] = field(default_factory=list)
    result: Any = None
    unique_key: str | None = None


def _ms_to_dt(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


def _delay_ms(delay: float | timedelta) -> int:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if seconds < 0:
        raise ValueError("delay must be >= 0")
    return int(round(seconds * 1000))


def to_spec(req: JobRequest, *, trace: bool = True) -> common_pb2.JobSpec:
    """Build the protocol JobSpec; raises ValueError/TypeError for input that can never be
    valid (the server validates everything else and answers InvalidArgument)."""
    return fill_spec(common_pb2.JobSpec, req, req.queue, _tracing.carrier() if trace else None)


def fill_spec(
    new: Callable[..., common_pb2.JobSpec],
    req: SpecSource,
    queue: str,
    carrier: Mapping[str, str] | None,
) -> common_pb2.JobSpec:
    """`to_spec` with the parts that are the same for every job of a batch passed in:
    `new` makes the message (the JobSpec class, or `batch.jobs.add` to build it in place
    instead of copying it into the batch later), `queue` replaces req.queue, and `carrier`
    is the current span's trace headers (`_tracing.carrier()`, looked up once per call)."""
    if req.run_at is not None and req.delay is not None:
        raise ValueError("pass run_at or delay, not both")
    args = dumps(req.args)
    meta = req.meta
    # The span's headers go in unless the caller set traceparent explicitly.
    if carrier and not (meta and "traceparent" in meta):
        merged = dict(carrier)
        if meta:
            merged.update(meta)
        meta = merged
    # An empty map argument costs more than the rest of the message: leave it out.
    if meta:
        spec = new(queue=queue, kind=req.kind, args=args, meta=dict(meta), priority=req.priority)
    else:
        spec = new(queue=queue, kind=req.kind, args=args, priority=req.priority)
    if req.max_attempts is not None:
        spec.max_attempts = req.max_attempts
    if req.run_at is not None:
        run_at = req.run_at
        if run_at.tzinfo is None:
            raise ValueError("run_at must be timezone-aware (e.g. datetime.now(timezone.utc))")
        spec.run_at_unix_ms = int(run_at.timestamp() * 1000)
    if req.delay is not None:
        spec.delay_ms = _delay_ms(req.delay)
    if req.unique_key is not None:
        spec.unique_key = req.unique_key
    return spec


def attempt_from_pb(a: admin_pb2.AttemptInfo) -> AttemptInfo:
    return AttemptInfo(
        attempt=a.attempt,
        outcome=a.outcome,
        error=a.error,
        error_kind=a.error_kind,
        claimed_at=_ms_to_dt(a.claimed_at_unix_ms),
        finished_at=_ms_to_dt(a.finished_at_unix_ms),
        duration_ms=a.duration_ms,
        worker=a.worker,
    )


def job_from_pb(j: admin_pb2.JobInfo) -> JobInfo:
    return JobInfo(
        id=j.id,
        queue=j.queue,
        kind=j.kind,
        state=j.state,
        args=loads(j.args),
        meta=dict(j.meta),
        priority=j.priority,
        max_attempts=j.max_attempts,
        enqueued_at=_ms_to_dt(j.enqueued_at_unix_ms),
        run_at=_ms_to_dt(j.run_at_unix_ms) if j.HasField("run_at_unix_ms") else None,
        attempts=[attempt_from_pb(a) for a in j.attempts],
        result=loads(j.result),
        unique_key=j.unique_key if j.HasField("unique_key") else None,
    )


Durability = Literal["sync", "async"]
"""How a queue's enqueues, claims and completions commit (server architecture.md §1.7).

"sync" (the default): acknowledged only once the commit is on disk. "async": acknowledged
once the commit is in Postgres's WAL buffers, which is faster, but a Postgres crash (not a
pgferry crash) can lose the last fraction of a second of acknowledged enqueues and
completions; a lost completion means the attempt runs again after its lease."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue's numeric settings, job counts and durability ("sync" or "async", see
    `Durability`)."""

    name: str
    paused: bool
    settings: dict[str, int]
    counts: dict[str, int]
    durability: Durability = "sync"


_SETTINGS = (
    "concurrency",
    "max_attempts",
    "backoff_base_ms",
    "backoff_cap_ms",
    "lease_ms",
    "retention_ms",
    "aging_ms",
)
_COUNTS = (
    "pending",
    "scheduled",
    "running",
    "completed",
    "failed",
    "dead",
    "cancelled",
    "enqueued",
)


def queue_settings_pb(durability: str | None = None, **settings: int | None) -> admin_pb2.QueueSettings:
    """The UpdateQueue settings; the server checks the values (a bad durability is an
    InvalidArgument naming settings.durability)."""
    unknown = set(settings) - set(_SETTINGS)
    if unknown:
        raise TypeError(f"unknown queue settings: {sorted(unknown)}")
    pb = admin_pb2.QueueSettings(durability=durability)
    for k, v in settings.items():
        if v is not None:
            setattr(pb, k, v)
    return pb


def as_durability(value: object) -> Durability:
    """A queue's durability as the server reported it ("sync" when it did not say, as from
    a server older than the setting)."""
    return "async" if value == "async" else "sync"


def queue_from_pb(q: admin_pb2.QueueInfo) -> QueueInfo:
    settings = {k: int(getattr(q.settings, k)) for k in _SETTINGS if q.settings.HasField(k)}
    counts = {k: int(getattr(q.counts, k)) for k in _COUNTS}
    return QueueInfo(
        name=q.name, paused=q.paused, settings=settings, counts=counts, durability=as_durability(q.durability)
    )
