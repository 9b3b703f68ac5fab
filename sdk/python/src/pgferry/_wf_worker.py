"""The workflow worker: one WorkflowWorker stream (proto/pgferry/v1/workflow.proto) that
runs steps of workflow instances, as the job Worker runs jobs.

Credits are free slots: the server never has more steps outstanding than granted. Each step
runs as an asyncio task; its outcome joins the next StepOutcomeBatch (with the freed slot's
credit), acks come back after COMMIT. A lost stream reconnects with backoff and sends the
outcomes not yet acked again (the server answers a repeat `stale`). Heartbeats extend the
lease of every step still running at a third of the lease, so a long step is not claimed
again while it runs. A StepCancel (the instance was cancelled) cancels the step's task. An
outcome the server could not record because its database was unavailable (a StepAck with
code `unavailable`) stays unacked and is sent again after a pause (100 ms doubling to 5 s,
reset by a clean ack)."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from pgferry import _conn
from pgferry._journal import ChildSpec
from pgferry._resend import Resends
from pgferry.errors import AuthError, InvalidArgument, NotFound, PgferryError, ProtocolError, Unavailable, from_rpc_error
from pgferry.v1 import workflow_pb2

log = logging.getLogger("pgferry.workflow_worker")

_STREAM = "/pgferry.v1.WorkflowWorker/Stream"
_FATAL = (AuthError, InvalidArgument, NotFound)
# Most steps per StepBatch and outcomes per StepOutcomeBatch asked for: a bigger batch is
# fewer messages and claim statements per step (`python -m pgferry.bench --workflows 5000`,
# 200 slots, release server, busy machine: 4,773 machine steps/s with 64, 7,685 with 256).
_MAX_BATCH = 256


@dataclass
class ClaimedStep:
    """A claimed step of an instance, as a step handler gets it."""

    id: int
    seq: int
    queue: str
    kind: str
    step: str
    state: Any
    input: Any
    attempt: int
    max_attempts: int
    # "signal", "timeout", "children" or "" (a plain step).
    wake: str
    parent_id: int | None
    # Kinds declared with inbox / children: the signals consumed, the children's ends.
    inbox: list[dict[str, Any]] | None
    children: list[dict[str, Any]] | None

    @property
    def timed_out(self) -> bool:
        return self.wake == "timeout"


StepFn = Callable[[ClaimedStep], Awaitable[dict[str, Any]]]
"""Runs one claimed step, returns the outcome's fields (outcome, step, state, ...)."""


@dataclass
class KindEntry:
    run: StepFn
    inbox: bool = False
    children: bool = False


def _loads(text: str) -> Any:
    return json.loads(text) if text else None


def _outcome_pb(ref: workflow_pb2.StepRef, o: dict[str, Any]) -> workflow_pb2.StepOutcome:
    pb = workflow_pb2.StepOutcome(ref=ref, outcome=o["outcome"])
    for f in ("step", "state", "delay_ms", "reason", "timeout_ms", "until_unix_ms", "for_ms", "result", "join", "on_child_failure"):
        v = o.get(f)
        if v is not None:
            setattr(pb, f, v)
    if o.get("signals"):
        pb.signals.extend(o["signals"])
    for c in o.get("children") or ():
        spec = c if isinstance(c, ChildSpec) else ChildSpec(**c)
        cs = pb.children.add(kind=spec.kind, input=json.dumps(spec.input, separators=(",", ":")))
        for f in ("step", "queue", "concurrency_key", "concurrency_limit", "priority", "max_attempts"):
            v = getattr(spec, f)
            if v is not None:
                setattr(cs, f, v)
    return pb


