"""Periodic tasks: `@app.task(cron="*/5 * * * *", tz="Europe/Berlin")` registers a schedule
with the server's scheduler (docs/schedules.md; it fires exactly once per fire time, across
leader failover). `await app.sync_schedules()` (the worker runs it at startup) makes the
server's schedules match the App's cron tasks:

- a schedule is named `task:<kind>`; one that exists with the same cron, zone, queue, kind
  and arguments is left alone (a deploy changes nothing: idempotent);
- one that differs is replaced (delete + create: the HTTP API has no update);
- `task:` schedules of kinds that no longer have a cron task are reported as `removed`,
  and deleted only with `prune=True` (another App of the same tenant may own them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgferry._http_admin import HttpAdmin
from pgferry.errors import NotFound, PgferryError

if TYPE_CHECKING:
    from pgferry.app import App

PREFIX = "task:"


@dataclass(frozen=True)
class CronSpec:
    kind: str
    cron: str
    tz: str
    queue: str
    # A job's arguments, or a workflow's input (workflow=True).
    args: Any
    workflow: bool = False

    @property
    def name(self) -> str:
        return PREFIX + self.kind

    def body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "timezone": self.tz,
            "target": self._target(),
        }

    def _target(self) -> dict[str, Any]:
        if self.workflow:
            return {"type": "workflow", "queue": self.queue, "kind": self.kind, "input": self.args}
        return {"type": "job", "queue": self.queue, "kind": self.kind, "args": self.args}

    def matches(self, s: dict[str, Any]) -> bool:
        t = s.get("target") or {}
        want = self._target()
        return (
            s.get("cron") == self.cron
            and s.get("timezone") == self.tz
            and all(t.get(k) == v for k, v in want.items() if k not in ("args", "input"))
            and (t.get("input") if self.workflow else (t.get("args") or {})) == want.get("input" if self.workflow else "args")
        )


@dataclass
class ScheduleSync:
    """What `sync_schedules` did: names created, replaced (changed), unchanged, and
    `removed`: `task:` schedules with no cron task in this App (deleted when `pruned`)."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    pruned: bool = False


async def _list(http: HttpAdmin) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        page = await http._call("GET", "/v1/schedules", query={"after": after, "limit": 500})
        out.extend(page.get("schedules") or [])
        after = page.get("next")
        if not after:
            return out


async def sync(app: App, *, prune: bool = False) -> ScheduleSync:
    if not app.http_url or not app.api_key:
        raise PgferryError(
            "cron tasks are registered over the server's HTTP API: pgferry.App(http_url=...) "
            "or PGFERRY_HTTP_URL (and the API key)",
            code="not_configured",
        )
    http = HttpAdmin(app.http_url, app.api_key, 30.0)
    existing = {s["name"]: s for s in await _list(http) if str(s.get("name", "")).startswith(PREFIX)}
    report = ScheduleSync(pruned=prune)
    wanted = {c.name: c for c in app.cron_tasks.values()}
    for name, c in sorted(wanted.items()):
        cur = existing.get(name)
        if cur is not None and c.matches(cur):
            report.unchanged.append(name)
            continue
        if cur is not None:
            await http._call("DELETE", f"/v1/schedules/{name}")
            report.updated.append(name)
        else:
            report.created.append(name)
        await http._call("POST", "/v1/schedules", c.body())
    for name in sorted(set(existing) - set(wanted)):
        report.removed.append(name)
        if prune:
            try:
                await http._call("DELETE", f"/v1/schedules/{name}")
            except NotFound:
                pass
    return report
