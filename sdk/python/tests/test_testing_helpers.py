"""pgferry.testing: the `pgferry_server` fixture starts a real `pgferry dev` for an
application's integration tests, and App reads its PGFERRY_* variables."""

from __future__ import annotations

import asyncio

import pytest

import pgferry
from helpers import running
from pgferry.testing import DevServer


def test_the_fixture_serves_an_app_configured_from_its_environment(
    pgferry_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in pgferry_server.env().items():
        monkeypatch.setenv(k, v)
    app = pgferry.App()
    assert (app.url, app.http_url, app.api_key) == (
        pgferry_server.grpc_url, pgferry_server.http_url, pgferry_server.api_key
    )

    @app.task(queue="fixture_q")
    async def echo(text: str) -> str:
        return text[::-1]

    async def main() -> None:
        async with app, running(app.worker(concurrency=2)):
            assert await echo.run("abc") == "cba"

    asyncio.run(main())
