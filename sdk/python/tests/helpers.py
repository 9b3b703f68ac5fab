"""Small async helpers shared by the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pgferry

# Upper bound for any wait in a test: a bound on failure, never a speed assertion.
WAIT = 90.0


class Recorder:
    """Collects what handlers saw; `wait_until` blocks until a predicate over it holds."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int, Any]] = []  # (what, job id, attempt, data)
        self._changed = asyncio.Condition()

    async def add(self, what: str, ctx: pgferry.JobContext, data: Any = None) -> None:
        async with self._changed:
            self.events.append((what, ctx.id, ctx.attempt, data))
            self._changed.notify_all()

    def add_threadsafe(self, loop: asyncio.AbstractEventLoop, what: str, ctx: pgferry.JobContext, data: Any = None) -> None:
        asyncio.run_coroutine_threadsafe(self.add(what, ctx, data), loop).result(WAIT)

    def ids(self, what: str) -> list[int]:
        return [e[1] for e in self.events if e[0] == what]

    def of(self, what: str, job_id: int) -> list[tuple[str, int, int, Any]]:
        return [e for e in self.events if e[0] == what and e[1] == job_id]

    async def wait_until(self, pred: Callable[[], bool], what: str = "condition", timeout: float = WAIT) -> None:
        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(pred)

        try:
            await asyncio.wait_for(_wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; events: {self.events[-20:]}") from None


@contextlib.asynccontextmanager
async def running(worker: pgferry.Worker) -> AsyncIterator[asyncio.Task[None]]:
    """Run a worker in the background for the block; stop and drain it afterwards."""
    worker.handle_signals = False
    task = asyncio.create_task(worker.run_async())
    ready = asyncio.create_task(worker.wait_ready())
    done, _ = await asyncio.wait({task, ready}, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()  # raises the worker's error
        raise AssertionError("worker exited before it was ready")
    if ready not in done:
        task.cancel()
        raise AssertionError("worker did not connect")
    try:
        yield task
    finally:
        worker.stop()
        await asyncio.wait_for(task, WAIT)


async def wait_state(client: pgferry.Client, job_id: int, states: set[str], timeout: float = WAIT) -> pgferry.JobInfo:
    """Poll get_job until the job reaches one of `states`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    info = await client.get_job(job_id)
    while info.state not in states:
        if loop.time() > deadline:
            raise AssertionError(f"job {job_id} stayed {info.state!r}, wanted {states}: {info}")
        await asyncio.sleep(0.1)
        info = await client.get_job(job_id)
    return info


async def poll_until(pred: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll a predicate (e.g. over worker stats) until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def http_patch_queue(http_url: str, api_key: str, queue: str, settings: dict[str, int]) -> dict[str, Any]:
    """Queue settings through the server's HTTP API (PATCH /v1/queues/{name}). Tests use it
    for setup, so that what they prove does not also depend on the gRPC Admin service."""
    import json
    import urllib.request

    def call() -> dict[str, Any]:
        req = urllib.request.Request(
            f"{http_url}/v1/queues/{queue}",
            data=json.dumps(settings).encode(),
            method="PATCH",
            headers={"authorization": f"Bearer {api_key}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body: dict[str, Any] = json.loads(resp.read())
            return body

    return await asyncio.to_thread(call)
