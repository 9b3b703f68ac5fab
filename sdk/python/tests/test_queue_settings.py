"""Queue durability through the SDK against a real server: over the gRPC Admin service, over
the HTTP API (HttpAdmin), and through the blocking SyncClient."""

from __future__ import annotations

import asyncio

import pytest
from server import Server

import pgferry
from pgferry._http_admin import HttpAdmin


async def _durability_round_trip(client: pgferry.Client, queue: str, field: str) -> None:
    q = await client.update_queue(queue, max_attempts=4)
    assert q.durability == "sync", "a new queue is sync"
    q = await client.update_queue(queue, durability="async")
    assert q.durability == "async"
    assert "durability" not in q.settings, "settings holds the numeric ones only"
    # Omitted: kept.
    q = await client.update_queue(queue, lease_ms=7000)
    assert (q.durability, q.settings["lease_ms"]) == ("async", 7000)
    # A bad value is the typed error naming the field, and nothing of the call is applied.
    for bad in ("fast", "ASYNC", ""):
        with pytest.raises(pgferry.InvalidArgument) as e:
            await client.update_queue(queue, durability=bad, max_attempts=9)  # type: ignore[arg-type]
        assert e.value.field == field, e.value
    # A later read shows the stored values.
    [q] = [x for x in await client.list_queues() if x.name == queue]
    assert (q.durability, q.settings["max_attempts"], q.settings["lease_ms"]) == ("async", 4, 7000)
    q = await client.update_queue(queue, durability="sync")
    assert q.durability == "sync"


def test_queue_durability_over_grpc(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key) as client:
            await _durability_round_trip(client, queue, "settings.durability")

    asyncio.run(main())


def test_queue_durability_over_http(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            # The server offers the gRPC Admin service, so the client would never fall back:
            # hand it the HTTP admin as if it had.
            client._http = HttpAdmin(server.http_url, server.api_key, 30.0)
            await _durability_round_trip(client, queue, "durability")

    asyncio.run(main())


def test_queue_durability_with_sync_client(server: Server, queue: str) -> None:
    with pgferry.SyncClient(server.grpc_url, server.api_key) as client:
        assert client.update_queue(queue, durability="async").durability == "async"
        assert client.update_queue(queue, max_attempts=3).durability == "async"
        with pytest.raises(pgferry.InvalidArgument) as e:
            client.update_queue(queue, durability="later")  # type: ignore[arg-type]
        assert e.value.field == "settings.durability"
        [q] = [x for x in client.list_queues() if x.name == queue]
        assert q.durability == "async"
