"""The admin calls over the server's HTTP API (/v1), used when the server does not offer
the gRPC Admin service (it answers UNIMPLEMENTED) and the client was given `http_url`.

Standard library only (urllib in a worker thread): admin calls are rare, so a second
HTTP stack is not worth a dependency."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from pgferry._types import AttemptInfo, JobInfo, QueueInfo, _ms_to_dt, as_durability
from pgferry.errors import PgferryError, RateLimited, Unavailable, from_error

_STATUS_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "payload_too_large",
    429: "rate_limited",
    501: "not_implemented",
    503: "unavailable",
}


def _kind_of(error: str) -> str:
    """The exception kind the server writes in front of an attempt's error ("Kind: ..."):
    the HTTP API has no error_kind field."""
    m = re.match(r"([A-Za-z_][A-Za-z0-9_.]*): ", error)
    return m.group(1) if m else ""


def _job(d: dict[str, Any]) -> JobInfo:
    attempts = [
        AttemptInfo(
            attempt=int(a.get("attempt") or 0),
            outcome=str(a.get("outcome") or ""),
            error=str(a.get("error") or ""),
            error_kind=str(a.get("error_kind") or _kind_of(str(a.get("error") or ""))),
            claimed_at=_ms_to_dt(int(a.get("claimed_at_unix_ms") or 0)),
            finished_at=_ms_to_dt(int(a.get("finished_at_unix_ms") or 0)),
            duration_ms=int(a.get("duration_ms") or 0),
            worker=str(a.get("worker") or ""),
        )
        for a in d.get("attempts") or []
    ]
    run_at = d.get("run_at_unix_ms")
    return JobInfo(
        id=int(d["id"]),
        queue=str(d.get("queue") or ""),
        kind=str(d.get("kind") or ""),
        state=str(d.get("state") or ""),
        args=d.get("args"),
        meta={str(k): str(v) for k, v in (d.get("meta") or {}).items()},
        priority=int(d.get("priority") or 0),
        max_attempts=int(d.get("max_attempts") or 0),
        enqueued_at=_ms_to_dt(int(d.get("enqueued_at_unix_ms") or 0)),
        run_at=_ms_to_dt(int(run_at)) if run_at else None,
        attempts=attempts,
        result=d.get("result"),
        unique_key=d.get("unique_key"),
    )


def _queue(d: dict[str, Any]) -> QueueInfo:
    settings = d.get("settings") or {}
    return QueueInfo(
        name=str(d["name"]),
        paused=bool(d.get("paused")),
        # Numeric settings only; durability ("sync" | "async") has its own field.
        settings={str(k): int(v) for k, v in settings.items() if v is not None and k != "durability"},
        counts={str(k): int(v) for k, v in (d.get("counts") or {}).items() if v is not None},
        durability=as_durability(settings.get("durability")),
    )


class HttpAdmin:
    def __init__(self, base_url: str, api_key: str, timeout: float | None) -> None:
        self.base = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    async def _call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        url = self.base + path
        if query:
            q = {k: v for k, v in query.items() if v not in (None, "", [])}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("authorization", f"Bearer {self.api_key}")
        if data is not None:
            req.add_header("content-type", "application/json")
        return await asyncio.to_thread(self._send, req)

    def _send(self, req: urllib.request.Request) -> Any:
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raise _http_error(e) from None
        except (urllib.error.URLError, OSError) as e:
            raise Unavailable(f"HTTP admin call failed: {e}") from None

    async def get_job(self, job_id: int) -> JobInfo:
        return _job(await self._call("GET", f"/v1/jobs/{job_id}"))

    async def cancel(self, job_id: int) -> JobInfo:
        return _job(await self._call("POST", f"/v1/jobs/{job_id}/cancel"))

    async def retry(self, job_id: int) -> JobInfo:
        return _job(await self._call("POST", f"/v1/jobs/{job_id}/retry"))

    async def list_jobs(
        self, queue: str, state: str, kind: str, cursor: str, limit: int
    ) -> tuple[list[JobInfo], str | None]:
        r = await self._call(
            "GET", "/v1/jobs",
            query={"queue": queue, "state": state, "kind": kind, "cursor": cursor, "limit": limit},
        )
        return [_job(j) for j in r.get("jobs", [])], (r.get("next_cursor") if r.get("has_more") else None)

    async def list_dead(self, queue: str, kind: str, cursor: str, limit: int) -> tuple[list[JobInfo], str | None]:
        r = await self._call("GET", "/v1/dead", query={"queue": queue, "kind": kind, "cursor": cursor, "limit": limit})
        return [_job(j) for j in r.get("jobs", [])], (r.get("next_cursor") if r.get("has_more") else None)

    async def dead_op(self, op: str, queue: str, kind: str, ids: Sequence[int]) -> int:
        body: dict[str, Any] = {}
        if queue:
            body["queue"] = queue
        if kind:
            body["kind"] = kind
        if ids:
            body["ids"] = list(ids)
        return int((await self._call("POST", f"/v1/dead/{op}", body))["count"])

    async def list_queues(self) -> list[QueueInfo]:
        return [_queue(q) for q in (await self._call("GET", "/v1/queues"))["queues"]]

    async def update_queue(self, name: str, settings: dict[str, int | str]) -> QueueInfo:
        """PATCH /v1/queues/{name}: numeric settings and `durability` ("sync" | "async");
        the server refuses a bad value with a 400 naming the field, changing nothing."""
        return _queue(await self._call("PATCH", f"/v1/queues/{urllib.parse.quote(name)}", settings))

    async def queue_action(self, name: str, action: str) -> QueueInfo:
        return _queue(await self._call("POST", f"/v1/queues/{urllib.parse.quote(name)}/{action}"))


def _http_error(e: urllib.error.HTTPError) -> PgferryError:
    code, message, field = _STATUS_CODES.get(e.code, "internal"), f"HTTP {e.code}", ""
    try:
        err = json.loads(e.read())["error"]
        code, message, field = err.get("code", code), err.get("message", message), err.get("field", "")
    except Exception:  # not our JSON error body (a proxy's page): keep the status mapping
        pass
    exc = from_error(str(code), str(message), str(field or ""))
    if isinstance(exc, RateLimited):
        ra = e.headers.get("retry-after")
        exc.retry_after = float(ra) if ra and ra.replace(".", "", 1).isdigit() else None
    return exc
