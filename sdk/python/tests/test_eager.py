"""Eager mode: application tests without a server. Tasks run in-process as they are
enqueued, through the same runner a worker uses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
import pytest

import pgferry


class Item(pydantic.BaseModel):
    sku: str
    qty: int


def build_app() -> tuple[pgferry.App, list[str]]:
    # No url or key: eager mode needs neither.
    app = pgferry.App(url="", api_key="")
    log: list[str] = []

    @app.on_startup
    def start(resources: dict[str, Any]) -> None:
        log.append("startup")
        resources["stock"] = {"apple": 3}

    @app.middleware
    async def trace(ctx: pgferry.JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        log.append(f"mw {ctx.kind} #{ctx.attempt}")
        return await call_next()

    @app.task(retries=2)
    async def reserve(item: Item) -> int:
        stock = pgferry.current_job().resources["stock"]
        if stock.get(item.sku, 0) < item.qty:
            raise pgferry.Fail(f"out of {item.sku}", permanent=True)
        stock[item.sku] -= item.qty
        return int(stock[item.sku])

    @app.task(retries=2)
    def flaky(n: int) -> int:
        if pgferry.current_job().attempt < 3:
            raise ConnectionError("again")
        return n

    @app.task
    async def stop() -> None:
        raise pgferry.Cancel("no")

    @app.task(timeout=0.05)
    async def hangs() -> None:
        await asyncio.sleep(3600)

    return app, log


def test_eager_runs_tasks_on_enqueue_with_results_retries_and_typed_errors() -> None:
    app, log = build_app()
    reserve, flaky, stop, hangs = (app.tasks[k] for k in ("reserve", "flaky", "stop", "hangs"))

    async def main() -> None:
        with app.eager() as store:
            job = await reserve.enqueue(Item(sku="apple", qty=2))
            assert await job.result() == 1
            assert log == ["startup", "mw reserve #1"]
            with pytest.raises(pgferry.JobDead) as e:
                await (await reserve.enqueue({"sku": "apple", "qty": 5})).result()
            assert "out of apple" in str(e.value) and len(e.value.job.attempts) == 1
            assert await flaky.run(7) == 7
            assert [a.outcome for a in store.jobs[3].attempts] == ["retry", "retry", "completed"]
            with pytest.raises(pgferry.JobCancelledError):
                await stop.run()
            with pytest.raises(pgferry.JobDead) as e:
                await hangs.run()
            assert e.value.error_kind == "TaskTimeout"
            with pytest.raises(pgferry.TaskArgumentError) as a:
                await reserve.enqueue(item={"sku": "apple"})
            assert a.value.field == "item.qty"
            assert len(store.jobs) == 5  # the refused call never became a job
            again = [await flaky.options(idempotency_key="k").enqueue(1) for _ in range(2)]
            assert again[0].id == again[1].id and len(store.jobs) == 6

    asyncio.run(main())


def test_eager_from_sync_code_and_without_a_server_outside_eager() -> None:
    app, _ = build_app()
    flaky = app.tasks["flaky"]
    with app.eager():
        assert flaky.enqueue_sync(n=4).result_sync() == 4

    async def outside() -> None:
        with pytest.raises(pgferry.PgferryError) as e:
            await flaky.enqueue(1)
        assert e.value.code == "not_configured"

    asyncio.run(outside())
