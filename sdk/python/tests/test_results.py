"""Results of the protocol-level clients: `Client.result` / `SyncClient.result` wait on the
server's long-poll (GET /v1/jobs/{id}/result) and raise typed errors."""

from __future__ import annotations

import asyncio

import pytest

import pgferry
from helpers import WAIT, running
from server import Server


def test_client_and_sync_client_wait_for_results_and_typed_errors(server: Server, queue: str) -> None:
    worker = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=60)
    release = asyncio.Event()

    @worker.job("square")
    async def square(ctx: pgferry.JobContext, n: int) -> int:
        await release.wait()
        return n * n

    @worker.job("boom")
    async def boom(ctx: pgferry.JobContext) -> None:
        raise pgferry.Fail("no", permanent=True)

    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client, running(worker):
            jobs = [await client.enqueue("square", {"n": i}, queue=queue) for i in range(50)]
            # Fifty waiters at once (each a socket, not a thread), all before any job ends.
            waiters = [asyncio.create_task(client.result(j, timeout=WAIT)) for j in jobs]
            await asyncio.sleep(0.2)
            assert not any(w.done() for w in waiters)
            release.set()
            assert await asyncio.gather(*waiters) == [i * i for i in range(50)]

            dead = await client.enqueue("boom", None, queue=queue, max_attempts=3)
            with pytest.raises(pgferry.JobDead) as e:
                await client.result(dead, timeout=WAIT)
            assert e.value.job.state == "dead" and e.value.error_kind == "Fail"

            idle = await client.enqueue("square", {"n": 1}, queue=f"{queue[:40]}_i")
            with pytest.raises(pgferry.ResultTimeout):
                await client.result(idle, timeout=0.2)
            await client.cancel(idle)
            with pytest.raises(pgferry.JobCancelledError):
                await client.result(idle, timeout=WAIT)

            def blocking() -> object:
                with pgferry.SyncClient(server.grpc_url, server.api_key, http_url=server.http_url) as sync:
                    j = sync.enqueue("square", {"n": 9}, queue=queue)
                    return sync.result(j, timeout=WAIT)

            assert await asyncio.to_thread(blocking) == 81

        async with pgferry.Client(server.grpc_url, server.api_key) as no_http:
            with pytest.raises(pgferry.PgferryError) as e2:
                await no_http.result(1)
            assert e2.value.code == "not_configured"

    asyncio.run(main())
