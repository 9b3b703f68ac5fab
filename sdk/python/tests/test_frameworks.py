"""The FastAPI and Django examples (sdk/python/examples) against the real server."""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import sys
import types

import pytest

import pgferry
from helpers import WAIT, running
from server import Server

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str, server: Server, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.setenv("PGFERRY_URL", server.grpc_url)
    monkeypatch.setenv("PGFERRY_HTTP_URL", server.http_url)
    monkeypatch.setenv("PGFERRY_API_KEY", server.api_key)
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Django resolves ROOT_URLCONF by module name
    spec.loader.exec_module(module)
    return module


def test_fastapi_lifespan_example(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    ex = load_example("fastapi_app", server, monkeypatch)
    tasks: pgferry.App = ex.tasks

    def requests() -> tuple[int, str, int]:
        # TestClient runs the lifespan and the app on its own event loop thread.
        with TestClient(ex.api) as http:
            r = http.post("/signup", params={"email": "ann@example.com"})
            assert r.status_code == 200, r.text
            job_id = r.json()["job_id"]
            done = http.get(f"/signup/{job_id}", params={"wait": WAIT})
            bad = http.post("/signup")  # FastAPI's own validation: no email
            return job_id, done.json()["result"], bad.status_code

    async def main() -> None:
        async with running(tasks.worker(concurrency=2)):
            job_id, result, bad = await asyncio.to_thread(requests)
        assert result == "welcome mail sent to ann@example.com"
        assert bad == 422
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as c:
            assert (await c.get_job(job_id)).state == "completed"

    asyncio.run(main())


def test_django_on_commit_example(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = load_example("django_app", server, monkeypatch)
    from django.test import Client as DjangoClient

    tasks: pgferry.App = ex.tasks

    def requests() -> tuple[int, str, int, object]:
        web = DjangoClient()
        ok = web.get("/signup", {"email": "bo@example.com"})
        assert ok.status_code == 200, ok.content
        job_id = ok.json()["job_id"]
        result = web.get(f"/signup/{job_id}").json()["result"]
        rolled_back = web.get("/signup", {"email": "cy@example.com", "fail": "1"})
        return job_id, result, rolled_back.status_code, rolled_back.json()["job_id"]

    async def main() -> None:
        async with tasks, running(tasks.worker(concurrency=2)):
            job_id, result, status, none = await asyncio.to_thread(requests)
        assert result == "sent to bo@example.com"
        assert (status, none) == (400, None)
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as c:
            jobs, _ = await c.list_jobs(queue="django_mail")
            # The rolled-back signup enqueued nothing: only the committed one's job exists.
            assert [j.id for j in jobs] == [job_id]
            assert jobs[0].args == {"email": "bo@example.com"}

    asyncio.run(main())
