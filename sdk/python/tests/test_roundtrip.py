"""Enqueue and work over the real server: async and sync handlers, batches, meta, results."""

from __future__ import annotations

import asyncio
import threading

import pgferry
from helpers import Recorder, running, wait_state
from server import Server


def test_enqueue_and_work_round_trip(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=8)

        @app.job("add")
        async def add(ctx: pgferry.JobContext, a: int, b: int) -> int:
            await rec.add("ran", ctx, a + b)
            return a + b

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            one = await client.enqueue("add", {"a": 1, "b": 2}, queue=queue)
            assert one.id > 0 and not one.duplicate
            many = await client.enqueue_many(
                [pgferry.JobRequest("add", {"a": i, "b": 100}, queue=queue) for i in range(50)]
            )
            assert len({j.id for j in many}) == 50 and one.id not in {j.id for j in many}
            want = {one.id, *(j.id for j in many)}
            await rec.wait_until(lambda: want <= set(rec.ids("ran")), "all 51 jobs to run")
            sums = {e[1]: e[3] for e in rec.events}
            assert sums[one.id] == 3
            assert sorted(sums[j.id] for j in many) == [i + 100 for i in range(50)]
            # Each job ran exactly once (no duplicate delivery on a healthy run).
            assert len(rec.ids("ran")) == 51
        assert app.stats["completed"] == 51

    asyncio.run(main())


def test_concurrent_enqueues_pipeline_on_one_stream(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            jobs = await asyncio.gather(*(client.enqueue("noop", {"i": i}, queue=queue) for i in range(500)))
            assert len({j.id for j in jobs}) == 500
            # One stream carried them all.
            assert client._stream is not None and client._stream.dead is None

    asyncio.run(main())


def test_sync_handler_runs_in_thread_and_meta_reaches_ctx(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        loop = asyncio.get_running_loop()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=4)
        main_thread = threading.get_ident()

        @app.job("blocking")
        def blocking(ctx: pgferry.JobContext, word: str) -> dict[str, object]:
            other = threading.get_ident() != main_thread
            rec.add_threadsafe(loop, "ran", ctx, (word, other, ctx.meta.get("origin"), ctx.queue, ctx.kind))
            return {"echo": word}

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            job = await client.enqueue("blocking", {"word": "hi"}, queue=queue, meta={"origin": "test"})
            await rec.wait_until(lambda: job.id in rec.ids("ran"), "the sync job")
            assert rec.of("ran", job.id)[0][3] == ("hi", True, "test", queue, "blocking")

    asyncio.run(main())


def test_get_job_reports_completion_and_result(server: Server, queue: str) -> None:
    async def main() -> None:
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("square")
        async def square(ctx: pgferry.JobContext, n: int) -> dict[str, int]:
            return {"n2": n * n}

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            job = await client.enqueue("square", {"n": 7}, queue=queue, max_attempts=3)
            info = await client.get_job(job.id)
            assert (info.id, info.queue, info.kind, info.args) == (job.id, queue, "square", {"n": 7})
            assert info.max_attempts == 3 and info.state in {"pending", "running"}
            async with running(app):
                done = await wait_state(client, job.id, {"completed", "failed", "dead"})
            assert done.state == "completed", done
            assert done.result == {"n2": 49}
            assert [a.outcome for a in done.attempts] == ["completed"]

    asyncio.run(main())


def test_sync_client_from_threads(server: Server, queue: str) -> None:
    with pgferry.SyncClient(server.grpc_url, server.api_key) as client:
        ids: list[int] = []
        lock = threading.Lock()

        def produce(n: int) -> None:
            for i in range(n):
                j = client.enqueue("noop", {"i": i}, queue=queue)
                with lock:
                    ids.append(j.id)

        threads = [threading.Thread(target=produce, args=(25,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(ids)) == 100
        batch = client.enqueue_many([("noop", {"i": i}) for i in range(3)])
        assert len(batch) == 3



def test_list_jobs_pages_through_a_queue(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            ids = {j.id for j in await client.enqueue_many([pgferry.JobRequest("k", {"i": i}, queue=queue) for i in range(5)])}
            seen: list[int] = []
            cursor = ""
            for _ in range(10):
                page, nxt = await client.list_jobs(queue=queue, limit=2, cursor=cursor)
                assert len(page) <= 2
                seen += [j.id for j in page]
                if nxt is None:
                    break
                cursor = nxt
            assert sorted(seen) == sorted(ids)
            pending, _ = await client.list_jobs(queue=queue, state="pending", limit=100)
            assert {j.id for j in pending} == ids

    asyncio.run(main())


def test_ctx_enqueued_at_carries_the_microseconds(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=4)

        @app.job("stamp")
        async def stamp(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx, (ctx.enqueued_at_ms, ctx.enqueued_at_us, ctx.enqueued_at))

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            jobs = [await client.enqueue("stamp", {}, queue=queue) for _ in range(5)]
            await rec.wait_until(lambda: all(j.id in rec.ids("ran") for j in jobs), "the stamped jobs")
            seen = [rec.of("ran", j.id)[0][3] for j in jobs]
        for ms, us, at in seen:
            assert us // 1000 == ms, (ms, us)
            assert int(at.timestamp()) * 1_000_000 + at.microsecond == us, (at, us)
        # Five enqueue times all on a whole millisecond would be a one-in-10^15 chance.
        assert any(us % 1000 for _, us, _ in seen), seen

    asyncio.run(main())
