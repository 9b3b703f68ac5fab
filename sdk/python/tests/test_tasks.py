"""The task API against the real server: enqueue checked against the signature, results
without polling, typed errors, time limits, automatic heartbeats, retry policy, hooks,
resources and middleware."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
import pytest

import pgferry
from helpers import WAIT, http_patch_queue, running
from server import Server


def make_app(server: Server) -> pgferry.App:
    return pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url)


class Address(pydantic.BaseModel):
    street: str
    zip: int


class Label(pydantic.BaseModel):
    text: str


def test_enqueue_and_await_results_of_async_and_sync_tasks(server: Server, queue: str) -> None:
    app = make_app(server)

    @app.task(queue=queue)
    async def add(a: int, b: int = 0) -> int:
        return a + b

    @app.task(queue=queue)
    def shout(word: str) -> str:
        return word.upper()

    @app.task(queue=queue)
    async def label(to: str, address: Address) -> Label:
        assert isinstance(address, Address)  # decoded back into the model
        return Label(text=f"{to}, {address.street}, {address.zip}")

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            job = await add.enqueue(2, b=3)
            assert await job.result(timeout=WAIT) == 5
            assert await shout.run("hi") == "HI"
            lab = await label.run("Ann", Address(street="Main St", zip=12345))
            assert lab == Label(text="Ann, Main St, 12345")
            # A dict for a model argument is validated at enqueue and works the same.
            lab2 = await label.run("Bo", {"street": "Elm", "zip": "7"})  # type: ignore[arg-type]
            assert lab2.text == "Bo, Elm, 7"
            jobs = await add.enqueue_many([add.call(i, b=100) for i in range(20)])
            assert [await j.result(timeout=WAIT) for j in jobs] == [i + 100 for i in range(20)]
            mixed = await app.enqueue_many([add.call(1), shout.call("x")])
            assert [await j.result(timeout=WAIT) for j in mixed] == [1, "X"]
            # A handle for an id stored elsewhere.
            assert await app.job(job.id, add).result(timeout=WAIT) == 5
            info = await job.info()
            assert info.state == "completed" and info.kind == "add" and info.args == {"a": 2, "b": 3}

    asyncio.run(main())


def test_wrong_arguments_fail_at_enqueue_in_the_caller(server: Server, queue: str) -> None:
    app = make_app(server)

    @app.task(queue=queue)
    async def send_email(to: str, subject: str) -> None:
        raise AssertionError("never enqueued, never run")

    @app.task(queue=queue)
    async def ship(address: Address) -> None:
        raise AssertionError("never enqueued, never run")

    async def main() -> None:
        async with app, pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            with pytest.raises(pgferry.TaskArgumentError) as e:
                await send_email.enqueue(to="a@b.c", subjet="typo")  # type: ignore[call-arg]
            assert e.value.field == "subjet" and "unexpected keyword argument 'subjet'" in str(e.value)
            assert isinstance(e.value, TypeError) and isinstance(e.value, pgferry.InvalidArgument)
            with pytest.raises(pgferry.TaskArgumentError) as e:
                await send_email.enqueue("a@b.c")  # type: ignore[call-arg]
            assert e.value.field == "subject"
            with pytest.raises(pgferry.TaskArgumentError) as e:
                await ship.enqueue({"street": "x", "zip": "not a number"})  # type: ignore[arg-type]
            assert e.value.field == "address.zip"
            with pytest.raises(pgferry.TaskArgumentError) as e:
                await send_email.enqueue("a@b.c", subject=object())  # type: ignore[arg-type]
            assert e.value.field == "subject" and "JSON" in str(e.value)
            with pytest.raises(pgferry.TaskArgumentError):
                send_email.call("a@b.c", "s", "extra")  # type: ignore[call-arg]
            jobs, _ = await client.list_jobs(queue=queue)
            assert jobs == []  # nothing reached the server

    asyncio.run(main())


def test_dead_cancelled_and_unfinished_jobs_raise_typed_errors(server: Server, queue: str) -> None:
    app = make_app(server)

    class Bounce(Exception):
        pass

    @app.task(queue=queue, retries=5, dont_retry_on=(Bounce,))
    async def bounce() -> None:
        raise Bounce("address does not exist")

    @app.task(queue=queue, retries=1, backoff=0.01)
    async def always_fails(n: int) -> None:
        raise ValueError(f"bad {n}")

    @app.task(queue=queue)
    async def give_up() -> None:
        raise pgferry.Cancel("not needed any more")

    @app.task(queue=f"{queue[:40]}_i")
    async def never_runs() -> None:
        return None

    async def main() -> None:
        async with app, running(app.worker(queues=[queue], concurrency=4)):
            job = await bounce.enqueue()
            with pytest.raises(pgferry.JobDead) as e:
                await job.result(timeout=WAIT)
            # dont_retry_on: one attempt of the six allowed.
            assert len(e.value.job.attempts) == 1 and e.value.error_kind == "Bounce"
            assert "address does not exist" in e.value.error

            job = await always_fails.enqueue(7)
            with pytest.raises(pgferry.JobFailed) as e:
                await job.result(timeout=WAIT)
            assert isinstance(e.value, pgferry.JobDead) and len(e.value.job.attempts) == 2
            assert "bad 7" in str(e.value)

            job = await give_up.enqueue()
            with pytest.raises(pgferry.JobCancelledError):
                await job.result(timeout=WAIT)

            job = await never_runs.enqueue()
            with pytest.raises(pgferry.ResultTimeout):
                await job.result(timeout=0.3)
            await job.cancel()
            with pytest.raises(pgferry.JobCancelledError):
                await job.result(timeout=WAIT)

    asyncio.run(main())


def test_a_task_over_its_timeout_is_cancelled_and_recorded_as_timed_out(server: Server, queue: str) -> None:
    app = make_app(server)
    cancelled = asyncio.Event()

    @app.task(queue=queue, timeout=0.3, retries=1, backoff=0.01)
    async def slow() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    @app.task(queue=queue, timeout=0.3, retries=0)
    def slow_sync() -> None:
        ctx = pgferry.current_job()
        while not ctx.cancelled:  # a thread cannot be cancelled: it sees ctx.cancelled
            time.sleep(0.01)

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            job = await slow.enqueue()
            with pytest.raises(pgferry.JobDead) as e:
                await job.result(timeout=WAIT)
            assert cancelled.is_set()
            attempts = e.value.job.attempts
            assert [a.error_kind for a in attempts] == ["TaskTimeout", "TaskTimeout"]
            assert "timed out after 0.3s" in attempts[0].error
            job2 = await slow_sync.enqueue()
            with pytest.raises(pgferry.JobDead) as e:
                await job2.result(timeout=WAIT)
            assert e.value.error_kind == "TaskTimeout"

    asyncio.run(main())


def test_automatic_heartbeats_keep_a_long_task_from_being_rescued(server: Server, queue: str) -> None:
    app = make_app(server)
    runs: list[int] = []

    @app.task(queue=queue)
    async def long_job() -> int:
        ctx = pgferry.current_job()
        runs.append(ctx.attempt)
        await asyncio.sleep(4)  # four leases long, and never calls heartbeat()
        return ctx.attempt

    async def main() -> None:
        await http_patch_queue(server.http_url, server.api_key, queue, {"lease_ms": 1000})
        worker = app.worker(concurrency=2)
        async with app, running(worker):
            job = await long_job.enqueue()
            assert await job.result(timeout=WAIT) == 1
            info = await job.info()
            assert [a.attempt for a in info.attempts] == [1]
        assert runs == [1]
        assert worker.stats["auto_heartbeats"] >= 3

    asyncio.run(main())


def test_retry_policy_backoff_priority_unique_and_schedule(server: Server, queue: str) -> None:
    app = make_app(server)
    seen: list[int] = []

    @app.task(queue=queue, retries=3, backoff=lambda attempt: 0.05 * attempt, retry_on=(ConnectionError,))
    async def flaky() -> str:
        ctx = pgferry.current_job()
        seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("try again")
        return f"ok on {ctx.attempt}"

    @app.task(queue=queue, retries=3, retry_on=(ConnectionError,))
    async def wrong_error() -> None:
        raise KeyError("not retried")

    @app.task(queue=f"{queue[:40]}_i", unique=True, priority=2, retries=2)
    async def dedup(user: int) -> None:
        return None

    @app.task(queue=f"{queue[:40]}_i")
    async def plain(user: int) -> None:
        return None

    async def main() -> None:
        async with app, running(app.worker(queues=[queue], concurrency=2)):
            assert await flaky.run() == "ok on 3"
            assert seen == [1, 2, 3]
            job = await wrong_error.enqueue()
            with pytest.raises(pgferry.JobDead) as e:
                await job.result(timeout=WAIT)
            assert len(e.value.job.attempts) == 1 and e.value.error_kind == "KeyError"

            a = await dedup.enqueue(1)
            b = await dedup.enqueue(user=1)
            c = await dedup.enqueue(2)
            assert (b.id, b.duplicate) == (a.id, True) and c.id != a.id and not c.duplicate
            info = await a.info()
            assert (info.priority, info.max_attempts) == (2, 3)
            # A key of the caller's (e.g. from its own HTTP request): the repeat answers the
            # first job and enqueues nothing, even with other arguments.
            k1 = await plain.options(idempotency_key=f"{queue}-req-1").enqueue(10)
            k2 = await plain.options(idempotency_key=f"{queue}-req-1").enqueue(10)
            k3 = await plain.enqueue(10)  # no key of ours: a new job
            assert k1.id == k2.id != k3.id
            batch = [plain.call(20), plain.call(21)]
            b1 = await plain.enqueue_many(batch, idempotency_key=f"{queue}-req-2")
            b2 = await plain.enqueue_many(batch, idempotency_key=f"{queue}-req-2")
            assert [j.id for j in b1] == [j.id for j in b2]
            b3 = await plain.enqueue_many(batch)
            assert not {j.id for j in b3} & {j.id for j in b1}
            later = await dedup.schedule(delay=3600).enqueue(3)
            info = await later.info()
            assert info.state == "scheduled" and info.run_at is not None
            with pytest.raises(TypeError):
                dedup.schedule()

    asyncio.run(main())


def test_startup_resources_middleware_and_shutdown(server: Server, queue: str) -> None:
    app = make_app(server)
    order: list[str] = []

    @app.on_startup
    async def open_pool(resources: dict[str, Any]) -> None:
        order.append("startup")
        resources["pool"] = {"name": "db-pool"}

    @app.on_shutdown
    def close_pool(resources: dict[str, Any]) -> None:
        order.append("shutdown")
        resources.pop("pool")

    @app.middleware
    async def outer(ctx: pgferry.JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        order.append(f"outer>{ctx.kind}")
        value = await call_next()
        order.append("outer<")
        return value

    @app.middleware
    async def inner(ctx: pgferry.JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        order.append("inner>")
        try:
            return await call_next()
        except ValueError:
            order.append("inner saw ValueError")
            raise

    @app.task(queue=queue)
    async def uses_pool() -> str:
        order.append("task")
        return str(pgferry.current_job().resources["pool"]["name"])

    @app.task(queue=queue, retries=0)
    async def fails() -> None:
        raise ValueError("x")

    async def main() -> None:
        async with app, running(app.worker(concurrency=1)):
            assert order == ["startup"]
            assert await uses_pool.run() == "db-pool"
            with pytest.raises(pgferry.JobDead):
                await fails.run()
        assert order == [
            "startup",
            "outer>uses_pool", "inner>", "task", "outer<",
            "outer>fails", "inner>", "inner saw ValueError",
            "shutdown",
        ]
        assert "pool" not in app.resources

    asyncio.run(main())


def test_sync_enqueue_and_result_from_threads(server: Server, queue: str) -> None:
    app = make_app(server)

    @app.task(queue=queue)
    async def double(n: int) -> int:
        return n * 2

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            def from_thread(n: int) -> int:
                return double.enqueue_sync(n).result_sync(timeout=WAIT)

            got = await asyncio.gather(*(asyncio.to_thread(from_thread, i) for i in range(5)))
            assert got == [0, 2, 4, 6, 8]

    asyncio.run(main())


def test_results_need_http_url(server: Server, queue: str) -> None:
    app = pgferry.App(server.grpc_url, server.api_key)

    @app.task(queue=queue)
    async def noop() -> None:
        return None

    async def main() -> None:
        async with app:
            job = await noop.enqueue()
            with pytest.raises(pgferry.PgferryError) as e:
                await job.result(timeout=1)
            assert "http_url" in str(e.value)

    asyncio.run(main())

