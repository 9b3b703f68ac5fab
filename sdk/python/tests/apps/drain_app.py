"""A worker module for `pgferry-worker drain_app:app` in the drain test. Every job logs
"start ID" and "end ID" lines to $DRAIN_LOG."""

from __future__ import annotations

import asyncio
import os

import pgferry

app = pgferry.Worker(
    os.environ["PGFERRY_URL"],
    os.environ["PGFERRY_API_KEY"],
    queues=[os.environ["DRAIN_QUEUE"]],
    concurrency=10,
    grace_period=60,
)
_log = open(os.environ["DRAIN_LOG"], "a", buffering=1)


@app.job("work")
async def work(ctx: pgferry.JobContext, n: int) -> int:
    _log.write(f"start {ctx.id}\n")
    await asyncio.sleep(0.2)
    _log.write(f"end {ctx.id}\n")
    return n
