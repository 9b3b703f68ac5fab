"""A workflow worker process for the crash/replay test: every step run appends its name to
$WF_COUNTS; with WF_HANG=1 step "b" hangs (the test kills the process there)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pgferry

app = pgferry.App(default_queue=os.environ["WF_QUEUE"])


def record(name: str) -> str:
    with open(os.environ["WF_COUNTS"], "a") as f:
        f.write(name + "\n")
    return name


@app.workflow("py_crash")
async def crash(ctx: pgferry.WorkflowContext, _: Any) -> list[str]:
    a = await ctx.step("a", lambda: record("a"))

    async def b() -> str:
        record("b")
        if os.environ.get("WF_HANG") == "1":
            await asyncio.sleep(3600)
        return "b"

    bb = await ctx.step("b", b)
    c = await ctx.step("c", lambda: record("c"))
    return [a, bb, c]


if __name__ == "__main__":
    app.run_worker(concurrency=2, lease_ms=1000)
