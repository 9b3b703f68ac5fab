"""The jobs of one JobBatch share a runner task until one suspends (pgferry/_steps.py).
What a handler could tell apart from a task of its own must not change: jobs after a
suspended one still start, a suspended job keeps one task for its whole life, contextvars
do not leak between jobs, and a hard cancel reaches only its job."""

from __future__ import annotations

import asyncio
import contextvars

import pgferry
from fake_server import FakeServer, job
from pgferry.v1 import common_pb2, worker_pb2
from test_protocol import BATCHED, _run

_var: contextvars.ContextVar[int | None] = contextvars.ContextVar("pgferry_test_var", default=None)


def test_jobs_after_a_suspended_one_start_each_in_its_own_task_and_context() -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=10, handle_signals=False)
        gate = asyncio.Event()
        tasks: dict[int, asyncio.Task[object] | None] = {}
        leaked: list[int] = []

        @app.job("k")
        async def k(ctx: pgferry.JobContext, role: str) -> None:
            if _var.get() is not None:
                leaked.append(ctx.id)
            _var.set(ctx.id)
            if role == "wait":
                before = asyncio.current_task()
                await gate.wait()
                await asyncio.sleep(0)
                if asyncio.current_task() is not before or _var.get() != ctx.id:
                    raise AssertionError("task or context changed across an await")
                tasks[ctx.id] = before
            elif role == "open":
                # Runs only if jobs after the suspended ones were started meanwhile.
                gate.set()

        roles = ["wait", "noop", "wait", "noop", "open", "noop"]
        for i, role in enumerate(roles, start=1):
            fake.jobs.put_nowait(job(i, args=f'{{"role": "{role}"}}'))
        task = asyncio.create_task(app.run_async())
        while app.stats["acked"] < len(roles):
            await asyncio.sleep(0.01)
        app.stop()
        await task
        assert fake.job_batch_sizes[0] == len(roles), "the jobs came in one JobBatch"
        outcomes = {r.ref.id: r.WhichOneof("outcome") for r in fake.results()}
        assert outcomes == {i: "ok" for i in range(1, 7)}
        assert leaked == []
        assert tasks[1] is not None and tasks[3] is not None and tasks[1] is not tasks[3]

    _run(body, BATCHED)


def test_hard_cancel_reaches_only_its_job_in_a_shared_batch() -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(
            fake.url, "good", queues=["q"], concurrency=10, handle_signals=False, hard_cancel=True
        )
        release = asyncio.Event()
        started: set[int] = set()

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            started.add(ctx.id)
            await release.wait()

        for i in (1, 2, 3):
            fake.jobs.put_nowait(job(i))
        task = asyncio.create_task(app.run_async())
        while len(started) < 3:
            await asyncio.sleep(0.01)
        cancel = worker_pb2.Cancel(ref=common_pb2.AttemptRef(id=2, attempt=1))
        await fake.push.put(worker_pb2.WorkerResponse(cancel=cancel))
        while app.stats["cancelled"] < 1:
            await asyncio.sleep(0.01)
        assert app.in_flight == 2
        release.set()
        while app.stats["acked"] < 3:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        by_id = {r.ref.id: r for r in fake.results()}
        assert by_id[2].cancelled.message == "cancelled by the server"
        assert by_id[1].WhichOneof("outcome") == by_id[3].WhichOneof("outcome") == "ok"

    _run(body, BATCHED)


def test_hard_cancel_before_the_job_started_reports_it_cancelled() -> None:
    # Drives the worker's message handlers directly: the Cancel is handled in the same
    # event-loop turn as the JobBatch, before the runner task took its first step.
    async def main() -> None:
        app = pgferry.Worker("http://127.0.0.1:1", "k", queues=["q"], hard_cancel=True, handle_signals=False)
        ran: list[int] = []

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            ran.append(ctx.id)

        app._on_jobs([job(1), job(2)])
        app._on_cancel(common_pb2.AttemptRef(id=1, attempt=1))
        for _ in range(3):
            await asyncio.sleep(0)
        assert ran == [2] and app.in_flight == 0
        outcomes = {r[0][0]: (r[2], r[3].message if r[2] == "cancelled" else "") for r in app._results}
        assert outcomes == {1: ("cancelled", "cancelled by the server"), 2: ("ok", "")}

    asyncio.run(main())
