"""A scripted in-process gRPC peer speaking pgferry.v1, for unit tests of the SDK's own
protocol handling (ack matching, credits, drain, resend after reconnect, batching). It
stores nothing: the integration tests run against the real server.

`batch = 0` plays a server from before batching (single Job/ResultAck messages only);
`batch = n` grants batches of up to n to workers that ask, packing whatever jobs are queued
(within credits) into one JobBatch and answering each ResultBatch with one ResultAckBatch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from pgferry.v1 import common_pb2, producer_pb2, worker_pb2


class FakeServer:
    def __init__(self) -> None:
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.producer_requests: list[producer_pb2.ProducerRequest] = []
        self.worker_requests: list[worker_pb2.WorkerRequest] = []
        self.worker_streams = 0
        # Jobs the fake hands to workers, one per credit.
        self.jobs: asyncio.Queue[worker_pb2.Job] = asyncio.Queue()
        self.reversed_acks = False
        self.reject_field = ""
        self.max_outstanding = 0
        self.push: asyncio.Queue[worker_pb2.WorkerResponse] = asyncio.Queue()
        self.drop_worker_after_results = -1
        # Seconds before each message goes out: plays a loaded server, so the stream's own
        # tasks (feed, read) run between its sends.
        self.send_delay = 0.0
        self.batch = 0
        self.hellos: list[worker_pb2.WorkerHello] = []
        self.job_batch_sizes: list[int] = []
        # Protocol breaches by the worker (e.g. a ResultBatch that was not negotiated).
        self.violations: list[str] = []

    def results(self) -> list[worker_pb2.JobResult]:
        """Every result the workers sent, single or batched, in order."""
        out: list[worker_pb2.JobResult] = []
        for r in self.worker_requests:
            which = r.WhichOneof("msg")
            if which == "result":
                out.append(r.result)
            elif which == "results":
                out.extend(r.results.results)
        return out

    def credits(self) -> int:
        """Credits granted, as Credit messages or piggybacked on result batches."""
        return sum(r.credit.n + r.results.credit for r in self.worker_requests)

    def count(self, which: str) -> int:
        return sum(1 for r in self.worker_requests if r.WhichOneof("msg") == which)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.server = grpc.aio.server()
        handlers = {
            "Stream": grpc.stream_stream_rpc_method_handler(
                self._producer,
                request_deserializer=producer_pb2.ProducerRequest.FromString,
                response_serializer=producer_pb2.ProducerResponse.SerializeToString,
            )
        }
        whandlers = {
            "Stream": grpc.stream_stream_rpc_method_handler(
                self._worker,
                request_deserializer=worker_pb2.WorkerRequest.FromString,
                response_serializer=worker_pb2.WorkerResponse.SerializeToString,
            )
        }
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler("pgferry.v1.Producer", handlers),
                grpc.method_handlers_generic_handler("pgferry.v1.Worker", whandlers),
            )
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)

    async def _producer(self, it: AsyncIterator[producer_pb2.ProducerRequest], ctx: Any) -> AsyncIterator[producer_pb2.ProducerResponse]:
        first = await it.__anext__()
        assert first.WhichOneof("msg") == "hello"
        if first.hello.api_key != "good":
            await ctx.abort(grpc.StatusCode.UNAUTHENTICATED, "bad key")
        yield producer_pb2.ProducerResponse(hello_ack=producer_pb2.HelloAck(tenant="t", max_batch=1000, max_payload_bytes=1 << 20))
        held: list[producer_pb2.EnqueueAck] = []
        async for req in it:
            self.producer_requests.append(req)
            which = req.WhichOneof("msg")
            seq = req.enqueue.seq if which == "enqueue" else req.batch.seq
            n = 1 if which == "enqueue" else len(req.batch.jobs)
            if self.reject_field:
                ack = producer_pb2.EnqueueAck(seq=seq, error=common_pb2.Error(code="invalid_argument", message="bad", field=self.reject_field))
            else:
                ack = producer_pb2.EnqueueAck(seq=seq, job_ids=[seq * 1000 + i for i in range(n)], duplicates=[False] * n)
            if self.reversed_acks:
                held.append(ack)
                if len(held) == 10:
                    for a in reversed(held):
                        yield producer_pb2.ProducerResponse(ack=a)
                    held = []
            else:
                yield producer_pb2.ProducerResponse(ack=ack)

    async def _worker(self, it: AsyncIterator[worker_pb2.WorkerRequest], ctx: Any) -> AsyncIterator[worker_pb2.WorkerResponse]:
        self.worker_streams += 1
        first = await it.__anext__()
        assert first.WhichOneof("msg") == "hello"
        self.hellos.append(first.hello)
        batch = min(self.batch, first.hello.max_batch)
        yield worker_pb2.WorkerResponse(hello_ack=worker_pb2.WorkerHelloAck(tenant="t", default_lease_ms=30_000, max_batch=batch))
        out: asyncio.Queue[worker_pb2.WorkerResponse | None] = asyncio.Queue()
        # closing: the end-of-stream marker is queued in `out`; anything queued behind it is
        # never sent, so feed must take no more jobs from the shared queue.
        state: dict[str, int] = {"credits": 0, "outstanding": 0, "results": 0, "draining": 0, "dropped": 0, "closing": 0}

        async def feed() -> None:
            while True:
                if state["credits"] > 0 and not state["draining"] and not state["closing"]:
                    jobs = [await self.jobs.get()]
                    # Whatever else is queued right now, within credits and the batch size.
                    while batch and len(jobs) < min(batch, state["credits"]) and not self.jobs.empty():
                        jobs.append(self.jobs.get_nowait())
                    state["credits"] -= len(jobs)
                    state["outstanding"] += len(jobs)
                    self.max_outstanding = max(self.max_outstanding, state["outstanding"])
                    if batch:
                        self.job_batch_sizes.append(len(jobs))
                        await out.put(worker_pb2.WorkerResponse(jobs=worker_pb2.JobBatch(jobs=jobs)))
                    else:
                        await out.put(worker_pb2.WorkerResponse(job=jobs[0]))
                else:
                    await asyncio.sleep(0.005)

        async def pushes() -> None:
            while True:
                await out.put(await self.push.get())

        async def read() -> None:
            async for req in it:
                self.worker_requests.append(req)
                which = req.WhichOneof("msg")
                if which == "credit":
                    state["credits"] += req.credit.n
                elif which in ("result", "results"):
                    if which == "result":
                        results = [req.result]
                        await out.put(worker_pb2.WorkerResponse(result_ack=worker_pb2.ResultAck(ref=req.result.ref)))
                    else:
                        if not batch or len(req.results.results) > batch:
                            self.violations.append(f"ResultBatch of {len(req.results.results)} (granted {batch})")
                        results = list(req.results.results)
                        state["credits"] += req.results.credit
                        acks = [worker_pb2.ResultAck(ref=r.ref) for r in results]
                        await out.put(worker_pb2.WorkerResponse(result_acks=worker_pb2.ResultAckBatch(acks=acks)))
                    state["outstanding"] -= len(results)
                    state["results"] += len(results)
                    if 0 <= self.drop_worker_after_results <= state["results"]:
                        self.drop_worker_after_results = -1
                        state["dropped"] = state["closing"] = 1
                        await out.put(None)
                        return
                elif which == "heartbeat":
                    lost = [r for r in req.heartbeat.refs if r.id < 0]
                    await out.put(worker_pb2.WorkerResponse(heartbeat_ack=worker_pb2.HeartbeatAck(lease_until_unix_ms=1, lost=lost)))
                elif which == "drain":
                    state["draining"] = 1
                    state["outstanding"] -= len(req.drain.release)
                    await out.put(worker_pb2.WorkerResponse(drained=worker_pb2.Drained()))
            state["closing"] = 1
            await out.put(None)

        tasks = [asyncio.create_task(f()) for f in (feed, pushes, read)]
        try:
            while (msg := await out.get()) is not None:
                if self.send_delay:
                    await asyncio.sleep(self.send_delay)
                yield msg
        finally:
            for t in tasks:
                t.cancel()
            # Jobs taken for this stream but never sent (it ended first) go back, as a real
            # server's lease expiry would hand them out again.
            while not out.empty():
                if (m := out.get_nowait()) is not None:
                    for j in [m.job] if m.HasField("job") else m.jobs.jobs:
                        self.jobs.put_nowait(j)
        if state.get("dropped"):
            await ctx.abort(grpc.StatusCode.UNAVAILABLE, "fake restart")


def job(i: int, kind: str = "k", args: str = "{}") -> worker_pb2.Job:
    return worker_pb2.Job(ref=common_pb2.AttemptRef(id=i, attempt=1, token=f"t{i}"), queue="q", kind=kind, args=args, max_attempts=3)
