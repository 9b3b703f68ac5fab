"""Handler outcomes against the real server: retry with backoff, dead letters, snooze,
cancel of a running job, heartbeats and leases, unique jobs."""

from __future__ import annotations

import asyncio

import pgferry
from helpers import WAIT, Recorder, http_patch_queue, poll_until, running, wait_state
from server import Server


def test_raise_retries_then_succeeds(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("flaky")
        async def flaky(ctx: pgferry.JobContext) -> str:
            await rec.add("ran", ctx)
            if ctx.attempt < 3:
                raise RuntimeError(f"boom {ctx.attempt}")
            return "ok"

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            job = await client.enqueue("flaky", None, queue=queue, max_attempts=5)
            await rec.wait_until(lambda: len(rec.of("ran", job.id)) == 3, "three attempts")
            assert [e[2] for e in rec.of("ran", job.id)] == [1, 2, 3]
        assert app.stats["failed"] == 2 and app.stats["completed"] == 1

    asyncio.run(main())


def test_exhausted_attempts_dead_letter_and_retry_dead(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)
        fixed = asyncio.Event()

        @app.job("always_fails")
        async def always_fails(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx)
            if not fixed.is_set():
                raise ValueError("still broken")

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            job = await client.enqueue("always_fails", {}, queue=queue, max_attempts=2)
            info = await wait_state(client, job.id, {"dead"})
            assert len(rec.of("ran", job.id)) == 2
            assert [a.outcome for a in info.attempts][-1] == "dead"
            assert "still broken" in info.attempts[-1].error
            # The class reaches the server (as error_kind, or in front of the text).
            assert "ValueError" in info.attempts[-1].error_kind + info.attempts[-1].error
            dead, _ = await client.list_dead(queue=queue)
            assert job.id in {d.id for d in dead}
            # Operator fixes the bug and retries the dead letter: it runs and completes.
            fixed.set()
            assert await client.retry_dead(queue=queue, ids=[job.id]) == 1
            await wait_state(client, job.id, {"completed"})
            assert len(rec.of("ran", job.id)) == 3

    asyncio.run(main())


def test_permanent_fail_dead_letters_at_once(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("bad_input")
        async def bad_input(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx)
            raise pgferry.Fail("input can never work", permanent=True)

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            job = await client.enqueue("bad_input", {}, queue=queue, max_attempts=10)
            info = await wait_state(client, job.id, {"dead"})
            assert len(rec.of("ran", job.id)) == 1
            assert "input can never work" in info.attempts[-1].error

    asyncio.run(main())


def test_snooze_runs_again_without_using_an_attempt(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("later")
        async def later(ctx: pgferry.JobContext) -> str:
            await rec.add("ran", ctx)
            if len(rec.of("ran", ctx.id)) < 3:
                raise pgferry.Snooze(0.2)
            return "done"

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            # max_attempts=1: if a snooze used up an attempt, the second run would never come.
            job = await client.enqueue("later", {}, queue=queue, max_attempts=1)
            await rec.wait_until(lambda: len(rec.of("ran", job.id)) == 3, "three runs after two snoozes")
            await poll_until(lambda: app.stats["acked"] == 3, "the three results to be acked")
        assert app.stats["snoozed"] == 2 and app.stats["completed"] == 1 and app.stats["stale"] == 0

    asyncio.run(main())


def test_cancel_reaches_running_job(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("long")
        async def long(ctx: pgferry.JobContext) -> None:
            await rec.add("started", ctx)
            await asyncio.wait_for(ctx.cancel_event.wait(), WAIT)
            await rec.add("saw_cancel", ctx)
            raise pgferry.Cancel("stopping as asked")

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            job = await client.enqueue("long", {}, queue=queue)
            await rec.wait_until(lambda: job.id in rec.ids("started"), "the job to start")
            await client.cancel(job.id)
            await rec.wait_until(lambda: job.id in rec.ids("saw_cancel"), "the worker to see the cancel")
            info = await wait_state(client, job.id, {"cancelled"})
            assert len(rec.of("started", job.id)) == 1
            assert info.state == "cancelled"

    asyncio.run(main())


def test_cancel_pending_job_never_runs(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("k")
        async def k(ctx: pgferry.JobContext, n: int) -> None:
            await rec.add("ran", ctx, n)

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            doomed = await client.enqueue("k", {"n": 0}, queue=queue)
            await client.cancel(doomed)
            async with running(app):
                marker = await client.enqueue("k", {"n": 1}, queue=queue)
                await rec.wait_until(lambda: marker.id in rec.ids("ran"), "a later job to run")
                assert doomed.id not in rec.ids("ran")
                assert (await client.get_job(doomed)).state == "cancelled"

    asyncio.run(main())


def test_heartbeat_keeps_a_long_job_past_its_lease(server: Server, queue: str) -> None:
    lease_ms = 1500

    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("slow")
        async def slow(ctx: pgferry.JobContext, beats: int) -> None:
            await rec.add("started", ctx)
            for _ in range(beats):
                await asyncio.sleep(lease_ms / 1000 / 3)
                held = await ctx.heartbeat()
                await rec.add("beat", ctx, held)
            await rec.add("done", ctx)

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            await http_patch_queue(server.http_url, server.api_key, queue, {"lease_ms": lease_ms})
            async with running(app):
                # Runs ~4 leases long, heartbeating three times per lease.
                job = await client.enqueue("slow", {"beats": 12}, queue=queue, max_attempts=3)
                await rec.wait_until(lambda: job.id in rec.ids("done"), "the long job to finish")
                await poll_until(lambda: app.stats["acked"] == 1, "the result to be acked")
            assert [e[3] for e in rec.of("beat", job.id)] == [True] * 12
            assert len(rec.of("started", job.id)) == 1, "the job was handed out twice"
        assert app.stats["stale"] == 0 and app.stats["completed"] == 1

    asyncio.run(main())


def test_without_heartbeat_an_expired_lease_is_rescued(server: Server, queue: str) -> None:
    """The control for the heartbeat test: the same short lease does expire."""
    lease_ms = 1000

    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("stuck")
        async def stuck(ctx: pgferry.JobContext) -> None:
            await rec.add("started", ctx)
            if ctx.attempt == 1:
                # Outlive the lease without heartbeating; the result comes too late.
                await rec.wait_until(lambda: len(rec.of("started", ctx.id)) >= 2, "the rescue")

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            await http_patch_queue(server.http_url, server.api_key, queue, {"lease_ms": lease_ms})
            async with running(app):
                job = await client.enqueue("stuck", {}, queue=queue, max_attempts=3)
                await rec.wait_until(lambda: len(rec.of("started", job.id)) >= 2, "a second delivery")
                await poll_until(lambda: app.stats["acked"] >= 2, "both results to be acked")
            assert [e[2] for e in rec.of("started", job.id)][:2] == [1, 2]
        assert app.stats["stale"] >= 1

    asyncio.run(main())


def test_unique_key_returns_the_existing_job(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            first = await client.enqueue("report", {"day": 1}, queue=queue, unique_key="report:day1")
            again = await client.enqueue("report", {"day": 1}, queue=queue, unique_key="report:day1")
            other = await client.enqueue("report", {"day": 2}, queue=queue, unique_key="report:day2")
            assert not first.duplicate and again.duplicate and not other.duplicate
            assert again.id == first.id and other.id != first.id
            batch = await client.enqueue_many(
                [
                    pgferry.JobRequest("report", {"day": 1}, queue=queue, unique_key="report:day1"),
                    pgferry.JobRequest("report", {"day": 3}, queue=queue, unique_key="report:day3"),
                ]
            )
            assert [(b.id == first.id, b.duplicate) for b in batch] == [(True, True), (False, False)]

    asyncio.run(main())


def test_unique_key_is_released_when_the_job_completes(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("sync_account")
        async def sync_account(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx)

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            first = await client.enqueue("sync_account", {}, queue=queue, unique_key="acct:7")
            await rec.wait_until(lambda: first.id in rec.ids("ran"), "the first unique job")
            await poll_until(lambda: app.stats["acked"] == 1, "its completion to commit")
            second = await client.enqueue("sync_account", {}, queue=queue, unique_key="acct:7")
            assert not second.duplicate and second.id != first.id
            await rec.wait_until(lambda: second.id in rec.ids("ran"), "the second unique job")

    asyncio.run(main())


def test_delay_and_run_at_hold_the_job(server: Server, queue: str) -> None:
    async def main() -> None:
        from datetime import datetime, timedelta, timezone

        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("tick")
        async def tick(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx)

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            later = await client.enqueue("tick", {}, queue=queue, delay=3600)
            at = await client.enqueue(
                "tick", {}, queue=queue, run_at=datetime.now(timezone.utc) + timedelta(hours=1)
            )
            soon = await client.enqueue("tick", {}, queue=queue, delay=0.3)
            now = await client.enqueue("tick", {}, queue=queue)
            await rec.wait_until(lambda: {soon.id, now.id} <= set(rec.ids("ran")), "the due jobs")
            assert later.id not in rec.ids("ran") and at.id not in rec.ids("ran")

    asyncio.run(main())


def test_queue_admin_over_grpc(server: Server, queue: str) -> None:
    """The gRPC Admin service itself (no HTTP fallback: no http_url)."""

    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key) as client:
            assert (await client.get_job((await client.enqueue("k", {}, queue=queue)).id)).kind == "k"
            q = await client.update_queue(queue, lease_ms=5000, max_attempts=7)
            assert (q.name, q.settings["lease_ms"], q.settings["max_attempts"]) == (queue, 5000, 7)
            assert (await client.pause_queue(queue)).paused
            assert not (await client.resume_queue(queue)).paused
            assert queue in {x.name for x in await client.list_queues()}

    asyncio.run(main())


def test_queue_admin_with_http_fallback(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            q = await client.update_queue(queue, lease_ms=5000, max_attempts=7)
            assert (q.name, q.settings["lease_ms"], q.settings["max_attempts"]) == (queue, 5000, 7)
            assert (await client.pause_queue(queue)).paused
            assert not (await client.resume_queue(queue)).paused
            assert queue in {x.name for x in await client.list_queues()}

    asyncio.run(main())
