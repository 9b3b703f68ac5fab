"""Code-first workflows and decorator state machines against the real server: journaled
steps run once, sleep and signal resume, children fan out and in, cancel mid-workflow,
non-determinism parks the instance until a fixed deploy retries it, typed handles."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pydantic
import pytest

import pgferry
from pgferry import workflows as wf
from helpers import WAIT, running
from server import Server


class Parcel(pydantic.BaseModel):
    sku: str
    qty: int


class Label(pydantic.BaseModel):
    text: str


class Receipt(pydantic.BaseModel):
    labels: list[Label]
    total: int


def make_app(server: Server, queue: str) -> pgferry.App:
    return pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url, default_queue=queue)


def test_three_steps_run_once_each_and_the_journal_is_the_state(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    runs: collections.Counter[str] = collections.Counter()

    @app.workflow("py_three")
    async def three(ctx: pgferry.WorkflowContext, n: int) -> dict[str, Any]:
        async def bump(name: str, v: int) -> int:
            runs[name] += 1
            return v + 1

        a = await ctx.step("a", lambda: bump("a", n))
        b = await ctx.step("b", lambda: bump("b", a))
        c = await ctx.step("c", lambda: bump("c", b))
        at = await ctx.now()
        r = await ctx.random()
        return {"c": c, "at": at.isoformat(), "r": r}

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            h = await three.start(10)
            out = await h.result(timeout=WAIT)
            assert out["c"] == 13
            assert 0 <= out["r"] < 1
            info = await h.describe()
            assert info.status == "done"
            # Every step ran exactly once, though the function was replayed per claim.
            assert runs == {"a": 1, "b": 1, "c": 1}
            # One claim per step: three outcomes (next, next, done), as the Rust runtime.
            assert [x.outcome for x in info.history] == ["next", "next", "done"]
            journal = info.state["journal"]
            assert [e["t"] for e in journal] == ["step", "step"]
            assert journal[0] == {"t": "step", "name": "a", "ok": 11}

    asyncio.run(main())


def test_sleep_and_signal_with_timeout_resume(server: Server, queue: str) -> None:
    app = make_app(server, queue)

    @app.workflow("py_order")
    async def order(ctx: pgferry.WorkflowContext, o: dict[str, Any]) -> dict[str, Any]:
        await ctx.sleep(0.2)
        paid = await ctx.wait_for_signal(["paid"], timeout=o["timeout"])
        return {"paid": None if paid is None else paid.payload}

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            h = await order.start({"timeout": 60}, correlation_key="o-1")
            again = await order.start({"timeout": 60}, correlation_key="o-1")
            assert again.id == h.id and again.duplicate
            # Parked on the signal: status awaiting, no slot held.
            for _ in range(400):
                info = await h.describe()
                if info.status == "awaiting":
                    break
                await asyncio.sleep(0.05)
            assert info.status == "awaiting" and info.awaits == ["paid"]
            assert await h.signal("paid", {"amount": 30}) is True
            assert await h.result(timeout=WAIT) == {"paid": {"amount": 30}}
            # A timeout resumes with None.
            h2 = await order.start({"timeout": 0.3})
            assert await h2.result(timeout=WAIT) == {"paid": None}
            # A signal that arrives before the wait is kept in the inbox and consumed.
            h3 = await order.start({"timeout": 60})
            await app._workflow_client().signal_workflow("paid", 7, id=h3.id)
            assert await h3.result(timeout=WAIT) == {"paid": 7}

    asyncio.run(main())


def test_children_fan_out_and_in_and_a_failed_child_is_delivered(server: Server, queue: str) -> None:
    app = make_app(server, queue)

    @app.workflow("py_pack")
    async def pack(ctx: pgferry.WorkflowContext, item: int) -> int:
        if item < 0:
            raise ValueError("negative item")
        return await ctx.step("pack", lambda: item * 10)

    @app.workflow("py_ship")
    async def ship(ctx: pgferry.WorkflowContext, items: list[int]) -> dict[str, Any]:
        results = await ctx.fan_out(pack, items)
        one = await ctx.child(pack, 5)
        return {
            "packed": [r if not isinstance(r, pgferry.ChildError) else r.status for r in results],
            "one": one,
        }

    async def main() -> None:
        async with app, running(app.worker(concurrency=8)):
            h = await ship.start([1, 2, -1])
            assert await h.result(timeout=WAIT) == {"packed": [10, 20, "failed"], "one": 50}

    asyncio.run(main())


def test_cancel_mid_workflow_stops_it_and_result_raises(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    ran: list[str] = []

    @app.workflow("py_cancel")
    async def slow(ctx: pgferry.WorkflowContext, _: None) -> str:
        await ctx.step("first", lambda: ran.append("first"))
        await ctx.wait_for_signal("go")
        await ctx.step("after", lambda: ran.append("after"))
        return "done"

    async def main() -> None:
        async with app, running(app.worker(concurrency=2)):
            h = await slow.start(None)
            for _ in range(400):
                if (await h.describe()).status == "awaiting":
                    break
                await asyncio.sleep(0.05)
            info = await h.cancel("changed my mind")
            assert info.status == "cancelled"
            with pytest.raises(pgferry.WorkflowCancelled):
                await h.result(timeout=WAIT)
            await asyncio.sleep(0.3)
            assert ran == ["first"]

    asyncio.run(main())


def test_non_determinism_parks_the_instance_until_a_fixed_deploy_retries_it(server: Server, queue: str) -> None:
    runs: collections.Counter[str] = collections.Counter()

    def build(version: int) -> tuple[pgferry.App, pgferry.Workflow[None, str]]:
        app = make_app(server, queue)

        @app.workflow("py_versioned")
        async def versioned(ctx: pgferry.WorkflowContext, _: None) -> str:
            await ctx.step("reserve", lambda: runs.update(["reserve"]))
            if version == 2:
                await ctx.step("charge_v2", lambda: runs.update(["charge_v2"]))  # renamed: diverges
            else:
                await ctx.step("charge", lambda: runs.update(["charge"]))
            await ctx.wait_for_signal("ship")
            return f"v{version}"

        return app, versioned

    async def main() -> None:
        app1, v1 = build(1)
        async with app1, running(app1.worker(concurrency=2)):
            h = await v1.start(None)
            for _ in range(400):
                if (await h.describe()).status == "awaiting":
                    break
                await asyncio.sleep(0.05)
        assert runs == {"reserve": 1, "charge": 1}
        app2, v2 = build(2)
        async with app2, running(app2.worker(concurrency=2)):
            await v2.handle(h.id).signal("ship")
            with pytest.raises(pgferry.NonDeterminismError) as e:
                await v2.handle(h.id).result(timeout=WAIT)
            assert "journal position 1" in e.value.error and "charge_v2" in e.value.error
        assert runs["charge_v2"] == 0  # nothing ran on the diverged code
        app3, v3 = build(1)  # the fixed deploy
        async with app3, running(app3.worker(concurrency=2)):
            await v3.handle(h.id).retry()
            assert await v3.handle(h.id).result(timeout=WAIT) == "v1"
        assert runs == {"reserve": 1, "charge": 1}

    asyncio.run(main())


def test_step_retries_then_records_the_error(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    tries: list[int] = []

    @app.workflow("py_flaky")
    async def flaky(ctx: pgferry.WorkflowContext, fail_times: int) -> str:
        def attempt() -> str:
            tries.append(1)
            if len(tries) <= fail_times:
                raise RuntimeError(f"boom {len(tries)}")
            return "ok"

        try:
            return await ctx.step("flaky", attempt, retries=2, backoff=0.05)
        except pgferry.StepError as e:
            return f"gave up: {e.message}"

    async def main() -> None:
        async with app, running(app.worker(concurrency=2)):
            assert await (await flaky.start(1)).result(timeout=WAIT) == "ok"
            tries.clear()
            assert await (await flaky.start(10)).result(timeout=WAIT) == "gave up: boom 3"
            assert len(tries) == 3

    asyncio.run(main())


def test_state_machine_decorators(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    refund = app.machine("py_refund", inbox=True, children=True)
    part = app.machine("py_part")

    @part.step("start")
    async def part_start(s: pgferry.ClaimedStep) -> wf.Outcome:
        return wf.Done(s.input * 2)

    @refund.step("start")
    async def start(s: pgferry.ClaimedStep) -> wf.Outcome:
        return wf.Next("split", state={"amount": s.input["amount"]})

    @refund.step("split")
    async def split(s: pgferry.ClaimedStep) -> wf.Outcome:
        return wf.Spawn([part.child(1), part.child(2)], step="approve")

    @refund.step("approve")
    async def approve(s: pgferry.ClaimedStep) -> wf.Outcome:
        parts = sorted(c["result"] for c in s.children or [])
        return wf.Await(["approved"], step="pay", timeout=60, state={**s.state, "parts": parts})

    @refund.step("pay")
    async def pay(s: pgferry.ClaimedStep) -> wf.Outcome:
        if s.timed_out:
            return wf.Fail("not approved")
        return wf.Done({"amount": s.state["amount"], "parts": s.state["parts"], "by": (s.inbox or [{}])[0].get("payload")})

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            h = await refund.start({"amount": 12})
            for _ in range(400):
                if (await h.describe()).status == "awaiting":
                    break
                await asyncio.sleep(0.05)
            await h.signal("approved", "ann")
            assert await h.result(timeout=WAIT) == {"amount": 12, "parts": [2, 4], "by": "ann"}

    asyncio.run(main())


def test_a_worker_killed_mid_step_replays_without_running_journaled_steps_again(server: Server, queue: str, tmp_path: Any) -> None:
    import os
    import pathlib
    import signal
    import subprocess
    import sys

    counts = tmp_path / "counts"
    counts.write_text("")
    app_path = pathlib.Path(__file__).parent / "apps" / "wf_crash_app.py"

    def spawn(hang: bool) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PGFERRY_URL=server.grpc_url, PGFERRY_API_KEY=server.api_key,
                   WF_QUEUE=queue, WF_COUNTS=str(counts), WF_HANG="1" if hang else "0")
        return subprocess.Popen([sys.executable, str(app_path)], env=env)

    def runs() -> list[str]:
        return counts.read_text().split()

    async def main() -> None:
        app = make_app(server, queue)
        async with app:
            h = await app.start_workflow("py_crash", None)
            first = spawn(hang=True)
            try:
                for _ in range(1200):
                    if runs() == ["a", "b"]:
                        break
                    await asyncio.sleep(0.05)
                assert runs() == ["a", "b"], runs()
                # Killed in the middle of step b: a is journaled, b is in flight.
                first.send_signal(signal.SIGKILL)
                first.wait(30)
            finally:
                if first.poll() is None:
                    first.kill()
            second = spawn(hang=False)
            try:
                out = await h.result(timeout=WAIT)
            finally:
                second.terminate()
                second.wait(30)
            assert out == ["a", "b", "c"]
            # a ran once (journaled before the kill); b, in flight, ran exactly once more.
            assert collections.Counter(runs()) == {"a": 1, "b": 2, "c": 1}
            info = await h.describe()
            assert any(x.attempt == 2 for x in info.history), info.history

    asyncio.run(main())


def test_replay_finds_a_deliberate_divergence_without_running_anything(server: Server, queue: str, monkeypatch: Any) -> None:
    import os
    import pathlib
    import subprocess
    import sys

    import pgferry.replay

    apps = pathlib.Path(__file__).parent / "apps"
    monkeypatch.syspath_prepend(str(apps))
    monkeypatch.setenv("WF_QUEUE", queue)
    monkeypatch.setenv("WF_VERSION", "1")
    import importlib

    mod = importlib.import_module("wf_replay_app")
    mod.app.url, mod.app.api_key = server.grpc_url, server.api_key
    ran: list[int] = []

    async def main() -> None:
        async with mod.app, running(mod.app.worker(concurrency=2)):
            hs = [await mod.replayed.start(i) for i in range(3)]
            for h in hs:
                for _ in range(400):
                    if (await h.describe()).status == "awaiting":
                        break
                    await asyncio.sleep(0.05)
        # The same code: every record is followed.
        report = await pgferry.replay.replay_kind(mod.replayed)
        assert report.ok and report.instances == 3 and report.consistent == 3, report
        # A step renamed: every instance diverges at position 1, and nothing ran.
        monkeypatch.setenv("WF_VERSION", "2")
        real = mod.replayed.fn

        async def counting(ctx: pgferry.WorkflowContext, n: int) -> int:
            ran.append(n)
            return await real(ctx, n)

        mod.replayed.fn = counting
        report = await pgferry.replay.replay_kind(mod.replayed)
        mod.replayed.fn = real
        assert not report.ok and report.instances == 3 and len(report.divergent) == 3, report
        d = report.divergent[0]
        assert d["verdict"] == "diverged" and d["position"] == 1
        assert d["recorded"] == 'step "charge"' and d["found"] == 'step "charge_v2"'
        async with mod.app:
            for h in hs:
                # Nothing was written: still awaiting, the journal as it was.
                info = await mod.replayed.handle(h.id).describe()
                assert info.status == "awaiting" and [e["name"] for e in info.state["journal"][:2]] == ["reserve", "charge"]

    asyncio.run(main())
    assert len(ran) == 3
    env = dict(os.environ, PGFERRY_URL=server.grpc_url, PGFERRY_API_KEY=server.api_key, WF_QUEUE=queue,
               WF_VERSION="2", PYTHONPATH=str(apps))
    out = subprocess.run([sys.executable, "-m", "pgferry.replay", "wf_replay_app:app", "--kind", "py_replayed"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr
    import json

    assert json.loads(out.stdout)["divergent"][0]["found"] == 'step "charge_v2"'
    env["WF_VERSION"] = "1"
    out = subprocess.run([sys.executable, "-m", "pgferry.replay", "wf_replay_app:app", "--kind", "py_replayed"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_one_worker_runs_tasks_and_workflows_together(server: Server, queue: str) -> None:
    app = make_app(server, queue)

    @app.task(queue=queue)
    async def price(item: str) -> int:
        return len(item) * 100

    @app.workflow("py_quote")
    async def quote(ctx: pgferry.WorkflowContext, items: list[str]) -> int:
        # A step that enqueues a task and awaits its result: the same worker runs both.
        prices = [await ctx.step(f"price:{i}", lambda i=i: price.run(i)) for i in items]  # type: ignore[misc]
        return sum(prices)

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)) as _:
            h = await quote.start(["ab", "cde"])
            assert await h.result(timeout=WAIT) == 500
            info = await h.describe()
            assert [e["name"] for e in info.state["journal"]] == ["price:ab"]  # the last is in no state: done wrote the result

    asyncio.run(main())


def test_the_workflow_worker_reconnects_across_a_server_restart(tmp_path: Any) -> None:
    from server import data_dir

    srv = Server(data_dir("wf-restart"))
    srv.start()
    runs: collections.Counter[str] = collections.Counter()
    try:
        app = make_app(srv, "restart_q")

        @app.workflow("py_restart")
        async def flow(ctx: pgferry.WorkflowContext, _: None) -> str:
            await ctx.step("before", lambda: runs.update(["before"]))
            sig = await ctx.wait_for_signal("go")
            await ctx.step("after", lambda: runs.update(["after"]))
            return str(sig.payload if sig else None)

        async def main() -> None:
            worker = app.worker(concurrency=2)
            async with running(worker):
                h = await flow.start(None)
                for _ in range(400):
                    if (await h.describe()).status == "awaiting":
                        break
                    await asyncio.sleep(0.05)
                await asyncio.to_thread(srv.restart)
                # The admin client and the worker's stream both reconnect on their own.
                for _ in range(200):
                    try:
                        await h.signal("go", "again")
                        break
                    except pgferry.Unavailable:
                        await asyncio.sleep(0.1)
                assert await h.result(timeout=WAIT) == "again"
                assert worker._companion.stats["reconnects"] >= 1
            assert runs == {"before": 1, "after": 1}

        asyncio.run(main())
    finally:
        srv.cleanup()


def test_cancel_reaches_a_step_that_is_running(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    events: list[str] = []

    @app.workflow("py_cancel_running")
    async def long(ctx: pgferry.WorkflowContext, _: None) -> str:
        async def forever() -> None:
            events.append("started")
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                events.append("cancelled")
                raise

        await ctx.step("forever", forever)
        return "never"

    async def main() -> None:
        # A long lease: heartbeats (every third of it) must not be what stops the step.
        worker = app.worker(concurrency=2, lease_ms=600_000)
        async with app, running(worker):
            h = await long.start(None)
            for _ in range(400):
                if events:
                    break
                await asyncio.sleep(0.05)
            assert events == ["started"]
            await h.cancel("stop it")
            for _ in range(400):
                if "cancelled" in events:
                    break
                await asyncio.sleep(0.05)
            # The server's StepCancel cancelled the step's task: nothing runs on.
            assert events == ["started", "cancelled"]
            assert worker._companion.in_flight == 0
            with pytest.raises(pgferry.WorkflowCancelled):
                await h.result(timeout=WAIT)

    asyncio.run(main())


def test_pydantic_models_as_input_result_and_child_result(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    seen: list[Any] = []

    @app.workflow("py_label")
    async def label(ctx: pgferry.WorkflowContext, p: Parcel) -> Label:
        seen.append(type(p))
        return Label(text=f"{p.qty}x{p.sku}")

    @app.workflow("py_receipt")
    async def receipt(ctx: pgferry.WorkflowContext, ps: list[Parcel]) -> Receipt:
        total = await ctx.step("total", lambda: sum(p["qty"] for p in ps))  # type: ignore[index]
        first = await ctx.child(label, Parcel(sku="a", qty=1))
        seen.append(type(first))
        return Receipt(labels=[first], total=total)

    async def main() -> None:
        async with app, running(app.worker(concurrency=4)):
            h = await label.start(Parcel(sku="b", qty=3))
            out = await h.result(timeout=WAIT)
            assert out == Label(text="3xb")
            h2 = await receipt.start([{"sku": "x", "qty": 2}, {"sku": "y", "qty": 5}])  # type: ignore[list-item]
            r = await h2.result(timeout=WAIT)
            assert r == Receipt(labels=[Label(text="1xa")], total=7)
        assert seen == [Parcel, Parcel, Label]

    asyncio.run(main())


@pytest.mark.parametrize("with_task", [False, True])
def test_a_bad_key_stops_the_worker_with_auth_error(server: Server, queue: str, with_task: bool) -> None:
    app = pgferry.App(server.grpc_url, "pgf_0000_not_a_key", default_queue=queue)

    @app.workflow("py_badkey")
    async def nothing(ctx: pgferry.WorkflowContext, _: None) -> None:
        return None

    if with_task:

        @app.task(queue=queue)
        async def t() -> None: ...

    async def main() -> None:
        w = app.worker()
        w.handle_signals = False
        await asyncio.wait_for(w.run_async(), WAIT)

    with pytest.raises(pgferry.AuthError):
        asyncio.run(main())


def test_heartbeats_keep_a_step_longer_than_its_lease(server: Server, queue: str) -> None:
    app = make_app(server, queue)
    runs: list[int] = []

    @app.workflow("py_long_step")
    async def long(ctx: pgferry.WorkflowContext, _: None) -> str:
        async def slow() -> str:
            runs.append(1)
            await asyncio.sleep(3.5)  # 3.5 leases of 1 s
            return "ok"

        return await ctx.step("slow", slow)

    async def main() -> None:
        async with app, running(app.worker(concurrency=2, lease_ms=1000)):
            h = await long.start(None)
            assert await h.result(timeout=WAIT) == "ok"
            info = await h.describe()
        # Not claimed again while it ran: one run, attempt 1, no stale outcome.
        assert runs == [1]
        assert [x.attempt for x in info.history] == [1]

    asyncio.run(main())
