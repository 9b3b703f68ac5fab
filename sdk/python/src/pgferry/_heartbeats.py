"""The worker's heartbeat bookkeeping (used by worker.py), and its automatic heartbeats.

At most one Heartbeat message in flight per stream, carrying every ref whose handler
asked since the last one. The server answers each message with one HeartbeatAck but may
answer two messages out of order; with one in flight an ack always belongs to the batch
that was sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pgferry._steps import Key
from pgferry.context import JobContext
from pgferry.errors import Unavailable
from pgferry.v1 import common_pb2, worker_pb2

if TYPE_CHECKING:
    from pgferry.worker import Worker

# How often running jobs are looked at for automatic heartbeats (seconds).
_AUTO_HEARTBEAT_TICK = 0.2


def _ignore_result(fut: asyncio.Future[bool]) -> None:
    # An automatic heartbeat's answer needs no reader (a lost lease already marks the job
    # cancelled); consume a stream-lost error so asyncio does not log it.
    if not fut.cancelled():
        fut.exception()


class Heartbeats:
    def __init__(self) -> None:
        self._pending: dict[Key, list[asyncio.Future[bool]]] = {}
        self._inflight: dict[Key, list[asyncio.Future[bool]]] = {}
        self._refs: dict[Key, common_pb2.AttemptRef] = {}

    def request(self, ctx: JobContext) -> asyncio.Future[bool]:
        """A future for the answer to a heartbeat of `ctx`'s attempt."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        key = (ctx.id, ctx.attempt)
        self._pending.setdefault(key, []).append(fut)
        self._refs[key] = ctx.ref
        return fut

    def next_message(self) -> worker_pb2.WorkerRequest | None:
        """The Heartbeat to send now: None while one is in flight or none was asked for."""
        if self._inflight or not self._pending:
            return None
        self._inflight, self._pending = self._pending, {}
        refs = [self._refs.pop(k) for k in self._inflight]
        return worker_pb2.WorkerRequest(heartbeat=worker_pb2.Heartbeat(refs=refs))

    def on_ack(self, ack: worker_pb2.HeartbeatAck, running: Mapping[Key, tuple[JobContext, Any]]) -> None:
        """Answers the batch in flight; lost attempts are marked cancelled."""
        lost = {(r.id, r.attempt) for r in ack.lost}
        for key in lost:
            entry = running.get(key)
            if entry is not None:
                entry[0]._set_cancelled()
        batch, self._inflight = self._inflight, {}
        for key, futs in batch.items():
            entry = running.get(key)
            if entry is not None and key not in lost and ack.lease_until_unix_ms:
                entry[0].lease_until_ms = ack.lease_until_unix_ms
            for fut in futs:
                if not fut.done():
                    fut.set_result(key not in lost)

    def fail_all(self) -> None:
        """The stream is gone: every heartbeat waiting for an answer raises Unavailable."""
        batches = [self._inflight, self._pending]
        self._inflight, self._pending, self._refs = {}, {}, {}
        for batch in batches:
            for futs in batch.values():
                for fut in futs:
                    if not fut.done():
                        fut.set_exception(Unavailable("worker stream lost before the heartbeat ack"))


async def auto_heartbeats(w: Worker) -> None:
    """Heartbeats every job that has been running for a third of its lease, and again
    each third after. A job's lease length is estimated once, from the lease_until it
    arrived with (the server's clock) against ours, falling back to the server's default
    lease when the clocks disagree too much to tell."""
    loop = asyncio.get_running_loop()
    due: dict[Key, tuple[float, float]] = {}  # key -> (next heartbeat, interval)
    while True:
        await asyncio.sleep(_AUTO_HEARTBEAT_TICK)
        running = w._running
        if not running:
            due.clear()
            continue
        now = loop.time()
        wall_ms = time.time() * 1000
        default = (w._hello_ack.default_lease_ms if w._hello_ack else 0) or 30_000
        sent = False
        for key, (ctx, _) in list(running.items()):
            entry = due.get(key)
            if entry is None:
                lease = ctx.lease_until_ms - wall_ms
                if not 0 < lease <= 24 * 3600 * 1000:
                    lease = default
                interval = max(lease / 3000, _AUTO_HEARTBEAT_TICK)
                due[key] = (now + interval, interval)
            elif now >= entry[0] and w._call is not None and not ctx.cancelled:
                due[key] = (now + entry[1], entry[1])
                fut = w._hb.request(ctx)
                fut.add_done_callback(_ignore_result)
                w.stats["auto_heartbeats"] += 1
                sent = True
        for key in [k for k in due if k not in running]:
            del due[key]
        if sent:
            w._flush_heartbeats()
