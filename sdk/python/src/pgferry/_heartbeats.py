"""The worker's heartbeat bookkeeping (used by worker.py).

At most one Heartbeat message in flight per stream, carrying every ref whose handler
asked since the last one. The server answers each message with one HeartbeatAck but may
answer two messages out of order; with one in flight an ack always belongs to the batch
that was sent."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pgferry._steps import Key
from pgferry.context import JobContext
from pgferry.errors import Unavailable
from pgferry.v1 import common_pb2, worker_pb2


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
