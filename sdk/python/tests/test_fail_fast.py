"""Failures no attempt can fix are dead-lettered at once, against the real server: a
NonRetryable, a worker's `dont_retry_on`, job arguments that do not fit the handler, a
result that is not JSON. Everything else is still retried."""

from __future__ import annotations

import asyncio
from typing import Any

import pgferry
from helpers import Recorder, running, wait_state
from server import Server

ATTEMPTS = 10


class BadAddress(pgferry.NonRetryable):
    pass


async def dead_after_one(client: pgferry.Client, rec: Recorder, job_id: int) -> pgferry.AttemptInfo:
    """The job's only attempt, once it is dead; fails if it ran more than once."""
    info = await wait_state(client, job_id, {"dead"})
    assert len(rec.of("ran", job_id)) == 1, f"ran {len(rec.of('ran', job_id))} times"
    assert [a.outcome for a in info.attempts] == ["dead"]
    return info.attempts[0]


def test_declared_non_retryable_exceptions_dead_letter_at_once(server: Server, queue: str) -> None:
    async def main() -> None:
        rec, loop = Recorder(), asyncio.get_running_loop()
        app = pgferry.Worker(
            server.grpc_url, server.api_key, queues=[queue], concurrency=4, dont_retry_on=(KeyError,)
        )

        @app.job("bad_address")
        async def bad_address(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx)
            raise BadAddress("no @ in 'nobody'")

        @app.job("missing_key")
        def missing_key(ctx: pgferry.JobContext) -> None:  # sync: runs in the thread pool
            rec.add_threadsafe(loop, "ran", ctx)
            raise KeyError("user 7")

        @app.job("flaky")
        async def flaky(ctx: pgferry.JobContext) -> None:
            await rec.add("ran", ctx)
            if ctx.attempt < 2:
                raise RuntimeError("try again")

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            a = await client.enqueue("bad_address", {}, queue=queue, max_attempts=ATTEMPTS)
            b = await client.enqueue("missing_key", {}, queue=queue, max_attempts=ATTEMPTS)
            c = await client.enqueue("flaky", {}, queue=queue, max_attempts=ATTEMPTS)
            first = await dead_after_one(client, rec, a.id)
            assert "BadAddress" in first.error_kind + first.error and "no @ in 'nobody'" in first.error
            second = await dead_after_one(client, rec, b.id)
            assert "KeyError" in second.error_kind + second.error and "user 7" in second.error
            # Any other exception is retried as before.
            await wait_state(client, c.id, {"completed"})
            assert len(rec.of("ran", c.id)) == 2

    asyncio.run(main())


def test_arguments_that_do_not_fit_the_handler_dead_letter_at_once(server: Server, queue: str) -> None:
    async def main() -> None:
        rec, loop = Recorder(), asyncio.get_running_loop()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=4)

        @app.job("send")
        async def send(ctx: pgferry.JobContext, to: str) -> None:
            await rec.add("ran", ctx)

        @app.job("send_sync")
        def send_sync(ctx: pgferry.JobContext, to: str) -> None:
            rec.add_threadsafe(loop, "ran", ctx)

        @app.job("body_type_error")
        async def body_type_error(ctx: pgferry.JobContext, to: str) -> None:
            await rec.add("ran", ctx)
            if ctx.attempt < 2:
                len(5)  # type: ignore[arg-type]  # a TypeError inside the handler: retried

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            a = await client.enqueue("send", {"too": "a@example.com"}, queue=queue, max_attempts=ATTEMPTS)
            b = await client.enqueue("send_sync", {}, queue=queue, max_attempts=ATTEMPTS)
            c = await client.enqueue("body_type_error", {"to": "x"}, queue=queue, max_attempts=ATTEMPTS)
            # The handler never ran: the call could not bind (no "ran" event) — one attempt.
            for job, word in ((a, "'too'"), (b, "'to'")):
                info = await wait_state(client, job.id, {"dead"})
                assert [x.outcome for x in info.attempts] == ["dead"]
                assert rec.of("ran", job.id) == []
                att = info.attempts[0]
                assert "TaskArgumentError" in att.error_kind + att.error, att
                assert "do not match the handler's parameters" in att.error and word in att.error
            await wait_state(client, c.id, {"completed"})
            assert len(rec.of("ran", c.id)) == 2

    asyncio.run(main())


def test_a_result_that_is_not_json_dead_letters_at_once(server: Server, queue: str) -> None:
    async def main() -> None:
        rec = Recorder()
        app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=2)

        @app.job("returns_a_set")
        async def returns_a_set(ctx: pgferry.JobContext) -> Any:
            await rec.add("ran", ctx)
            return {1, 2}

        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(app):
            job = await client.enqueue("returns_a_set", {}, queue=queue, max_attempts=ATTEMPTS)
            att = await dead_after_one(client, rec, job.id)
            assert "ResultNotJSON" in att.error_kind + att.error, att
            assert "not JSON-serialisable" in att.error

    asyncio.run(main())


def test_tasks_fail_fast_too(server: Server, queue: str) -> None:
    """The task API: a NonRetryable from a task, and a job enqueued by another producer with
    arguments the task function does not take, on both of the worker's paths (a task
    without options is called directly; `timeout=` goes through the task's runner)."""

    async def main() -> None:
        app = pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url)
        runs: list[str] = []

        @app.task(queue=queue, retries=ATTEMPTS)
        async def direct(to: str) -> None:
            runs.append("direct")

        @app.task(queue=queue, retries=ATTEMPTS, timeout=30)
        async def wrapped(to: str) -> None:
            runs.append("wrapped")

        @app.task(queue=queue, retries=ATTEMPTS, timeout=30)
        def refuses(to: str) -> None:
            runs.append("refuses")
            raise BadAddress(to)

        worker = app.worker(concurrency=4)
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(worker):
            a = await client.enqueue("direct", {"too": "x"}, queue=queue, max_attempts=ATTEMPTS)
            b = await client.enqueue("wrapped", {"too": "x"}, queue=queue, max_attempts=ATTEMPTS)
            c = await refuses.enqueue("nobody")
            for job, kind in ((a, "TaskArgumentError"), (b, "TaskArgumentError"), (c, "BadAddress")):
                info = await wait_state(client, job.id, {"dead"})
                assert [x.outcome for x in info.attempts] == ["dead"], (kind, info.attempts)
                assert kind in info.attempts[0].error_kind + info.attempts[0].error
            assert runs == ["refuses"]

    asyncio.run(main())


def test_eager_mode_fails_fast_the_same_way() -> None:
    app = pgferry.App(eager=True)

    @app.task(retries=ATTEMPTS)
    def refuses(to: str) -> None:
        raise BadAddress(to)

    @app.task(retries=ATTEMPTS)
    def returns_a_set() -> Any:
        return {1}

    with app.eager() as store:
        for job, kind in ((refuses.enqueue_sync("nobody"), "BadAddress"), (returns_a_set.enqueue_sync(), "ResultNotJSON")):
            attempts = store.jobs[job.id].attempts
            assert [a.outcome for a in attempts] == ["dead"], (kind, attempts)
            assert attempts[0].error_kind == kind