class WorkflowWorker:
    """Runs steps of the registered kinds from `queues` (usually made by pgferry.App)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        queues: Sequence[str],
        kinds: dict[str, KindEntry],
        concurrency: int = 10,
        lease_ms: int = 60_000,
        worker_id: str | None = None,
        reconnect_cap: float = 10.0,
        grace_period: float = 30.0,
    ) -> None:
        if not queues:
            raise ValueError("WorkflowWorker needs at least one queue")
        self.url = url
        self._api_key = api_key
        self.queues = list(queues)
        self.kinds = kinds
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.grace_period = grace_period
        self.worker_id = worker_id or f"py-wf-{socket.gethostname()}-{os.getpid()}"
        self._backoff = _conn.Backoff(base=0.1, cap=reconnect_cap)
        self.stats: collections.Counter[str] = collections.Counter()
        # Steps running: (id, seq) -> (ref, task). By claim, not by instance: a claim whose
        # lease lapsed may still run here while the instance's next claim arrives.
        self._running: dict[tuple[int, int], tuple[workflow_pb2.StepRef, asyncio.Task[None]]] = {}
        self._outcomes: list[workflow_pb2.StepOutcome] = []
        self._unacked: dict[tuple[int, int], workflow_pb2.StepOutcome] = {}
        # Outcomes the server refused as unavailable (not recorded, its database was down):
        # they stay in _unacked (a new stream resends them anyway) and go out again when
        # the resend timer fires. Without this an outcome lost to a database blip left its
        # step claimed until the lease ran out, then the step ran again.
        self._resends: Resends[tuple[int, int]] = Resends(self._resend_refused)
        self._credits = 0
        self._batch = 64
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()
        self._call: Any = None
        # StepDrain sent on this stream / StepDrained received for it.
        self._drain_sent = False
        self._drained = False

    async def wait_ready(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._ready.wait(), timeout)

    def stop(self) -> None:
        """Drain: no new steps; running ones finish (within grace_period) and are acked."""
        self._stopping.set()
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._running)

    async def run_async(self) -> None:
        channel = _conn.open_channel(self.url)
        try:
            await self._serve(channel)
        finally:
            self._resends.cancel()
            for _, task in list(self._running.values()):
                task.cancel()
            await channel.close(grace=None)

    def _finished(self) -> bool:
        """Drained: the server sends nothing more, nothing runs, every outcome is acked."""
        return self._drained and not self._running and not self._outcomes and not self._unacked

    async def _serve(self, channel: grpc.aio.Channel) -> None:
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            session = asyncio.create_task(self._session(channel))
            stop = asyncio.create_task(self._stopping.wait())
            err: BaseException | None = None
            try:
                await asyncio.wait({session, stop}, return_when=asyncio.FIRST_COMPLETED)
                if stop.done() and not session.done():
                    deadline = loop.time() + self.grace_period
                    while not self._finished() and loop.time() < deadline and not session.done():
                        await asyncio.sleep(0.02)
                    call = self._call
                    if call is not None:
                        call.cancel()
                    session.cancel()
                    await asyncio.gather(session, return_exceptions=True)
                    return
                session.result()
            except _FATAL:
                raise
            except (PgferryError, OSError) as e:
                err = e
            finally:
                stop.cancel()
                self._call = None
            if self._stopping.is_set():
                return
            delay = self._backoff.next_delay()
            self.stats["reconnects"] += 1
            log.warning("pgferry workflow worker: stream ended (%s); reconnecting in %.2fs", err, delay)
            await asyncio.sleep(delay)

    async def _session(self, channel: grpc.aio.Channel) -> None:
        method = channel.stream_stream(
            _STREAM,
            request_serializer=workflow_pb2.WorkflowWorkerRequest.SerializeToString,
            response_deserializer=workflow_pb2.WorkflowWorkerResponse.FromString,
        )
        call: Any = method(metadata=_conn.auth_metadata(self._api_key))
        hello = workflow_pb2.WorkflowHello(
            api_key=self._api_key,
            worker_id=self.worker_id,
            queues=self.queues,
            lease_ms=self.lease_ms,
            max_batch=_MAX_BATCH,
            kinds=[workflow_pb2.KindCaps(kind=k, inbox=e.inbox, children=e.children) for k, e in self.kinds.items()],
        )
        try:
            await call.write(workflow_pb2.WorkflowWorkerRequest(hello=hello))
            first = await call.read()
        except grpc.RpcError as e:
            call.cancel()
            raise from_rpc_error(e) from None
        if first is grpc.aio.EOF or first.WhichOneof("msg") != "hello_ack":
            call.cancel()
            raise ProtocolError("workflow worker stream: expected hello_ack")
        self.lease_ms = int(first.hello_ack.lease_ms) or self.lease_ms
        # Outcomes per StepOutcomeBatch: what the server granted (at most what we asked).
        self._batch = min(int(first.hello_ack.max_batch) or 64, _MAX_BATCH)
        self._call = call
        self._backoff.reset()
        # Outcomes sent on a lost stream may not be recorded: send them again. Refused
        # outcomes are among the unacked ones: no separate resend of them.
        self._outcomes = list(self._unacked.values()) + self._outcomes
        self._unacked.clear()
        self._resends.cancel()
        self._drain_sent = self._drained = False
        self._credits = 0 if self._stopping.is_set() else self.concurrency - len(self._running)
        writer = asyncio.create_task(self._write_loop(call))
        beats = asyncio.create_task(self._heartbeats(call))
        self._wake.set()
        self._ready.set()
        try:
            await self._read_loop(call)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            writer.cancel()
            beats.cancel()
            await asyncio.gather(writer, beats, return_exceptions=True)

    async def _read_loop(self, call: Any) -> None:
        while True:
            resp = await call.read()
            if resp is grpc.aio.EOF:
                raise Unavailable("workflow worker stream closed by the server")
            which = resp.WhichOneof("msg")
            if which == "steps":
                for s in resp.steps.steps:
                    self._start(s)
            elif which == "acks":
                self._on_acks(resp.acks.acks)
            elif which == "drained":
                self._drained = True
            elif which == "cancel":
                entry = self._running.get((resp.cancel.ref.id, resp.cancel.ref.seq))
                if entry is not None:
                    entry[1].cancel()
            elif which == "heartbeat_ack":
                for b in resp.heartbeat_ack.beats:
                    entry = self._running.get((b.ref.id, b.ref.seq))
                    if entry is not None and not b.held:
                        entry[1].cancel()  # answered, cancelled or claimed again: stop

    def _on_acks(self, acks: Iterable[workflow_pb2.StepAck]) -> None:
        for a in acks:
            key = (a.ref.id, a.ref.seq)
            code = a.error.code if a.HasField("error") else ""
            if code == "unavailable":
                # Not recorded, and nothing else recorded either: send it again shortly.
                if key in self._unacked:
                    self._refuse(key, a.error.message)
                continue
            self._unacked.pop(key, None)
            self.stats["acked"] += 1
            if code:
                self.stats["outcome_errors"] += 1
                log.warning("pgferry workflow worker: outcome for %d refused: %s %s", a.ref.id, a.error.code, a.error.message)
                continue
            self._resends.recorded()
            if a.result == workflow_pb2.STEP_STALE:
                self.stats["stale"] += 1
            elif a.result == workflow_pb2.STEP_CANCELLED:
                self.stats["cancelled"] += 1

    def _refuse(self, key: tuple[int, int], message: str) -> None:
        """The server could not record this outcome for now (its database is unavailable):
        keep it unacked and send it again after a pause that doubles per resend while the
        outage lasts (a clean ack resets it)."""
        self.stats["outcomes_resent"] += 1
        # Debug, not warning: an outage refuses every outcome, repeatedly.
        log.debug("pgferry workflow worker: outcome for %d not recorded yet (%s); resending", key[0], message)
        self._resends.refuse(key)

    def _resend_refused(self, keys: set[tuple[int, int]]) -> None:
        """Hands the refused outcomes (those still unacked) to the writer again, which
        batches them with the owed credits as every outcome. Out of _unacked until written,
        so a reconnect in between sends each of them once."""
        for key in keys:
            o = self._unacked.pop(key, None)
            if o is not None:
                self._outcomes.append(o)
        if self._outcomes:
            self._wake.set()

    async def _write_loop(self, call: Any) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set() and not self._drain_sent:
                # No more steps: the server answers StepDrained once no claim is under way.
                self._drain_sent = True
                await call.write(workflow_pb2.WorkflowWorkerRequest(drain=workflow_pb2.StepDrain()))
            outcomes, self._outcomes = self._outcomes, []
            credit = 0 if self._stopping.is_set() else self._credits
            self._credits -= credit
            for i in range(0, max(len(outcomes), 1), self._batch):
                chunk = outcomes[i : i + self._batch]
                if not chunk and not credit:
                    break
                for o in chunk:
                    self._unacked[(o.ref.id, o.ref.seq)] = o
                req = workflow_pb2.WorkflowWorkerRequest()
                req.outcomes.outcomes.extend(chunk)
                req.outcomes.credit = credit
                credit = 0
                await call.write(req)

    async def _heartbeats(self, call: Any) -> None:
        while True:
            await asyncio.sleep(max(0.05, self.lease_ms / 3000))
            refs = [ref for ref, _ in self._running.values()]
            if refs:
                await call.write(workflow_pb2.WorkflowWorkerRequest(heartbeat=workflow_pb2.StepHeartbeat(refs=refs)))

    def _start(self, pb: workflow_pb2.ClaimedStep) -> None:
        self.stats["received"] += 1
        step = ClaimedStep(
            id=pb.ref.id,
            seq=pb.ref.seq,
            queue=pb.queue,
            kind=pb.kind,
            step=pb.step,
            state=_loads(pb.state),
            input=_loads(pb.input),
            attempt=pb.attempt,
            max_attempts=pb.max_attempts,
            wake=pb.wake,
            parent_id=pb.parent_id if pb.HasField("parent_id") else None,
            inbox=_loads(pb.inbox),
            children=_loads(pb.children),
        )
        ref = workflow_pb2.StepRef()
        ref.CopyFrom(pb.ref)
        task = asyncio.get_running_loop().create_task(self._run(ref, step))
        self._running[(step.id, step.seq)] = (ref, task)

    async def _run(self, ref: workflow_pb2.StepRef, step: ClaimedStep) -> None:
        try:
            entry = self.kinds.get(step.kind)
            if entry is None:
                outcome: dict[str, Any] = {"outcome": "fail", "reason": f"no workflow registered for kind {step.kind!r}"}
            else:
                outcome = await entry.run(step)
            pb = _outcome_pb(ref, outcome)
            self.stats[outcome["outcome"]] += 1
        except asyncio.CancelledError:
            # Cancelled by the server (StepCancel, or a heartbeat saying the claim is gone)
            # or at shutdown: no outcome; the server already knows, or the lease hands it back.
            self._running.pop((step.id, step.seq), None)
            self._credits += 1
            self._wake.set()
            return
        except Exception as e:  # noqa: BLE001 - a handler bug: the engine retries the step
            log.warning("pgferry workflow worker: step %s/%s of %d raised", step.kind, step.step, step.id, exc_info=True)
            pb = _outcome_pb(ref, {"outcome": "retry", "delay_ms": 1000, "reason": f"{type(e).__name__}: {e}"[:1000]})
            self.stats["retry"] += 1
        self._running.pop((step.id, step.seq), None)
        self._outcomes.append(pb)
        self._credits += 1
        self._wake.set()


async def serve_with_companion(worker: Any, channel: grpc.aio.Channel) -> None:
    """A job Worker's run with its companion WorkflowWorker (an App with workflows): both
    streams together, stopped and drained together; a worker with workflows alone serves
    no job stream."""
    companion: WorkflowWorker = worker._companion
    if not worker._handlers:
        worker._ready.set()
        await companion.run_async()
        return
    wf = asyncio.create_task(companion.run_async())
    # A workflow stream that fails for good (a bad key, a bad hello) stops the job stream
    # too, and its error is raised below: a worker half running is worse than none.
    wf.add_done_callback(lambda t: worker.stop() if not t.cancelled() and t.exception() is not None else None)
    try:
        await worker._serve(channel)
    finally:
        companion.stop()
        await wf
