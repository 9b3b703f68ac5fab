"""The asyncio client: enqueue over one persistent Producer stream, admin over unary RPCs."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc
import grpc.aio

from pgferry import _conn, _tracing
from pgferry._http_admin import HttpAdmin
from pgferry._results import raise_unless_completed, wait_finished
from pgferry._types import (
    DEFAULT_QUEUE,
    Durability,
    EnqueuedJob,
    JobInfo,
    JobRequest,
    QueueInfo,
    SpecSource,
    job_from_pb,
    queue_from_pb,
    fill_spec,
    queue_settings_pb,
    to_spec,
)
from pgferry.errors import (
    AuthError,
    PgferryError,
    ProtocolError,
    Unavailable,
    Unimplemented,
    from_error,
    from_rpc_error,
)
from pgferry.workflows import WorkflowCalls
from pgferry.v1 import admin_pb2, producer_pb2

log = logging.getLogger("pgferry")

_PRODUCER_STREAM = "/pgferry.v1.Producer/Stream"
_ADMIN = "/pgferry.v1.Admin/"

JobLike = JobRequest | tuple[str, Any] | Mapping[str, Any]


def _as_request(j: JobLike) -> JobRequest:
    if isinstance(j, JobRequest):
        return j
    if isinstance(j, tuple):
        kind, args = j
        return JobRequest(kind=kind, args=args)
    if isinstance(j, Mapping):
        return JobRequest(**j)
    raise TypeError(f"enqueue_many: expected JobRequest, (kind, args) or dict, got {type(j)!r}")


class _ProducerStream:
    """One Producer stream. Requests carry a client-chosen seq; acks (which may arrive out
    of order) resolve the matching future, so any number of enqueues pipeline on it."""

    def __init__(self, call: Any, hello_ack: producer_pb2.HelloAck) -> None:
        self.call = call
        self.hello_ack = hello_ack
        self.pending: dict[int, asyncio.Future[producer_pb2.EnqueueAck]] = {}
        self.outbox: asyncio.Queue[producer_pb2.ProducerRequest | None] = asyncio.Queue()
        self.dead: PgferryError | None = None
        self.reader = asyncio.create_task(self._read())
        self.writer = asyncio.create_task(self._write())

    async def _write(self) -> None:
        try:
            while True:
                msg = await self.outbox.get()
                if msg is None:
                    await self.call.done_writing()
                    return
                await self.call.write(msg)
        except (grpc.RpcError, asyncio.InvalidStateError) as e:
            self._fail(Unavailable(f"producer stream write failed: {e}"))
        except asyncio.CancelledError:
            pass

    async def _read(self) -> None:
        err: PgferryError
        try:
            while True:
                resp = await self.call.read()
                if resp is grpc.aio.EOF:
                    err = Unavailable("producer stream closed by the server")
                    break
                if resp.WhichOneof("msg") != "ack":
                    continue
                fut = self.pending.pop(resp.ack.seq, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp.ack)
        except grpc.RpcError as e:
            err = from_rpc_error(e)
            if not isinstance(err, (AuthError,)):
                err = Unavailable(f"producer stream lost: {err.message}", code=err.code)
        except asyncio.CancelledError:
            err = Unavailable("client closed")
        self._fail(err)

    def _fail(self, err: PgferryError) -> None:
        if self.dead is None:
            self.dead = err
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(self.dead)

    async def send(
        self, seq: int, req: producer_pb2.ProducerRequest, timeout: float | None
    ) -> producer_pb2.EnqueueAck:
        if self.dead is not None:
            raise self.dead
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[producer_pb2.EnqueueAck] = loop.create_future()
        self.pending[seq] = fut
        self.outbox.put_nowait(req)
        if timeout is None:
            return await fut
        # A timer instead of asyncio.wait_for: no extra task per enqueue on the hot path.
        timer = loop.call_later(timeout, self._expire, seq, timeout)
        try:
            return await fut
        finally:
            timer.cancel()

    def _expire(self, seq: int, timeout: float) -> None:
        fut = self.pending.pop(seq, None)
        if fut is not None and not fut.done():
            fut.set_exception(Unavailable(f"no enqueue ack within {timeout}s (outcome unknown)"))

    async def close(self) -> None:
        self.outbox.put_nowait(None)
        self.call.cancel()
        for t in (self.reader, self.writer):
            t.cancel()
        await asyncio.gather(self.reader, self.writer, return_exceptions=True)


class Client(WorkflowCalls):
    """Async pgferry client.

    >>> client = pgferry.Client("http://127.0.0.1:50051", api_key)
    >>> job = await client.enqueue("send_email", {"to": "a@b.c"}, queue="emails")

    One Producer stream is opened on first use and kept; concurrent `enqueue` calls share it
    (acks are matched by seq). If the server goes away, calls in flight raise `Unavailable`
    (their outcome is unknown) and the next call reconnects, retrying for up to
    `connect_timeout` seconds.

    Retry-safe enqueues: every enqueue request carries an idempotency key (generated per
    call, or `idempotency_key=`). When the answer is lost (the connection drops, the server
    restarts, no ack within `timeout`), the client sends the request again with the same key
    for up to `enqueue_retry_for` seconds, with backoff; the server answers a repeat with
    the ids the first request wrote and writes nothing, so no job is enqueued twice.
    `enqueue_retry_for=0` turns the retries off (Unavailable is raised at once)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        client_name: str | None = None,
        connect_timeout: float = 10.0,
        default_queue: str = DEFAULT_QUEUE,
        timeout: float | None = 30.0,
        http_url: str | None = None,
        enqueue_retry_for: float = 60.0,
    ) -> None:
        self.url = url
        # The server's HTTP address: admin calls fall back to its /v1 API when the server
        # does not offer the gRPC Admin service.
        self.http_url = http_url
        self._http: HttpAdmin | None = None
        self._api_key = api_key
        self.client_name = client_name or f"python@{socket.gethostname()}:{os.getpid()}"
        self.connect_timeout = connect_timeout
        self.default_queue = default_queue
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stream: _ProducerStream | None = None
        self._connecting: asyncio.Lock | None = None
        self._seq = itertools.count(1)
        self._closed = False
        self.enqueue_retry_for = enqueue_retry_for
        # Idempotency keys: this client's random prefix and a per-request counter (unique
        # without a random draw per request).
        self._key_prefix = uuid.uuid4().hex
        self._keys = itertools.count(1)
        self.stats: collections.Counter[str] = collections.Counter()

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            await self._stream.close()
            self._stream = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _chan(self) -> grpc.aio.Channel:
        if self._closed:
            raise PgferryError("client is closed", code="closed")
        if self._channel is None:
            self._channel = _conn.open_channel(self.url)
        return self._channel

    @property
    def max_batch(self) -> int | None:
        """Largest EnqueueBatch the server accepts (known after the first enqueue)."""
        return self._stream.hello_ack.max_batch if self._stream else None

    async def _producer(self) -> _ProducerStream:
        s = self._stream
        if s is not None and s.dead is None:
            return s
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            s = self._stream
            if s is not None and s.dead is None:
                return s
            if s is not None:
                await s.close()
                self._stream = None
            self._stream = await self._open_producer()
            return self._stream

    async def _open_producer(self) -> _ProducerStream:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        backoff = _conn.Backoff(base=0.05, cap=2.0)
        while True:
            try:
                return await self._hello()
            except Unavailable:
                delay = backoff.next_delay()
                if loop.time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)

    async def _hello(self) -> _ProducerStream:
        method = self._chan().stream_stream(
            _PRODUCER_STREAM,
            request_serializer=producer_pb2.ProducerRequest.SerializeToString,
            response_deserializer=producer_pb2.ProducerResponse.FromString,
        )
        call: Any = method(metadata=_conn.auth_metadata(self._api_key))
        try:
            await call.write(
                producer_pb2.ProducerRequest(
                    hello=producer_pb2.Hello(api_key=self._api_key, client_name=self.client_name)
                )
            )
            resp = await call.read()
        except grpc.RpcError as e:
            call.cancel()
            err = from_rpc_error(e)
            if type(err) is PgferryError:
                # No answer of the server's (gRPC core's "Internal error from Core" on a
                # connection that was just cut): the hello carries nothing, try it again.
                raise Unavailable(f"producer hello failed: {err.message}", code=err.code) from None
            raise err from None
        if resp is grpc.aio.EOF or resp.WhichOneof("msg") != "hello_ack":
            call.cancel()
            raise ProtocolError("producer stream: expected hello_ack")
        return _ProducerStream(call, resp.hello_ack)

    # -- enqueue -----------------------------------------------------------------------

    async def enqueue(
        self,
        kind: str,
        args: Any = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        meta: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> EnqueuedJob:
        """Enqueue one job; returns once it is committed. `args` is any JSON value (a dict
        becomes the handler's keyword arguments). `delay` is seconds or a timedelta.
        `idempotency_key` (1-255 visible ASCII characters; default: generated) makes a
        repeat of this request within the server's retention answer this job's id."""
        spec = to_spec(
            JobRequest(
                kind=kind,
                args=args,
                queue=queue or self.default_queue,
                priority=priority,
                run_at=run_at,
                delay=delay,
                unique_key=unique_key,
                max_attempts=max_attempts,
                meta=meta,
            )
        )
        seq = next(self._seq)
        req = producer_pb2.ProducerRequest(
            enqueue=producer_pb2.Enqueue(seq=seq, job=spec, idempotency_key=idempotency_key or self._key())
        )
        ack = await self._send(seq, req)
        return self._single(ack)

    def _key(self) -> str:
        return f"{self._key_prefix}-{next(self._keys)}"

    async def enqueue_many(
        self, jobs: Iterable[JobLike], *, idempotency_key: str | None = None
    ) -> list[EnqueuedJob]:
        """Enqueue several jobs atomically (one EnqueueBatch): all are committed or none.
        One idempotency key covers the batch (default: generated)."""
        return await self._enqueue_batch([_as_request(j) for j in jobs], idempotency_key)

    async def _enqueue_batch(
        self, reqs: Sequence[SpecSource], idempotency_key: str | None = None
    ) -> list[EnqueuedJob]:
        """enqueue_many of ready requests (JobRequests, or task calls)."""
        if not reqs:
            return []
        # The specs are built inside the request (no copy of each into the batch), and
        # what is the same for every job (trace headers, default queue) is found once.
        req = producer_pb2.ProducerRequest()
        batch = req.batch
        add = batch.jobs.add
        carrier = _tracing.carrier()
        default_queue = self.default_queue
        for r in reqs:
            fill_spec(add, r, default_queue if r.queue == DEFAULT_QUEUE else r.queue, carrier)
        seq = next(self._seq)
        batch.seq = seq
        batch.idempotency_key = idempotency_key or self._key()
        ack = await self._send(seq, req)
        if len(ack.job_ids) != len(reqs):
            raise ProtocolError(f"enqueue ack has {len(ack.job_ids)} ids for {len(reqs)} jobs")
        # A replay answers the ids our own earlier send wrote: not duplicates from the
        # caller's point of view (whether one was a unique-key duplicate is not known then).
        dups = [False] * len(reqs) if ack.replayed else (list(ack.duplicates) or [False] * len(reqs))
        return [EnqueuedJob(i, d) for i, d in zip(ack.job_ids, dups)]

    async def _send(self, seq: int, req: producer_pb2.ProducerRequest) -> producer_pb2.EnqueueAck:
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        backoff: _conn.Backoff | None = None
        sent = False
        while True:
            try:
                stream = await self._producer()
                sent = True
                ack = await stream.send(seq, req, self.timeout)
                break
            except Unavailable:
                # Outcome unknown. The request carries an idempotency key, so sending it
                # again cannot enqueue twice: the server replays the first answer. (No
                # connection at all on the first try: nothing was sent, and connecting was
                # already retried for connect_timeout.)
                if self.enqueue_retry_for <= 0 or self._closed or not sent:
                    raise
                if deadline is None:
                    deadline = loop.time() + self.enqueue_retry_for
                    backoff = _conn.Backoff(base=0.05, cap=2.0)
                assert backoff is not None
                delay = backoff.next_delay()
                if loop.time() + delay > deadline:
                    raise
                self.stats["enqueue_retries"] += 1
                log.info("pgferry: enqueue outcome unknown; retrying with its idempotency key in %.2fs", delay)
                await asyncio.sleep(delay)
                # A new seq: the retry may go out on a new stream, or on the same one while
                # the lost ack's seq could still arrive.
                seq = next(self._seq)
                if req.HasField("batch"):
                    req.batch.seq = seq
                else:
                    req.enqueue.seq = seq
        if ack.HasField("error") and (ack.error.code or ack.error.message):
            raise from_error(ack.error.code, ack.error.message, ack.error.field)
        return ack

    @staticmethod
    def _single(ack: producer_pb2.EnqueueAck) -> EnqueuedJob:
        if len(ack.job_ids) != 1:
            raise ProtocolError(f"enqueue ack has {len(ack.job_ids)} ids for 1 job")
        dup = bool(ack.duplicates[0]) if ack.duplicates and not ack.replayed else False
        return EnqueuedJob(ack.job_ids[0], dup)

    # -- admin (unary) -----------------------------------------------------------------

    async def _unary(self, name: str, req: Any, resp_type: Any) -> Any:
        method = self._chan().unary_unary(
            _ADMIN + name,
            request_serializer=type(req).SerializeToString,
            response_deserializer=resp_type.FromString,
        )
        try:
            return await method(req, metadata=_conn.auth_metadata(self._api_key), timeout=self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def _admin(self, name: str, req: Any, resp_type: Any) -> Any:
        """A gRPC Admin call, or None when it must go over HTTP instead."""
        if self._http is not None:
            return None
        try:
            return await self._unary(name, req, resp_type)
        except Unimplemented:
            if not self.http_url:
                raise Unimplemented(
                    f"the server does not offer Admin.{name} over gRPC; pass http_url= "
                    "(its HTTP address) to use the HTTP API instead"
                ) from None
            self._http = HttpAdmin(self.http_url, self._api_key, self.timeout)
            return None

    async def get_job(self, job_id: int | EnqueuedJob) -> JobInfo:
        """The job's state, attempts and result. Raises NotFound for unknown ids (and for
        other tenants' jobs)."""
        r = await self._admin("GetJob", admin_pb2.GetJobRequest(id=int(job_id)), admin_pb2.JobInfo)
        if r is None:
            assert self._http is not None
            return await self._http.get_job(int(job_id))
        return job_from_pb(r)

    async def wait(self, job_id: int | EnqueuedJob, timeout: float | None = None) -> JobInfo:
        """The job once it is completed, dead or cancelled, without polling (the server's
        HTTP long-poll answers when it finishes; needs `http_url`). ResultTimeout after
        `timeout` seconds (None: no limit)."""
        if not self.http_url:
            raise PgferryError("waiting for a job needs the server's HTTP address: pass http_url=", code="not_configured")
        return await wait_finished(self.http_url, self._api_key, int(job_id), timeout)

    async def result(self, job_id: int | EnqueuedJob, timeout: float | None = None) -> Any:
        """The job's result (JSON) once it completed; JobDead or JobCancelledError (both
        JobFailed) when it ended otherwise, ResultTimeout after `timeout` seconds."""
        job = await self.wait(job_id, timeout)
        raise_unless_completed(job)
        return job.result

    async def cancel(self, job_id: int | EnqueuedJob) -> JobInfo:
        """Cancel a job. A pending job never runs; a running one's worker is told
        (ctx.cancelled) and may stop cooperatively."""
        r = await self._admin("CancelJob", admin_pb2.JobIdRequest(id=int(job_id)), admin_pb2.JobInfo)
        if r is None:
            assert self._http is not None
            return await self._http.cancel(int(job_id))
        return job_from_pb(r)

    async def retry(self, job_id: int | EnqueuedJob) -> JobInfo:
        """Run a dead-lettered job again."""
        r = await self._admin("RetryJob", admin_pb2.JobIdRequest(id=int(job_id)), admin_pb2.JobInfo)
        if r is None:
            assert self._http is not None
            return await self._http.retry(int(job_id))
        return job_from_pb(r)

    async def list_jobs(
        self,
        *,
        queue: str = "",
        state: str = "",
        kind: str = "",
        cursor: str = "",
        limit: int = 100,
    ) -> tuple[list[JobInfo], str | None]:
        """One page of jobs and the cursor of the next page (None on the last page)."""
        r = await self._admin(
            "ListJobs",
            admin_pb2.ListJobsRequest(queue=queue, state=state, kind=kind, cursor=cursor, limit=limit),
            admin_pb2.ListJobsResponse,
        )
        if r is None:
            assert self._http is not None
            return await self._http.list_jobs(queue, state, kind, cursor, limit)
        return [job_from_pb(j) for j in r.jobs], (r.next_cursor if r.has_more else None)

    async def list_dead(
        self, *, queue: str = "", kind: str = "", cursor: str = "", limit: int = 100
    ) -> tuple[list[JobInfo], str | None]:
        """One page of the dead-letter queue and the cursor of the next page."""
        r = await self._admin(
            "ListDead",
            admin_pb2.ListDeadRequest(
                filter=admin_pb2.DeadFilter(queue=queue, kind=kind), cursor=cursor, limit=limit
            ),
            admin_pb2.ListJobsResponse,
        )
        if r is None:
            assert self._http is not None
            return await self._http.list_dead(queue, kind, cursor, limit)
        return [job_from_pb(j) for j in r.jobs], (r.next_cursor if r.has_more else None)

    async def retry_dead(
        self, *, queue: str = "", kind: str = "", ids: Sequence[int] = ()
    ) -> int:
        """Re-enqueue dead-lettered jobs matching the filter; returns how many."""
        r = await self._admin(
            "RetryDead",
            admin_pb2.DeadFilter(queue=queue, kind=kind, ids=list(ids)),
            admin_pb2.CountResponse,
        )
        if r is None:
            assert self._http is not None
            return await self._http.dead_op("retry", queue, kind, ids)
        return int(r.count)

    async def purge_dead(
        self, *, queue: str = "", kind: str = "", ids: Sequence[int] = ()
    ) -> int:
        """Delete dead-lettered jobs matching the filter; returns how many."""
        r = await self._admin(
            "PurgeDead",
            admin_pb2.DeadFilter(queue=queue, kind=kind, ids=list(ids)),
            admin_pb2.CountResponse,
        )
        if r is None:
            assert self._http is not None
            return await self._http.dead_op("purge", queue, kind, ids)
        return int(r.count)

    async def list_queues(self) -> list[QueueInfo]:
        r = await self._admin("ListQueues", admin_pb2.ListQueuesRequest(), admin_pb2.ListQueuesResponse)
        if r is None:
            assert self._http is not None
            return await self._http.list_queues()
        return [queue_from_pb(q) for q in r.queues]

    async def update_queue(
        self, name: str, *, durability: Durability | None = None, **settings: int | None
    ) -> QueueInfo:
        """Change queue settings: concurrency, max_attempts, backoff_base_ms,
        backoff_cap_ms, lease_ms, retention_ms, aging_ms, durability (unset ones keep their
        value).

        durability "async" makes the queue's enqueues, claims and completions faster, but a
        Postgres crash can lose the last fraction of a second of acknowledged work; "sync"
        (the default) does not. Any other value raises InvalidArgument naming the field
        ("settings.durability"; "durability" over HTTP) and changes nothing."""
        pb = queue_settings_pb(durability, **settings)
        r = await self._admin(
            "UpdateQueue", admin_pb2.UpdateQueueRequest(name=name, settings=pb), admin_pb2.QueueInfo
        )
        if r is None:
            assert self._http is not None
            body: dict[str, int | str] = {k: v for k, v in settings.items() if v is not None}
            if durability is not None:
                body["durability"] = durability
            return await self._http.update_queue(name, body)
        return queue_from_pb(r)

    async def pause_queue(self, name: str) -> QueueInfo:
        r = await self._admin("PauseQueue", admin_pb2.QueueNameRequest(name=name), admin_pb2.QueueInfo)
        if r is None:
            assert self._http is not None
            return await self._http.queue_action(name, "pause")
        return queue_from_pb(r)

    async def resume_queue(self, name: str) -> QueueInfo:
        r = await self._admin("ResumeQueue", admin_pb2.QueueNameRequest(name=name), admin_pb2.QueueInfo)
        if r is None:
            assert self._http is not None
            return await self._http.queue_action(name, "resume")
        return queue_from_pb(r)


__all__ = ["Client", "JobLike"]
