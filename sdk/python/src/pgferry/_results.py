"""Waiting for a job's result: `GET /v1/jobs/{id}/result?wait_ms=N` (a long-poll the
server answers as soon as the job is completed, dead or cancelled; see docs/http-api.md).

A minimal HTTP/1.1 GET over asyncio streams: a waiter holds a socket, not a thread (the
admin calls' urllib-in-a-thread would cap concurrent waiters at the executor's size)."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.parse
from typing import Any

from pgferry import _conn
from pgferry._http_admin import _STATUS_CODES, _job
from pgferry._types import JobInfo
from pgferry.errors import (
    JobCancelledError,
    JobDead,
    PgferryError,
    ProtocolError,
    ResultTimeout,
    Unavailable,
    from_error,
)

# Longest wait per request (the server's limit is 60 s; less keeps proxies quiet).
_MAX_WAIT_MS = 30_000
_FINISHED = ("completed", "dead", "cancelled")


async def http_get_json(base_url: str, path: str, api_key: str, timeout: float) -> Any:
    """GET base_url+path with a bearer key; the JSON body, or the typed error of a non-2xx
    answer (Unavailable when the server cannot be reached or drops the connection)."""
    u = urllib.parse.urlsplit(base_url)
    tls = u.scheme == "https"
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if tls else 80)
    prefix = u.path.rstrip("/")
    request = (
        f"GET {prefix}{path} HTTP/1.1\r\nHost: {u.netloc}\r\n"
        f"Authorization: Bearer {api_key}\r\nAccept: application/json\r\n"
        "Connection: close\r\n\r\n"
    ).encode()

    async def call() -> tuple[int, dict[str, str], bytes]:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=ssl.create_default_context() if tls else None
        )
        try:
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit():
                raise ProtocolError(f"bad HTTP status line {status_line!r}")
            headers: dict[str, str] = {}
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                body = await _chunked(reader)
            else:
                body = await reader.read()
            return int(parts[1]), headers, body
        finally:
            writer.close()

    try:
        status, headers, body = await asyncio.wait_for(call(), timeout)
    except asyncio.TimeoutError:
        raise Unavailable(f"no answer from {base_url} within {timeout:.0f}s") from None
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        raise Unavailable(f"HTTP call to {base_url} failed: {e}") from None
    if 200 <= status < 300:
        return json.loads(body) if body else None
    code, message, field = _STATUS_CODES.get(status, "internal"), f"HTTP {status}", ""
    try:
        err = json.loads(body)["error"]
        code, message, field = err.get("code", code), err.get("message", message), err.get("field", "")
    except Exception:  # not our JSON error body: keep the status mapping
        pass
    raise from_error(str(code), str(message), str(field or ""))


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readline()


async def wait_finished(
    http_url: str, api_key: str, job_id: int, timeout: float | None
) -> JobInfo:
    """The job once it is completed, dead or cancelled. Raises ResultTimeout after
    `timeout` seconds (None: wait as long as it takes). A server restart in between is
    waited out (reconnects with backoff) within the same timeout."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    backoff = _conn.Backoff(base=0.05, cap=2.0)
    while True:
        left = None if deadline is None else deadline - loop.time()
        wait_ms = _MAX_WAIT_MS if left is None else max(0, min(_MAX_WAIT_MS, int(left * 1000)))
        try:
            body = await http_get_json(
                http_url, f"/v1/jobs/{job_id}/result?wait_ms={wait_ms}", api_key, wait_ms / 1000 + 30
            )
        except Unavailable:
            delay = backoff.next_delay()
            if deadline is not None and loop.time() + delay >= deadline:
                raise ResultTimeout(
                    f"job {job_id}: no result within {timeout}s (the server was unreachable)"
                ) from None
            await asyncio.sleep(delay)
            continue
        backoff.reset()
        job = _job(body)
        if body.get("finished") or job.state in _FINISHED:
            return job
        if deadline is not None and loop.time() >= deadline:
            raise ResultTimeout(f"job {job_id} is still {job.state} after {timeout}s")


def raise_unless_completed(job: JobInfo) -> None:
    """JobDead / JobCancelledError for a finished job that did not complete."""
    if job.state == "completed":
        return
    last = job.attempts[-1] if job.attempts else None
    why = f": {last.error.splitlines()[0]}" if last is not None and last.error else ""
    if job.state == "dead":
        raise JobDead(f"job {job.id} ({job.kind}) is dead after {len(job.attempts)} attempt(s){why}", job=job)
    if job.state == "cancelled":
        raise JobCancelledError(f"job {job.id} ({job.kind}) was cancelled{why}", job=job)
    raise PgferryError(f"job {job.id} is {job.state}, not finished", code="not_finished")
