"""A database outage under a running worker: a result (a job's, or a workflow step's
outcome) that reaches the server while its Postgres is down is refused as `unavailable`
(not recorded), and the worker sends it again until it is. Each test runs its own cluster
and `pgferry serve`: the test stops and starts Postgres."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pgferry
from helpers import poll_until, running
from server import Postgres, Server

# Well below the default lease (60 s): a job whose result was dropped is still running
# then, and only its lease running out would run it again (as a second attempt).
PATIENCE = 30.0


def _http(server: Server, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(
        f"{server.http_url}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"authorization": f"Bearer {server.api_key}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


async def _refused_result_is_recorded(pg: Postgres, server: Server) -> None:
    created = await asyncio.to_thread(_http, server, "POST", "/v1/jobs", {"queue": "q", "kind": "k"})
    job_id = created["job_id"]

    # A worker whose handler finishes only when told to.
    started: asyncio.Queue[int] = asyncio.Queue()
    release = asyncio.Event()
    app = pgferry.Worker(server.grpc_url, server.api_key, queues=["q"], concurrency=1)

    @app.job("k")
    async def k(ctx: pgferry.JobContext) -> None:
        started.put_nowait(ctx.id)
        await release.wait()

    async with running(app):
        assert await asyncio.wait_for(started.get(), PATIENCE) == job_id, "the job reaches the handler"

        # The database goes away; the handler finishes meanwhile.
        await asyncio.to_thread(pg.stop)
        release.set()
        await poll_until(lambda: app.stats["results_resent"] >= 1,
                         "the result to be refused as unavailable", PATIENCE)
        assert app.stats["acked"] == 0, f"nothing is acknowledged while the database is down: {app.stats}"

        # Back on the same port: the result is sent again and recorded.
        await asyncio.to_thread(pg.start)
        back = time.monotonic()
        await poll_until(lambda: app.stats["acked"] >= 1,
                         "the result to be recorded once the database is back", PATIENCE)
        assert time.monotonic() - back < PATIENCE
        assert app.stats["stale"] == 0, f"recorded by this send, not by a rerun: {app.stats}"
        assert app.stats["result_errors"] == 0, f"unavailable is not a final refusal: {app.stats}"
        assert app.stats["received"] == 1, f"the job did not run again: {app.stats}"

        job = await asyncio.to_thread(_http, server, "GET", f"/v1/jobs/{job_id}")
        assert job["state"] == "completed", job
        assert len(job["attempts"]) == 1, f"one attempt, not a rerun: {job}"
        assert job["attempts"][0]["outcome"] == "completed", job


def _with_outage_server(scenario: Callable[[Postgres, Server], Awaitable[None]]) -> None:
    pg = Postgres()
    server: Server | None = None
    try:
        pg.start()
        server = Server.on(pg)
        server.start()
        asyncio.run(scenario(pg, server))
    finally:
        if server is not None:
            server.stop()
        pg.cleanup()


def test_a_result_refused_in_an_outage_is_sent_again_and_recorded() -> None:
    _with_outage_server(_refused_result_is_recorded)


# The workflow steps' lease: longer than the test's patience, so that a dropped outcome
# cannot be rescued by the lease running out (and its step run again) within the test;
# heartbeats (every third of it) play no part either.
WF_LEASE_MS = 120_000


async def _refused_outcome_is_recorded(pg: Postgres, server: Server) -> None:
    app = pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url, default_queue="wfq")
    claims = 0  # runs of the workflow function (one per claim of the instance)
    runs = 0  # runs of its step
    started = asyncio.Event()
    release = asyncio.Event()

    @app.workflow("outage_wf")
    async def flow(ctx: pgferry.WorkflowContext, n: int) -> int:
        nonlocal claims
        claims += 1

        async def block() -> int:
            # Finishes only when told to.
            nonlocal runs
            runs += 1
            started.set()
            await release.wait()
            return n + 1

        v = await ctx.step("block", block)
        return v * 10

    worker = app.worker(concurrency=1, lease_ms=WF_LEASE_MS)
    wf = worker._companion
    async with app, running(worker):
        h = await flow.start(4)
        await asyncio.wait_for(started.wait(), PATIENCE)

        # The database goes away; the step finishes meanwhile: its outcome (done) is refused.
        await asyncio.to_thread(pg.stop)
        release.set()
        await poll_until(lambda: wf.stats["outcomes_resent"] >= 1,
                         "the step's outcome to be refused as unavailable", PATIENCE)
        assert wf.stats["acked"] == 0, f"nothing is acknowledged while the database is down: {wf.stats}"

        # Back on the same port: the outcome is sent again and recorded.
        await asyncio.to_thread(pg.start)
        back = time.monotonic()
        await poll_until(lambda: wf.stats["acked"] >= 1,
                         "the step's outcome to be recorded once the database is back", PATIENCE)
        assert time.monotonic() - back < PATIENCE
        assert wf.stats["stale"] == 0, f"recorded by this send, not after a rerun: {wf.stats}"
        assert wf.stats["outcome_errors"] == 0, f"unavailable is not a final refusal: {wf.stats}"
        assert wf.stats["received"] == 1, f"the step was claimed once: {wf.stats}"

        info = await h.describe()
        assert info.status == "done", info
        assert info.result == 50, info
        assert [(x.outcome, x.attempt) for x in info.history] == [("done", 1)], f"one claim, not a rerun: {info.history}"
    assert (claims, runs) == (1, 1), f"the step ran exactly once: claims={claims} runs={runs}"


def test_a_workflow_step_outcome_refused_in_an_outage_is_sent_again_and_recorded() -> None:
    _with_outage_server(_refused_outcome_is_recorded)
