"""`python -m pgferry.bench --jobs 50000 --concurrency 200`: full cycle through the server
with a no-op async handler; prints one JSON object on stdout.

A job counts only when the server acknowledged its result (the completion committed).
Without --url, a private `pgferry dev` is started ($PGFERRY_BIN, else `pgferry` on PATH) in a
temporary directory and stopped afterwards."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

import pgferry


def _start_dev(binary: str, data_dir: str, extra: list[str] | None = None) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [binary, "dev", "--data-dir", data_dir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", *(extra or [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    url = key = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        if m := re.search(r"pgferry: listening grpc=(\S+)", line):
            url = m.group(1)
        if m := re.search(r"pgferry: dev api key=(\S+)", line):
            key = m.group(1)
        if url and key:
            return proc, url, key
    proc.wait()
    raise SystemExit(f"pgferry dev exited ({proc.returncode}) without printing its grpc address and key")


async def run(
    url: str, key: str, jobs: int, concurrency: int, batch: int, pipeline: int, preload: bool, api: str = "client"
) -> dict[str, Any]:
    """One full cycle. api "client": Client.enqueue_many + Worker with a raw handler;
    "tasks": the task API (App.task, enqueue_many of checked calls, the App's worker with
    automatic heartbeats) on the same no-op."""
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    enqueue_batch: Callable[[int], Awaitable[object]]
    if api == "tasks":
        tapp = pgferry.App(url, key, client_options={"timeout": 120})

        @tapp.task(name="noop", queue=queue)
        async def noop_task() -> None:
            return None

        app = tapp.worker(concurrency=concurrency, handle_signals=False)

        async def enqueue_tasks(n: int) -> object:
            return await noop_task.enqueue_many([noop_task.call() for _ in range(n)])

        enqueue_batch = enqueue_tasks
    else:
        tapp = None
        app = pgferry.Worker(url, key, queues=[queue], concurrency=concurrency, handle_signals=False)

        @app.job("noop")
        async def noop(ctx: pgferry.JobContext) -> None:
            return None

    done = asyncio.Event()
    acked0 = 0
    cpu0 = time.process_time()

    async with pgferry.Client(url, key, timeout=120) as client:
        await client.enqueue("warmup", None, queue=f"{queue}_warmup")
        if tapp is None:

            async def enqueue_raw(n: int) -> object:
                return await client.enqueue_many([pgferry.JobRequest("noop", None, queue=queue) for _ in range(n)])

            enqueue_batch = enqueue_raw
        sem = asyncio.Semaphore(pipeline)

        async def enqueue_all() -> float:
            t0 = time.perf_counter()

            async def one(n: int) -> None:
                async with sem:
                    await enqueue_batch(n)

            await asyncio.gather(*(one(min(batch, jobs - i)) for i in range(0, jobs, batch)))
            return time.perf_counter() - t0

        async def watch() -> None:
            while app.stats["acked"] - acked0 < jobs:
                await asyncio.sleep(0.005)
            done.set()

        enqueue_s: float
        if preload:
            enqueue_s = await enqueue_all()
        worker = asyncio.create_task(app.run_async())
        await app.wait_ready(60)
        t0 = time.perf_counter()
        watcher = asyncio.create_task(watch())
        if not preload:
            enqueue_s = await enqueue_all()
        await done.wait()
        elapsed = time.perf_counter() - t0
        watcher.cancel()
        app.stop()
        await worker
        if tapp is not None:
            await tapp.close()
    return {
        "bench": "python_cycle",
        "api": api,
        "mode": "preload" if preload else "cycle",
        "jobs": jobs,
        "concurrency": concurrency,
        "enqueue_batch": batch,
        "completed_jobs_per_s": round(jobs / elapsed, 1),
        "enqueue_jobs_per_s": round(jobs / enqueue_s, 1),
        "elapsed_s": round(elapsed, 3),
        # CPU of this Python process (producer and worker) per job: less sensitive to a
        # busy machine than jobs/s.
        "cpu_us_per_job": round((time.process_time() - cpu0) / jobs * 1e6, 1),
        "stale": app.stats["stale"],
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pgferry.bench", description=__doc__)
    p.add_argument("--url", default=os.environ.get("PGFERRY_URL"))
    p.add_argument("--api-key", default=os.environ.get("PGFERRY_API_KEY"))
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--batch", type=int, default=500, help="jobs per EnqueueBatch")
    p.add_argument("--pipeline", type=int, default=4, help="EnqueueBatches in flight")
    p.add_argument("--preload", action="store_true", help="enqueue everything before the worker starts")
    p.add_argument(
        "--tasks",
        action="store_true",
        help="compare with the same cycle through the task API (App.task): runs client, tasks, tasks, "
        "client and reports the means and their ratio",
    )
    p.add_argument(
        "--workflows",
        type=int,
        default=0,
        metavar="N",
        help="instead: N instances of a 3-step workflow, code-first and as a state machine "
        "(machine, code, code, machine); reports steps/s of each and their ratio",
    )
    p.add_argument(
        "--compare-rust",
        action="store_true",
        help="then run `pgferry bench cycle --via grpc` (32 producers, 128 slots) and report the ratio",
    )
    a = p.parse_args(argv)
    proc = None
    tmp = None
    url, key = a.url, a.api_key
    if not url:
        binary = os.environ.get("PGFERRY_BIN") or shutil.which("pgferry")
        if not binary:
            print("pgferry.bench: give --url/--api-key, or set PGFERRY_BIN", file=sys.stderr)
            return 2
        tmp = tempfile.mkdtemp(prefix="pgferry-bench-")
        # As root, pgferry runs its Postgres as `postgres`, which must be able to enter it.
        os.chmod(tmp, 0o755)
    try:
        if tmp is not None:
            # Workflows are started with one unary call each: above the key's default rate
            # limit (1,000 calls/s, which also covers gRPC unary calls).
            extra = ["--rate-limit", "1000000", "--rate-burst", "1000000"] if a.workflows else None
            proc, url, key = _start_dev(str(binary), tmp, extra)
        if not key:
            print("pgferry.bench: --api-key (or PGFERRY_API_KEY) is required with --url", file=sys.stderr)
            return 2
        def once(api: str) -> dict[str, Any]:
            return asyncio.run(run(url, key, a.jobs, a.concurrency, a.batch, a.pipeline, a.preload, api=api))

        if a.workflows:
            from pgferry._bench_workflows import run_workflows

            report = run_workflows(url, key, a.workflows, a.concurrency)
        elif not a.tasks:
            report = once("client")
        else:
            # Client, tasks, tasks, client on the same server: neither API always runs on
            # the fresher (or the more loaded) server. Figures are the means of two runs.
            runs = [once(api) for api in ("client", "tasks", "tasks", "client")]
            c, t = [runs[0], runs[3]], [runs[1], runs[2]]

            def mean(rs: list[dict[str, Any]], k: str) -> float:
                return round(sum(float(r[k]) for r in rs) / len(rs), 1)

            report = dict(runs[0])
            report["api"] = "client+tasks"
            report["runs"] = "client,tasks,tasks,client"
            for k in ("completed_jobs_per_s", "enqueue_jobs_per_s", "cpu_us_per_job"):
                report[k] = mean(c, k)
                report[f"tasks_{k}"] = mean(t, k)
            report["ratio_tasks_to_client"] = round(
                report["tasks_completed_jobs_per_s"] / report["completed_jobs_per_s"], 3
            )
            report["elapsed_s"] = round(sum(float(r["elapsed_s"]) for r in runs), 3)
        report["server"] = "pgferry dev (started by the bench)" if proc else url
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if a.compare_rust and not a.workflows:
        binary = os.environ.get("PGFERRY_BIN") or shutil.which("pgferry")
        if not binary:
            print("pgferry.bench: --compare-rust needs PGFERRY_BIN or pgferry on PATH", file=sys.stderr)
            return 2
        rust = _rust_grpc_cycle(binary)
        report["rust_grpc_jobs_per_s"] = round(float(rust["jobs_per_s"]), 1)
        report["ratio_python_to_rust_grpc"] = round(
            report["completed_jobs_per_s"] / float(rust["jobs_per_s"]), 3
        )
    print(json.dumps(report))
    return 0


def _rust_grpc_cycle(binary: str) -> dict[str, Any]:
    """The Rust reference in the same run: full cycle through a server over gRPC."""
    out = subprocess.run(
        [binary, "bench", "cycle", "--via", "grpc", "--producers", "32", "--worker-slots", "128",
         "--json", "--duration", "10", "--warmup", "2"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    parsed: dict[str, Any] = json.loads(out)
    return parsed


if __name__ == "__main__":
    sys.exit(main())
