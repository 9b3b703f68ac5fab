"""The SDK's side of the protocol against a scripted peer (tests/fake_server.py): ack
matching by seq, typed ack errors, credits as free slots, drain, reconnect, cancel and
heartbeat plumbing, each against a server granting batches (BATCHED) and one from before
batching (SINGLE). The server's side is covered by the integration tests."""

from __future__ import annotations

import asyncio
import json

import pytest

import pgferry
from fake_server import FakeServer, job
from pgferry.v1 import common_pb2, worker_pb2


# The fake server's batch grant: 0 plays a server without batches.
SINGLE, BATCHED = 0, 64
both_modes = pytest.mark.parametrize("batch", [SINGLE, BATCHED], ids=["single", "batched"])


def _run(coro_fn, batch: int = SINGLE):  # type: ignore[no-untyped-def]
    async def main() -> None:
        fake = FakeServer()
        fake.batch = batch
        await fake.start()
        try:
            await asyncio.wait_for(coro_fn(fake), 60)
        finally:
            await fake.stop()

    asyncio.run(main())


def test_out_of_order_acks_are_matched_by_seq() -> None:
    async def body(fake: FakeServer) -> None:
        fake.reversed_acks = True
        async with pgferry.Client(fake.url, "good") as client:
            got = await asyncio.gather(*(client.enqueue("k", {"i": i}) for i in range(30)))
        seq_of = {json.loads(r.enqueue.job.args)["i"]: r.enqueue.seq for r in fake.producer_requests}
        assert [g.id for g in got] == [seq_of[i] * 1000 for i in range(30)]

    _run(body)


def test_error_ack_raises_typed_error_and_stream_survives() -> None:
    async def body(fake: FakeServer) -> None:
        async with pgferry.Client(fake.url, "good") as client:
            fake.reject_field = "jobs[1].queue"
            with pytest.raises(pgferry.InvalidArgument) as e:
                await client.enqueue_many([("a", 1), ("b", 2)])
            assert e.value.field == "jobs[1].queue"
            fake.reject_field = ""
            assert (await client.enqueue("k")).id > 0

    _run(body)


def test_bad_key_on_hello_is_auth_error() -> None:
    async def body(fake: FakeServer) -> None:
        async with pgferry.Client(fake.url, "bad") as client:
            with pytest.raises(pgferry.AuthError):
                await client.enqueue("k")

    _run(body)


@both_modes
def test_credits_never_exceed_concurrency_and_every_job_gets_a_result(batch: int) -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=5, handle_signals=False)
        seen: list[int] = []

        @app.job("k")
        async def k(ctx: pgferry.JobContext, n: int) -> int:
            await asyncio.sleep(0.005)
            seen.append(ctx.id)
            return n * 2

        for i in range(1, 61):
            fake.jobs.put_nowait(job(i, args=json.dumps({"n": i})))
        task = asyncio.create_task(app.run_async())
        while len(seen) < 60:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        results = fake.results()
        assert sorted(r.ref.id for r in results) == list(range(1, 61))
        assert all(json.loads(r.ok.result) == r.ref.id * 2 for r in results)
        assert fake.max_outstanding <= 5
        assert fake.credits() <= 5 + 60
        assert app.stats["acked"] == 60
        assert fake.hellos[0].max_batch > 0, "the worker asks for batches"
        assert fake.violations == []
        # Batched: results only in ResultBatch; single: never a ResultBatch.
        assert fake.count("result" if batch else "results") == 0

    _run(body, batch)


def test_batched_results_are_coalesced_with_their_credits() -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=50, handle_signals=False)

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            return None

        for i in range(1, 501):
            fake.jobs.put_nowait(job(i))
        task = asyncio.create_task(app.run_async())
        while app.stats["acked"] < 500:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        assert sorted(r.ref.id for r in fake.results()) == list(range(1, 501))
        assert fake.violations == [] and max(fake.job_batch_sizes) <= BATCHED
        # The first grant is a Credit; every later one rides on a ResultBatch.
        assert fake.count("credit") == 1 and fake.count("result") == 0
        assert fake.max_outstanding <= 50 and fake.credits() <= 50 + 500
        # Handlers finishing in the same event-loop turn share one ResultBatch: a no-op
        # handler's jobs of one JobBatch all finish in one turn.
        assert fake.count("results") <= len(fake.job_batch_sizes) < 500

    _run(body, BATCHED)


def test_result_batches_stay_within_the_granted_size() -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=10, handle_signals=False)

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            return None

        for i in range(1, 101):
            fake.jobs.put_nowait(job(i))
        task = asyncio.create_task(app.run_async())
        while app.stats["acked"] < 100:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        sizes = [len(r.results.results) for r in fake.worker_requests if r.WhichOneof("msg") == "results"]
        assert sum(sizes) == 100 and max(sizes) <= 4 and fake.violations == []

    _run(body, 4)


