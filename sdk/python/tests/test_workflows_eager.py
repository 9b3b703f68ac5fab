"""Workflows under `app.eager()`: the same step runners as the worker, against the
in-memory engine (no server): application tests of workflows need no server."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

import pgferry
from pgferry import workflows as wf


def make_app() -> pgferry.App:
    return pgferry.App("http://127.0.0.1:1", "unused", default_queue="eager")


def test_code_first_workflow_runs_in_memory_with_signals_children_and_skipped_sleeps() -> None:
    app = make_app()
    runs: collections.Counter[str] = collections.Counter()

    @app.task
    async def price(item: str) -> int:
        return len(item)

    @app.workflow("e_ship")
    async def ship(ctx: pgferry.WorkflowContext, item: str) -> str:
        return await ctx.step("label", lambda: f"L-{item}")

    @app.workflow("e_order")
    async def order(ctx: pgferry.WorkflowContext, o: dict[str, Any]) -> dict[str, Any]:
        async def priced() -> int:
            runs["price step"] += 1
            return await price.run(o["item"])  # a task, eagerly

        total = await ctx.step("price", priced)
        runs["replayed past price"] += 1
        await ctx.sleep(3600)  # skipped in eager mode
        paid = await ctx.wait_for_signal("paid", timeout=60)
        labels = await ctx.fan_out(ship, [o["item"], "x"])
        return {"total": total, "paid": paid.payload if paid else None, "labels": labels}

    async def main() -> None:
        with app.eager():
            h = await order.start({"item": "book"}, correlation_key="o1")
            assert (await order.start({"item": "book"}, correlation_key="o1")).duplicate
            for _ in range(100):
                if (await h.describe()).status == "awaiting":
                    break
            info = await h.describe()
            assert info.status == "awaiting" and info.awaits == ["paid"]
            assert await h.signal("paid", 9) is True
            assert await h.result(timeout=5) == {"total": 4, "paid": 9, "labels": ["L-book", "L-x"]}
            # The journal is the same as against a server: price, sleep, signal, children.
            done = await h.describe()
            assert [o.outcome for o in done.history][-1] == "done"
        # Each claim replays the function past the journaled step without running it again.
        assert runs["price step"] == 1 and runs["replayed past price"] >= 3

    asyncio.run(main())


def test_await_timeout_cancel_and_non_determinism_in_memory() -> None:
    app = make_app()

    @app.workflow("e_wait")
    async def wait(ctx: pgferry.WorkflowContext, t: float) -> str:
        await ctx.step("a", lambda: 1)
        sig = await ctx.wait_for_signal("go", timeout=t)
        return "signal" if sig else "timeout"

    async def main() -> None:
        with app.eager():
            assert await (await wait.start(0.05)).result(timeout=5) == "timeout"
            h = await wait.start(60)
            await asyncio.sleep(0.01)
            await h.cancel("no")
            with pytest.raises(pgferry.WorkflowCancelled):
                await h.result(timeout=5)
            # Non-determinism: the code renames a step while an instance waits.
            h2 = await wait.start(60)
            await asyncio.sleep(0.01)
            real = wait.fn

            async def renamed(ctx: pgferry.WorkflowContext, t: float) -> str:
                await ctx.step("a_v2", lambda: 1)
                return "never"

            wait.fn = renamed
            await h2.signal("go")
            with pytest.raises(pgferry.NonDeterminismError):
                await h2.result(timeout=5)
            wait.fn = real
            await h2.retry()
            assert await h2.result(timeout=5) == "signal"

    asyncio.run(main())


def test_state_machine_in_memory_with_first_of_children() -> None:
    app = make_app()
    race = app.machine("e_race", children=True)
    runner = app.machine("e_runner")

    @runner.step("start")
    async def run_(s: pgferry.ClaimedStep) -> wf.Outcome:
        if s.input == "slow":
            return wf.Await(["never"], step="start")
        return wf.Done(s.input)

    @race.step("start")
    async def start(s: pgferry.ClaimedStep) -> wf.Outcome:
        return wf.Spawn([runner.child("slow"), runner.child("fast")], step="won", join="any")

    @race.step("won")
    async def won(s: pgferry.ClaimedStep) -> wf.Outcome:
        ends = {c["result"] if c["status"] == "done" else c["status"] for c in s.children or []}
        return wf.Done(sorted(ends))

    async def main() -> None:
        with app.eager():
            assert await (await race.start(None)).result(timeout=5) == ["cancelled", "fast"]

    asyncio.run(main())
