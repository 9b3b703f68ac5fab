"""Retry-safe enqueues: the answer to an enqueue is lost after the server committed it (a
proxy on loopback swallows the server's bytes, then drops the connection). The client sends
the request again with its idempotency key and gets the first ids back; exactly one job
exists. Same for a batch, the task API and the blocking client."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pgferry
from helpers import WAIT
from server import Server


class DroppingProxy:
    """A TCP proxy to the server. While armed it forwards the client's bytes but swallows
    the server's (the ack of what the client sends is lost); `cut()` then closes every
    connection it carries and disarms, so the client's reconnect goes through cleanly."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").rpartition(":")
        self.upstream = (host, int(port))
        self.armed = False
        self.swallowed = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def _conn(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection(*self.upstream)
        self._writers += [cw, sw]

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter, from_server: bool) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await r.read(65536):
                    if from_server and self.armed:
                        self.swallowed += len(data)
                        continue
                    w.write(data)
                    await w.drain()
            w.close()

        await asyncio.gather(pump(cr, sw, False), pump(sr, cw, True))

    def cut(self) -> None:
        self.armed = False
        for w in self._writers:
            w.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()


@contextlib.asynccontextmanager
async def proxy_to(server: Server) -> AsyncIterator[DroppingProxy]:
    p = DroppingProxy(server.grpc_url)
    await p.start()
    try:
        yield p
    finally:
        await p.close()


async def count_jobs(client: pgferry.Client, queue: str) -> int:
    jobs, _ = await client.list_jobs(queue=queue)
    return len(jobs)


async def lose_the_answer(
    proxy: DroppingProxy, direct: pgferry.Client, queue: str, want: int, send: Callable[[], Awaitable[Any]]
) -> Any:
    """Runs `send` with the proxy armed; once the server has committed (the jobs are
    visible over a direct connection) cuts the connection, so the ack never arrives."""
    proxy.armed = True
    task = asyncio.create_task(send())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while await count_jobs(direct, queue) < want:
        assert not task.done(), f"send finished while its answer was swallowed: {task}"
        assert loop.time() < deadline, "the server never committed the enqueue"
        await asyncio.sleep(0.05)
    proxy.cut()
    return await asyncio.wait_for(task, WAIT)


def test_a_lost_enqueue_ack_is_retried_with_its_key_and_enqueues_once(server: Server, queue: str) -> None:
    async def main() -> None:
        async with proxy_to(server) as proxy, pgferry.Client(
            server.grpc_url, server.api_key, http_url=server.http_url
        ) as direct, pgferry.Client(proxy.url, server.api_key) as client:
            await client.enqueue("warmup", None, queue=f"{queue[:40]}_w")  # stream open
            one = await lose_the_answer(
                proxy, direct, queue, 1, lambda: client.enqueue("once", {"n": 1}, queue=queue)
            )
            assert proxy.swallowed > 0 and client.stats["enqueue_retries"] >= 1
            jobs, _ = await direct.list_jobs(queue=queue)
            assert [j.id for j in jobs] == [one.id] and not one.duplicate

            many = await lose_the_answer(
                proxy,
                direct,
                queue,
                4,
                lambda: client.enqueue_many([pgferry.JobRequest("batch", {"i": i}, queue=queue) for i in range(3)]),
            )
            jobs, _ = await direct.list_jobs(queue=queue)
            assert sorted(j.id for j in jobs) == sorted([one.id, *(j.id for j in many)])
            assert len(jobs) == 4

    asyncio.run(main())


def test_without_retries_the_lost_answer_is_unavailable_and_a_plain_resend_duplicates(
    server: Server, queue: str
) -> None:
    """What the key prevents: with retries off, the caller sees Unavailable although the
    job was committed, and sending it again (a new request) enqueues a second job."""

    async def main() -> None:
        async with proxy_to(server) as proxy, pgferry.Client(
            server.grpc_url, server.api_key, http_url=server.http_url
        ) as direct, pgferry.Client(proxy.url, server.api_key, enqueue_retry_for=0) as client:
            await client.enqueue("warmup", None, queue=f"{queue[:40]}_w")

            async def send() -> Any:
                try:
                    return await client.enqueue("twice", None, queue=queue)
                except pgferry.Unavailable as e:
                    return e

            got = await lose_the_answer(proxy, direct, queue, 1, send)
            assert isinstance(got, pgferry.Unavailable)
            await client.enqueue("twice", None, queue=queue)
            assert await count_jobs(direct, queue) == 2

    asyncio.run(main())


def test_task_api_and_sync_client_retry_with_their_keys(server: Server, queue: str) -> None:
    async def main() -> None:
        async with proxy_to(server) as proxy, pgferry.Client(
            server.grpc_url, server.api_key, http_url=server.http_url
        ) as direct:
            app = pgferry.App(proxy.url, server.api_key, http_url=server.http_url)

            @app.task(queue=queue)
            async def notify(user: int) -> None:
                return None

            async with app:
                await notify.options(queue=f"{queue[:40]}_w").enqueue(0)  # stream open
                job = await lose_the_answer(proxy, direct, queue, 1, lambda: notify.enqueue(1))
                jobs, _ = await direct.list_jobs(queue=queue)
                assert [j.id for j in jobs] == [job.id]

            # The blocking client (called from threads: this loop runs the proxy).
            sync = pgferry.SyncClient(proxy.url, server.api_key)
            try:
                await asyncio.to_thread(sync.enqueue, "warmup", None, queue=f"{queue[:40]}_w")
                result: list[Any] = []
                t = threading.Thread(target=lambda: result.append(sync.enqueue("s", None, queue=queue)))

                async def send() -> Any:
                    t.start()
                    await asyncio.to_thread(t.join, WAIT)
                    return result[0]

                got = await lose_the_answer(proxy, direct, queue, 2, send)
                jobs, _ = await direct.list_jobs(queue=queue)
                assert len(jobs) == 2 and got.id in {j.id for j in jobs}
            finally:
                await asyncio.to_thread(sync.close)

    asyncio.run(main())


def test_no_server_at_all_fails_after_connect_timeout_not_the_retry_window() -> None:
    """Nothing was sent, so there is no unknown outcome to retry: connect_timeout rules."""
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> None:
        async with pgferry.Client(f"http://127.0.0.1:{port}", "k", connect_timeout=0.5, enqueue_retry_for=600) as c:
            try:
                # The bound keeps a regression (retrying for 600 s) from hanging the suite.
                await asyncio.wait_for(c.enqueue("k", None, queue="q"), 30)
            except pgferry.Unavailable:
                pass
            else:
                raise AssertionError("enqueue to no server succeeded")
            assert c.stats["enqueue_retries"] == 0

    asyncio.run(main())
