"""Process lifecycle: drain on SIGTERM loses nothing; a server restart mid-run is survived
by producers and workers and the ledger of job ids balances."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time

import pgferry
from helpers import WAIT, Recorder, http_patch_queue, running
from server import Server, data_dir

HERE = pathlib.Path(__file__).parent


def _read_log(path: pathlib.Path) -> tuple[list[int], list[int]]:
    starts, ends = [], []
    for line in path.read_text().splitlines():
        what, _, jid = line.partition(" ")
        (starts if what == "start" else ends).append(int(jid))
    return starts, ends


def test_drain_on_sigterm_loses_nothing(server: Server, queue: str, tmp_path: pathlib.Path) -> None:
    log = tmp_path / "drain.log"
    log.touch()

    async def main() -> None:
        async with pgferry.Client(server.grpc_url, server.api_key, http_url=server.http_url) as client:
            # A lease far longer than the test: a job the drain failed to hand back would
            # wait for it and the test would time out instead of passing by rescue.
            await http_patch_queue(server.http_url, server.api_key, queue, {"lease_ms": 600_000})
            jobs = await client.enqueue_many([pgferry.JobRequest("work", {"n": i}, queue=queue) for i in range(150)])
            ids = {j.id for j in jobs}

            env = dict(os.environ, PGFERRY_URL=server.grpc_url, PGFERRY_API_KEY=server.api_key,
                       DRAIN_QUEUE=queue, DRAIN_LOG=str(log), PYTHONPATH=str(HERE / "apps"))
            cli = [sys.executable, "-m", "pgferry.cli", "drain_app:app", "--log-level", "WARNING"]
            proc = subprocess.Popen(cli, env=env, cwd=HERE / "apps")
            try:
                deadline = time.monotonic() + WAIT
                while len(_read_log(log)[1]) < 20:
                    assert proc.poll() is None, f"worker exited early with {proc.returncode}"
                    assert time.monotonic() < deadline, "worker did not complete 20 jobs"
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                rc = await asyncio.to_thread(proc.wait, WAIT)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert rc == 0, f"worker exit code {rc}"
            starts, ends = _read_log(log)
            # Every job the worker started it also finished within the grace period.
            assert sorted(starts) == sorted(ends)
            assert len(set(ends)) == len(ends), "a job ran twice in the draining worker"
            assert len(ends) < len(ids), "the worker finished everything before SIGTERM"

            # A second worker takes the rest; nothing waits for a lease to expire.
            rec = Recorder()
            app = pgferry.Worker(server.grpc_url, server.api_key, queues=[queue], concurrency=20)

            @app.job("work")
            async def work(ctx: pgferry.JobContext, n: int) -> None:
                await rec.add("ran", ctx, ctx.attempt)

            async with running(app):
                rest = ids - set(ends)
                await rec.wait_until(lambda: rest <= set(rec.ids("ran")), f"{len(rest)} remaining jobs")
            second = rec.ids("ran")
            assert not set(second) & set(ends), "a job finished by the drained worker ran again"
            assert len(second) == len(set(second))
            assert set(second) | set(ends) == ids

    asyncio.run(main())


def test_server_restart_mid_run_ledger_balances() -> None:
    srv = Server(data_dir("restart"))
    try:
        srv.start()
        asyncio.run(_restart_scenario(srv))
    finally:
        srv.cleanup()


async def _restart_scenario(srv: Server) -> None:
    queue = "restart_ledger"
    total = 600
    rec = Recorder()
    acked: set[int] = set()
    unknown = 0
    app = pgferry.Worker(srv.grpc_url, srv.api_key, queues=[queue], concurrency=20, reconnect_cap=1.0)

    @app.job("entry")
    async def entry(ctx: pgferry.JobContext, n: int) -> None:
        await asyncio.sleep(0.005)
        await rec.add("ran", ctx)

    async with pgferry.Client(srv.grpc_url, srv.api_key, connect_timeout=WAIT) as client, running(app):
        async def produce(lo: int, hi: int) -> None:
            nonlocal unknown
            for i in range(lo, hi):
                try:
                    acked.add((await client.enqueue("entry", {"n": i}, queue=queue)).id)
                except pgferry.Unavailable:
                    unknown += 1  # outcome unknown: may or may not have been committed

        producers = [asyncio.create_task(produce(k * 60, (k + 1) * 60)) for k in range(total // 60)]
        await rec.wait_until(lambda: len(rec.ids("ran")) >= 100, "100 jobs before the restart")
        await asyncio.to_thread(srv.restart)
        await asyncio.gather(*producers)
        await rec.wait_until(lambda: acked <= set(rec.ids("ran")), "every acknowledged job to run")

    ran = rec.ids("ran")
    assert len(acked) + unknown == total
    assert acked <= set(ran)
    # Jobs beyond the acknowledged ones can only be enqueues whose ack the restart ate.
    assert len(set(ran) - acked) <= unknown
    assert app.stats["reconnects"] >= 1, "the worker never saw the restart"
