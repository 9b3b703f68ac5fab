"""A queue's retention of ended workflow instances through the SDK, against the real server:
read, set, clear, and bad values refused with the field named and nothing changed."""

from __future__ import annotations

import asyncio

import pytest
from server import Server

import pgferry

TEN_YEARS_MS = 315_360_000_000


def test_workflow_retention_round_trip(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, default_queue=queue) as client:
            assert await client.get_workflow_retention() is None, "a new queue has no setting"
            assert await client.set_workflow_retention(86_400_123) == 86_400_123
            assert await client.get_workflow_retention(queue) == 86_400_123
            # Another queue is not touched.
            assert await client.get_workflow_retention(queue + "_other") is None
            # Over ten years: refused by the server, naming the field; the setting stays.
            with pytest.raises(pgferry.InvalidArgument) as e:
                await client.set_workflow_retention(TEN_YEARS_MS + 1)
            assert e.value.field == "retention_ms", e.value
            # Negative: refused before it is sent (uint64 on the wire).
            with pytest.raises(pgferry.InvalidArgument) as e:
                await client.set_workflow_retention(-1, queue=queue)
            assert e.value.field == "retention_ms", e.value
            with pytest.raises(TypeError):
                await client.set_workflow_retention(1.5)  # type: ignore[arg-type]
            assert await client.get_workflow_retention() == 86_400_123
            # A bad queue name is the typed error too.
            with pytest.raises(pgferry.InvalidArgument):
                await client.get_workflow_retention("bad name!")
            # 0 keeps nothing past the end; None clears the queue's own setting.
            assert await client.set_workflow_retention(0) == 0
            assert await client.get_workflow_retention() == 0
            assert await client.set_workflow_retention(None) is None
            assert await client.get_workflow_retention() is None

    asyncio.run(main())
