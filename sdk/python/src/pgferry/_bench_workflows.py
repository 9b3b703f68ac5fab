"""`python -m pgferry.bench --workflows N`: N instances of a 3-step workflow, written
code-first (`@app.workflow`, three `ctx.step`s) and as a state machine (`app.machine`, three
step handlers), started together and run by the App's worker over the WorkflowWorker stream.
The instances are started first; then the worker's run is timed until every instance's
`done` outcome committed (the worker's acks). Reports steps/s
(3 per instance) of each and their ratio, machine, code, code, machine on one server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pgferry
from pgferry import workflows as wf


async def _one(url: str, key: str, n: int, concurrency: int, style: str) -> dict[str, Any]:
    queue = f"bench_wf_{uuid.uuid4().hex[:8]}"
    app = pgferry.App(url, key, default_queue=queue)
    start: Callable[[int], Awaitable[Any]]
    if style == "code":

        @app.workflow(f"bench_code_{queue}")
        async def three(ctx: pgferry.WorkflowContext, i: int) -> int:
            a = await ctx.step("a", lambda: i + 1)
            b = await ctx.step("b", lambda: a + 1)
            return await ctx.step("c", lambda: b + 1)

        start = three.start
    else:
        m = app.machine(f"bench_sm_{queue}")

        @m.step("start")
        async def s1(s: pgferry.ClaimedStep) -> wf.Outcome:
            return wf.Next("b", state={"v": s.input + 1})

        @m.step("b")
        async def s2(s: pgferry.ClaimedStep) -> wf.Outcome:
            return wf.Next("c", state={"v": s.state["v"] + 1})

        @m.step("c")
        async def s3(s: pgferry.ClaimedStep) -> wf.Outcome:
            return wf.Done(s.state["v"] + 1)

        start = m.start
    async with app:
        # The instances are started first (WorkflowAdmin.Start, one unary call each, 64 in
        # flight), then the worker runs their steps: steps/s measures the worker and the
        # engine, not the start calls (reported apart as start_per_s).
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(64)

        async def go(i: int) -> None:
            async with sem:
                while True:
                    try:
                        await start(i)
                        return
                    except pgferry.RateLimited as e:  # a --url server with the default limit
                        await asyncio.sleep(e.retry_after or 0.1)

        await asyncio.gather(*(go(i) for i in range(n)))
        start_s = time.perf_counter() - t0
        worker = app.worker(concurrency=concurrency)
        worker.handle_signals = False
        comp = worker._companion
        run = asyncio.create_task(worker.run_async())
        await worker.wait_ready(60)
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        while comp.stats["done"] < n or comp.stats["acked"] < 3 * n:
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        worker.stop()
        await run
    return {
        "style": style,
        "instances": n,
        "steps_per_s": round(3 * n / elapsed, 1),
        "instances_per_s": round(n / elapsed, 1),
        "start_per_s": round(n / start_s, 1),
        "cpu_us_per_step": round(cpu / (3 * n) * 1e6, 1),
        "stale": comp.stats["stale"],
        "elapsed_s": round(elapsed, 3),
    }


def run_workflows(url: str, key: str, n: int, concurrency: int) -> dict[str, Any]:
    runs = [asyncio.run(_one(url, key, n, concurrency, s)) for s in ("machine", "code", "code", "machine")]
    sm, code = [runs[0], runs[3]], [runs[1], runs[2]]

    def mean(rs: list[dict[str, Any]], k: str) -> float:
        return round(sum(float(r[k]) for r in rs) / len(rs), 1)

    report: dict[str, Any] = {
        "bench": "python_workflows",
        "instances": n,
        "steps_per_instance": 3,
        "concurrency": concurrency,
        "runs": "machine,code,code,machine",
        "machine_steps_per_s": mean(sm, "steps_per_s"),
        "code_steps_per_s": mean(code, "steps_per_s"),
        "machine_cpu_us_per_step": mean(sm, "cpu_us_per_step"),
        "code_cpu_us_per_step": mean(code, "cpu_us_per_step"),
        "start_per_s": mean(runs, "start_per_s"),
        "stale": sum(int(r["stale"]) for r in runs),
    }
    report["ratio_code_to_machine"] = round(report["code_steps_per_s"] / report["machine_steps_per_s"], 3)
    return report
