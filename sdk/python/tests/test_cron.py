"""Periodic tasks against the real server: `@app.task(cron=..., tz=...)` registers a
schedule with the server's scheduler, idempotently; changed ones are replaced, removed ones
reported (and pruned on request); the scheduler's fires run the task with its cron_args."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest

import pgferry
from helpers import WAIT, running
from server import Server


def make_app(server: Server) -> pgferry.App:
    return pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url)


def schedule(server: Server, name: str) -> dict[str, Any] | None:
    req = urllib.request.Request(f"{server.http_url}/v1/schedules/{name}", headers={"authorization": f"Bearer {server.api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def test_cron_tasks_register_idempotently_and_report_removed_ones(server: Server, queue: str) -> None:
    kind = f"report_{queue}"
    name = f"task:{kind}"

    def build(cron: str | None, tz: str = "Europe/Berlin") -> pgferry.App:
        app = make_app(server)

        @app.task(name=kind, queue=queue, cron=cron, tz=tz, cron_args={"day": "yesterday"} if cron else None)
        async def report(day: str) -> str:
            return day

        return app

    async def main() -> None:
        r = await build("30 2 * * MON-FRI").sync_schedules()
        assert name in r.created
        s = schedule(server, name)
        assert s is not None and s["cron"] == "30 2 * * MON-FRI" and s["timezone"] == "Europe/Berlin"
        assert s["target"] == {**s["target"], "queue": queue, "kind": kind, "args": {"day": "yesterday"}}
        created_at = s["created_at"]
        # A second deploy of the same code changes nothing.
        r = await build("30 2 * * MON-FRI").sync_schedules()
        assert name in r.unchanged and name not in r.created + r.updated
        assert schedule(server, name)["created_at"] == created_at  # type: ignore[index]
        # Changed: replaced.
        r = await build("0 3 * * *", tz="America/New_York").sync_schedules()
        assert name in r.updated
        s = schedule(server, name)
        assert s is not None and s["cron"] == "0 3 * * *" and s["timezone"] == "America/New_York"
        # The cron is gone from the code: reported, kept until pruned.
        r = await build(None).sync_schedules()
        assert name in r.removed and schedule(server, name) is not None
        r = await build(None).sync_schedules(prune=True)
        assert name in r.removed and r.pruned and schedule(server, name) is None

    asyncio.run(main())


def test_bad_cron_input_fails_clearly(server: Server, queue: str) -> None:
    app = make_app(server)
    with pytest.raises(pgferry.TaskArgumentError, match="dya"):

        @app.task(queue=queue, cron="0 * * * *", cron_args={"dya": 1})
        async def typo(day: str) -> None: ...

    @app.task(name=f"bad_{queue}", queue=queue, cron="*/5 * * *")
    async def bad() -> None: ...

    async def main() -> None:
        with pytest.raises(pgferry.InvalidArgument) as e:
            await app.sync_schedules()
        assert e.value.field == "cron"

    asyncio.run(main())


def test_the_worker_registers_cron_tasks_and_the_scheduler_runs_them(server: Server, queue: str) -> None:
    app = make_app(server)
    kind = f"tick_{queue}"
    seen: list[tuple[str, Any]] = []

    @app.task(name=kind, queue=queue, cron="* * * * * *", cron_args={"who": "cron"})  # every second
    async def tick(who: str) -> None:
        seen.append((who, pgferry.current_job().meta.get("schedule")))

    async def main() -> None:
        try:
            async with app, running(app.worker(concurrency=2)):
                for _ in range(int(WAIT * 10)):
                    if len(seen) >= 2:
                        break
                    await asyncio.sleep(0.1)
            assert len(seen) >= 2, seen
            assert all(who == "cron" for who, _ in seen)
            assert f"task:{kind}" in str(seen[0][1])
        finally:
            app.cron_tasks.clear()
            r = await app.sync_schedules(prune=False)
            assert f"task:{kind}" in r.removed
            await pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url).sync_schedules(prune=True)

    asyncio.run(main())


def test_a_cron_workflow_is_started_by_the_scheduler(server: Server, queue: str) -> None:
    app = pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url, default_queue=queue)
    kind = f"wf_tick_{queue}"[:60]
    seen: list[Any] = []

    @app.workflow(kind, cron="* * * * * *", cron_input={"region": "eu"})
    async def tick(ctx: pgferry.WorkflowContext, i: dict[str, Any]) -> None:
        seen.append(i)

    async def main() -> None:
        try:
            r = await app.sync_schedules()
            assert f"task:{kind}" in r.created
            s = schedule(server, f"task:{kind}")
            assert s is not None and s["target"]["type"] == "workflow" and s["target"]["input"] == {"region": "eu"}
            assert f"task:{kind}" in (await app.sync_schedules()).unchanged
            async with app, running(app.worker(concurrency=2)):
                for _ in range(int(WAIT * 10)):
                    if len(seen) >= 2:
                        break
                    await asyncio.sleep(0.1)
            assert len(seen) >= 2 and seen[0] == {"region": "eu"}, seen
        finally:
            app.cron_tasks.clear()
            assert f"task:{kind}" in (await app.sync_schedules(prune=True)).removed
            assert schedule(server, f"task:{kind}") is None

    asyncio.run(main())
