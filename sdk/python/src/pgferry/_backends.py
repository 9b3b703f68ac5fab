"""Where an App's tasks go: the server (`Remote`), or an in-memory stand-in that runs each
task as it is enqueued (`Eager`, for application tests without a server)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from pgferry._handlers import failure_text, result_not_json
from pgferry._results import wait_finished
from pgferry._types import AttemptInfo, EnqueuedJob, JobInfo, SpecSource, dumps, loads
from pgferry.client import Client
from pgferry.context import JobCancelled, JobContext
from pgferry.errors import NotFound, PgferryError, ResultTimeout
from pgferry.outcomes import Cancel, Fail, Snooze
from pgferry.v1 import common_pb2

if TYPE_CHECKING:
    from pgferry.app import App


class Backend(Protocol):
    async def enqueue(
        self, reqs: Sequence[SpecSource], idempotency_key: str | None = None
    ) -> list[EnqueuedJob]: ...
    async def wait(self, job_id: int, timeout: float | None) -> JobInfo: ...
    async def get_job(self, job_id: int) -> JobInfo: ...
    async def cancel(self, job_id: int) -> JobInfo: ...
    async def close(self) -> None: ...


class Remote:
    """The server: enqueues over the Client's Producer stream, results by long-poll."""

    def __init__(self, app: App) -> None:
        self.app = app
        if not app.url or not app.api_key:
            raise PgferryError(
                "pgferry.App needs url= and api_key= (or PGFERRY_URL / PGFERRY_API_KEY) "
                "to reach a server; use app.eager() in tests without one",
                code="not_configured",
            )
        self.client = Client(
            app.url, app.api_key, http_url=app.http_url, default_queue=app.default_queue, **app.client_options
        )

    async def enqueue(
        self, reqs: Sequence[SpecSource], idempotency_key: str | None = None
    ) -> list[EnqueuedJob]:
        if len(reqs) == 1:
            r = reqs[0]
            return [
                await self.client.enqueue(
                    r.kind,
                    r.args,
                    queue=r.queue,
                    priority=r.priority,
                    run_at=r.run_at,
                    delay=r.delay,
                    unique_key=r.unique_key,
                    max_attempts=r.max_attempts,
                    meta=r.meta,
                    idempotency_key=idempotency_key or getattr(r, "idempotency_key", None),
                )
            ]
        return await self.client._enqueue_batch(reqs, idempotency_key)

    async def wait(self, job_id: int, timeout: float | None) -> JobInfo:
        if not self.app.http_url:
            raise PgferryError(
                "awaiting results needs the server's HTTP address: pgferry.App(http_url=...) "
                "or PGFERRY_HTTP_URL",
                code="not_configured",
            )
        assert self.app.api_key is not None
        return await wait_finished(self.app.http_url, self.app.api_key, job_id, timeout)

    async def get_job(self, job_id: int) -> JobInfo:
        return await self.client.get_job(job_id)

    async def cancel(self, job_id: int) -> JobInfo:
        return await self.client.cancel(job_id)

    async def close(self) -> None:
        await self.client.close()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Eager:
    """Runs every task the moment it is enqueued, in the caller's event loop, through the
    same runner a worker uses (signature decoding, middleware, timeout, retry policy), and
    keeps jobs in memory. Retries run at once (no backoff wait); delays and run_at are not
    waited for; a job without retries= gets one attempt (the server's default attempts are a
    queue setting it does not know). Like Celery's eager mode or Dramatiq's stub broker:
    for application tests, not for production."""

    MAX_SNOOZES = 100

    def __init__(self, app: App) -> None:
        self.app = app
        self.jobs: dict[int, JobInfo] = {}
        # The App's workflows in memory (pgferry._wf_eager), made on first use.
        self.workflows: Any = None
        self._ids = itertools.count(1)
        self._replies: dict[str, list[EnqueuedJob]] = {}  # idempotency key -> first answer

    async def enqueue(
        self, reqs: Sequence[SpecSource], idempotency_key: str | None = None
    ) -> list[EnqueuedJob]:
        key = idempotency_key or (getattr(reqs[0], "idempotency_key", None) if len(reqs) == 1 else None)
        if key is not None and key in self._replies:
            return [EnqueuedJob(j.id) for j in self._replies[key]]
        out = []
        for r in reqs:
            job_id = next(self._ids)
            # Through JSON as on the wire: what a worker would get, not the caller's objects.
            args = loads(dumps(r.args))
            self.jobs[job_id] = JobInfo(
                id=job_id,
                queue=r.queue,
                kind=r.kind,
                state="pending",
                args=args,
                meta=dict(r.meta or {}),
                priority=r.priority,
                max_attempts=r.max_attempts or 1,
                enqueued_at=_now(),
                run_at=r.run_at,
                unique_key=r.unique_key,
            )
            out.append(EnqueuedJob(job_id))
        if key is not None:
            self._replies[key] = out
        for e in out:
            await self._run(e.id)
        return out

    async def _run(self, job_id: int) -> None:
        job = self.jobs[job_id]
        task = self.app.tasks.get(job.kind)
        attempts: list[AttemptInfo] = []
        loop = asyncio.get_running_loop()

        async def heartbeat(_: JobContext) -> bool:
            return True

        def record(outcome: str, started: datetime, error: str = "", kind: str = "") -> None:
            attempts.append(
                AttemptInfo(
                    attempt=len(attempts) + 1,
                    outcome=outcome,
                    error=error,
                    error_kind=kind,
                    claimed_at=started,
                    finished_at=_now(),
                    duration_ms=int((_now() - started).total_seconds() * 1000),
                    worker="eager",
                )
            )

        def finish(state: str, result: Any = None) -> None:
            self.jobs[job_id] = dataclasses.replace(job, state=state, attempts=list(attempts), result=result)

        if task is None:
            record("dead", _now(), f"no task registered for kind {job.kind!r}", "UnknownKind")
            return finish("dead")
        await self.app.startup()
        snoozes = 0
        while True:
            attempt = len(attempts) + 1
            started = _now()
            ctx = JobContext(
                ref=common_pb2.AttemptRef(id=job_id, attempt=attempt),
                queue=job.queue,
                kind=job.kind,
                args=job.args,
                meta=job.meta,
                max_attempts=job.max_attempts,
                priority=job.priority,
                enqueued_at_ms=int(time.time() * 1000),
                lease_until_ms=0,
                worker_id="eager",
                heartbeat=heartbeat,
                loop=loop,
            )
            args = loads(dumps(job.args))
            try:
                value = await task.execute(ctx, args if isinstance(args, dict) else {})
            except Snooze:
                snoozes += 1
                if snoozes > self.MAX_SNOOZES:
                    record("dead", started, f"snoozed more than {self.MAX_SNOOZES} times", "Snooze")
                    return finish("dead")
                continue
            except (Cancel, JobCancelled) as e:
                record("cancelled", started, str(e), type(e).__name__)
                return finish("cancelled")
            except Fail as f:
                last = f.permanent or attempt >= job.max_attempts
                record("dead" if last else "retry", started, f.message, f.kind)
                if last:
                    return finish("dead")
                continue
            except Exception as e:
                last = attempt >= job.max_attempts
                record("dead" if last else "retry", started, failure_text(e), type(e).__name__)
                if last:
                    return finish("dead")
                continue
            try:
                stored = loads(dumps(value))
            except (TypeError, ValueError) as e:
                not_json = result_not_json(task.name, e)
                record("dead", started, not_json.message, not_json.kind)
                return finish("dead")
            record("completed", started)
            return finish("completed", stored)

    async def wait(self, job_id: int, timeout: float | None) -> JobInfo:
        job = await self.get_job(job_id)
        if job.state not in ("completed", "dead", "cancelled"):
            raise ResultTimeout(f"job {job_id} is {job.state} (eager mode runs jobs as they are enqueued)")
        return job

    async def get_job(self, job_id: int) -> JobInfo:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return job

    async def cancel(self, job_id: int) -> JobInfo:
        return await self.get_job(job_id)  # eager jobs are finished by the time they exist

    async def close(self) -> None:
        return None
