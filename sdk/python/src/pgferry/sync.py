"""A blocking facade over Client for scripts and threaded web apps.

It owns one event loop on a daemon thread; every method submits the coroutine there and
waits. Calls from many threads are safe and share one Producer stream (they pipeline).

In a process that also runs grpc.aio on another event loop (an async app), grpcio may log
spurious "PollerCompletionQueue._handle_events" errors (grpc/grpc#25364); calls still
work. Async code should use `pgferry.Client` directly."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pgferry._types import Durability, EnqueuedJob, JobInfo, QueueInfo
from pgferry.client import Client, JobLike

T = TypeVar("T")


class SyncClient:
    """`pgferry.SyncClient(url, api_key).enqueue("kind", {...})`; same options as Client."""

    def __init__(self, url: str, api_key: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pgferry-sync-client", daemon=True
        )
        self._thread.start()
        self._client = Client(url, api_key, **options)
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("SyncClient is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def enqueue(
        self,
        kind: str,
        args: Any = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        meta: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> EnqueuedJob:
        """See `Client.enqueue` (retried with its idempotency key when the answer is lost)."""
        return self._run(
            self._client.enqueue(
                kind,
                args,
                queue=queue,
                priority=priority,
                run_at=run_at,
                delay=delay,
                unique_key=unique_key,
                max_attempts=max_attempts,
                meta=meta,
                idempotency_key=idempotency_key,
            )
        )

    def enqueue_many(self, jobs: Iterable[JobLike], *, idempotency_key: str | None = None) -> list[EnqueuedJob]:
        return self._run(self._client.enqueue_many(list(jobs), idempotency_key=idempotency_key))

    def get_job(self, job_id: int | EnqueuedJob) -> JobInfo:
        return self._run(self._client.get_job(job_id))

    def wait(self, job_id: int | EnqueuedJob, timeout: float | None = None) -> JobInfo:
        return self._run(self._client.wait(job_id, timeout))

    def result(self, job_id: int | EnqueuedJob, timeout: float | None = None) -> Any:
        """See `Client.result`: the completed job's result, or JobDead/JobCancelledError."""
        return self._run(self._client.result(job_id, timeout))

    def cancel(self, job_id: int | EnqueuedJob) -> JobInfo:
        return self._run(self._client.cancel(job_id))

    def retry(self, job_id: int | EnqueuedJob) -> JobInfo:
        return self._run(self._client.retry(job_id))

    def list_dead(self, **filters: Any) -> tuple[list[JobInfo], str | None]:
        return self._run(self._client.list_dead(**filters))

    def retry_dead(self, *, queue: str = "", kind: str = "", ids: Sequence[int] = ()) -> int:
        return self._run(self._client.retry_dead(queue=queue, kind=kind, ids=ids))

    def purge_dead(self, *, queue: str = "", kind: str = "", ids: Sequence[int] = ()) -> int:
        return self._run(self._client.purge_dead(queue=queue, kind=kind, ids=ids))

    def list_queues(self) -> list[QueueInfo]:
        return self._run(self._client.list_queues())

    def update_queue(
        self, name: str, *, durability: Durability | None = None, **settings: int | None
    ) -> QueueInfo:
        """See `Client.update_queue`; durability "async" trades the last fraction of a second
        of acknowledged work on a Postgres crash for speed (default "sync")."""
        return self._run(self._client.update_queue(name, durability=durability, **settings))

    def pause_queue(self, name: str) -> QueueInfo:
        return self._run(self._client.pause_queue(name))

    def resume_queue(self, name: str) -> QueueInfo:
        return self._run(self._client.resume_queue(name))

    def close(self) -> None:
        if self._closed:
            return
        self._run(self._client.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