@both_modes
def test_outcomes_map_to_results(batch: int) -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=4, handle_signals=False)

        @app.job("k")
        async def k(ctx: pgferry.JobContext, what: str) -> None:
            if what == "snooze":
                raise pgferry.Snooze(1.5)
            if what == "cancel":
                raise pgferry.Cancel("nope")
            if what == "fail":
                raise pgferry.Fail("bad input", permanent=True)
            raise KeyError("boom")

        @app.job("sync")
        def sync(ctx: pgferry.JobContext) -> pgferry.Fail:
            return pgferry.Fail("later", retry_in=2)

        for i, what in enumerate(["snooze", "cancel", "fail", "raise"], start=1):
            fake.jobs.put_nowait(job(i, args=json.dumps({"what": what})))
        fake.jobs.put_nowait(job(5, kind="sync"))
        fake.jobs.put_nowait(job(6, kind="unknown"))
        task = asyncio.create_task(app.run_async())
        while len(fake.results()) < 6:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        by_id = {r.ref.id: r for r in fake.results()}
        assert by_id[1].snooze.delay_ms == 1500
        assert by_id[2].cancelled.message == "nope"
        assert (by_id[3].error.message, by_id[3].error.retryable) == ("bad input", False)
        assert by_id[4].error.retryable and by_id[4].error.kind == "KeyError" and "boom" in by_id[4].error.message
        assert by_id[5].error.retry_delay_ms == 2000 and by_id[5].error.retryable
        assert by_id[6].error.kind == "UnknownKind"
        assert by_id[4].ref.token == "t4"

    _run(body, batch)


@both_modes
def test_drain_hands_back_jobs_that_arrive_after_stop(batch: int) -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=3, handle_signals=False, grace_period=30)
        release = asyncio.Event()
        started: list[int] = []

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            started.append(ctx.id)
            await release.wait()

        fake.jobs.put_nowait(job(1))
        task = asyncio.create_task(app.run_async())
        while not started:
            await asyncio.sleep(0.01)
        app.stop()
        # A job that was already on the wire when the worker began draining.
        await fake.push.put(worker_pb2.WorkerResponse(job=job(2)))
        while not any(r.WhichOneof("msg") == "drain" and r.drain.release for r in fake.worker_requests):
            await asyncio.sleep(0.01)
        assert not task.done(), "the worker quit with a job still running"
        release.set()
        await task
        drained = [x.id for r in fake.worker_requests if r.WhichOneof("msg") == "drain" for x in r.drain.release]
        assert drained == [2] and started == [1]
        assert [r.ref.id for r in fake.results()] == [1]

    _run(body, batch)


@both_modes
@pytest.mark.parametrize("send_delay", [0.0, 0.02], ids=["fast", "slow"])
def test_worker_reconnects_and_keeps_going(batch: int, send_delay: float) -> None:
    async def body(fake: FakeServer) -> None:
        fake.drop_worker_after_results = 3
        # slow: the fake's feed runs between the drop decision and the stream's end (what
        # a loaded machine did by chance); the jobs it took then must not vanish.
        fake.send_delay = send_delay
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=2, handle_signals=False, reconnect_cap=0.2)
        done: set[int] = set()

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            done.add(ctx.id)

        for i in range(1, 11):
            fake.jobs.put_nowait(job(i))
        task = asyncio.create_task(app.run_async())
        while len(done) < 10 or app.stats["acked"] < 10:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        assert fake.worker_streams == 2 and app.stats["reconnects"] == 1
        assert {r.ref.id for r in fake.results()} == set(range(1, 11))

    _run(body, batch)


@both_modes
def test_cancel_sets_the_flag_and_lost_heartbeat_reports_false(batch: int) -> None:
    async def body(fake: FakeServer) -> None:
        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=2, handle_signals=False)
        seen: dict[int, object] = {}

        @app.job("k")
        async def k(ctx: pgferry.JobContext) -> None:
            seen[ctx.id] = await ctx.heartbeat()
            if ctx.id > 0:
                await asyncio.wait_for(ctx.cancel_event.wait(), 30)
                ctx.raise_if_cancelled()

        fake.jobs.put_nowait(job(-7))
        fake.jobs.put_nowait(job(7))
        task = asyncio.create_task(app.run_async())
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        await fake.push.put(worker_pb2.WorkerResponse(cancel=worker_pb2.Cancel(ref=common_pb2.AttemptRef(id=7, attempt=1))))
        while app.stats["cancelled"] < 1:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        assert seen == {-7: False, 7: True}
        res = [r for r in fake.results() if r.ref.id == 7]
        assert res[0].WhichOneof("outcome") == "cancelled"

    _run(body, batch)


def test_sync_handler_heartbeats_and_sees_cancel_from_its_thread() -> None:
    async def body(fake: FakeServer) -> None:
        import threading
        import time

        app = pgferry.Worker(fake.url, "good", queues=["q"], concurrency=2, handle_signals=False)
        seen: dict[str, object] = {}
        started = threading.Event()

        @app.job("k")
        def k(ctx: pgferry.JobContext) -> None:
            seen["beat"] = ctx.heartbeat_sync(timeout=10)
            seen["thread"] = threading.current_thread().name
            started.set()
            deadline = time.monotonic() + 30
            while not ctx.cancelled and time.monotonic() < deadline:
                time.sleep(0.01)
            ctx.raise_if_cancelled()

        fake.jobs.put_nowait(job(9))
        task = asyncio.create_task(app.run_async())
        while not started.is_set():
            await asyncio.sleep(0.01)
        await fake.push.put(worker_pb2.WorkerResponse(cancel=worker_pb2.Cancel(ref=common_pb2.AttemptRef(id=9, attempt=1))))
        while app.stats["cancelled"] < 1:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        assert seen["beat"] is True and str(seen["thread"]).startswith("pgferry-job")

    _run(body)
