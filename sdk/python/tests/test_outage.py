"""A database outage under a running worker: a result that reaches the server while its
Postgres is down is refused as `unavailable` (not recorded), and the worker sends it again
until it is. Runs its own cluster and `pgferry serve`: the test stops and starts Postgres."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
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


def test_a_result_refused_in_an_outage_is_sent_again_and_recorded() -> None:
    pg = Postgres()
    server: Server | None = None
    try:
        pg.start()
        server = Server.on(pg)
        server.start()
        asyncio.run(_refused_result_is_recorded(pg, server))
    finally:
        if server is not None:
            server.stop()
        pg.cleanup()
