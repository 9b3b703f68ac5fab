"""Errors from the server surface as typed exceptions with stable codes and fields."""

from __future__ import annotations

import asyncio

import pytest

import pgferry
from server import Server


def test_bad_api_key_is_auth_error(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, "pgf_not_a_real_key") as client:
            with pytest.raises(pgferry.AuthError):
                await client.enqueue("x", {}, queue=queue)

    asyncio.run(main())


def test_worker_with_bad_key_raises_auth_error(server: Server, queue: str) -> None:
    async def main() -> None:
        app = pgferry.Worker(server.grpc_url, "pgf_not_a_real_key", queues=[queue], handle_signals=False)
        with pytest.raises(pgferry.AuthError):
            await asyncio.wait_for(app.run_async(), 30)

    asyncio.run(main())


def test_invalid_job_is_invalid_argument_naming_the_field(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            with pytest.raises(pgferry.InvalidArgument) as e:
                await client.enqueue("x", {}, queue=queue, priority=9)
            assert "priority" in e.value.field
            with pytest.raises(pgferry.InvalidArgument) as e:
                await client.enqueue("", {}, queue=queue)
            assert "kind" in e.value.field
            # All or nothing: one bad job fails the batch and names its index.
            with pytest.raises(pgferry.InvalidArgument) as e:
                await client.enqueue_many(
                    [
                        pgferry.JobRequest("ok", {}, queue=queue),
                        pgferry.JobRequest("bad", {}, queue=queue, max_attempts=0),
                    ]
                )
            assert "jobs[1]" in e.value.field and "max_attempts" in e.value.field
            # The stream survives a rejected request.
            ok = await client.enqueue("ok", {}, queue=queue)
            assert ok.id > 0

    asyncio.run(main())


def test_oversized_payload_is_rejected(server: Server, queue: str) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            await client.enqueue("warmup", {}, queue=queue)
            limit = client._stream.hello_ack.max_payload_bytes if client._stream else 0
            assert limit > 0
            with pytest.raises(pgferry.PayloadTooLarge) as e:
                await client.enqueue("big", {"blob": "x" * (limit + 10)}, queue=queue)
            assert e.value.code == "payload_too_large"

    asyncio.run(main())


def test_unknown_job_is_not_found(server: Server) -> None:
    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            with pytest.raises(pgferry.NotFound):
                await client.get_job(987_654_321_000)
            with pytest.raises(pgferry.NotFound):
                await client.cancel(987_654_321_000)

    asyncio.run(main())


def test_unreachable_server_is_unavailable() -> None:
    async def main() -> None:
        # Port 9 (discard) on loopback: nothing listens there in the test environment.
        async with pgferry.Client("http://127.0.0.1:9", "k", connect_timeout=0.5) as client:
            with pytest.raises(pgferry.Unavailable):
                await client.enqueue("x", {})

    asyncio.run(main())


def test_local_validation_needs_no_server() -> None:
    async def main() -> None:
        from datetime import datetime

        async with pgferry.Client("http://127.0.0.1:9", "k") as client:
            with pytest.raises(ValueError):
                await client.enqueue("x", {}, delay=1, run_at=datetime.now())
            with pytest.raises(ValueError):
                await client.enqueue("x", {}, run_at=datetime.now())  # naive datetime

    asyncio.run(main())
