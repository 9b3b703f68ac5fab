"""The Python journal is the Rust runtime's: instances a Python worker ran are replayed by
`pgferry workflow replay` (the Rust code of the binary's built-in `example_order`) as
consistent, and a Python variant that renamed a step is reported as a divergence there."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from typing import Any

import pgferry
from helpers import WAIT, running
from server import Server, binary


def build(server: Server, queue: str, reserve: str) -> pgferry.App:
    """A Python twin of crates/pgferry-core/src/workflow/code/examples.rs's order."""
    app = pgferry.App(server.grpc_url, server.api_key, default_queue=queue)

    @app.workflow("example_shipping")
    async def shipping(ctx: pgferry.WorkflowContext, o: dict[str, Any]) -> str:
        return await ctx.step("label", lambda: f"TRACK-{o['order_id']}")

    @app.workflow("example_order")
    async def order(ctx: pgferry.WorkflowContext, o: dict[str, Any]) -> dict[str, Any]:
        await ctx.step(reserve, lambda: True)
        paid = await ctx.wait_for_signal(["paid"], timeout=o.get("payment_timeout_s", 3600))
        if paid is None:
            await ctx.step("release", lambda: None)
            return {"order_id": o["order_id"], "paid": False, "tracking": None}
        tracking = await ctx.child(shipping, o)
        return {"order_id": o["order_id"], "paid": True, "tracking": tracking}

    return app


def rust_replay(server: Server) -> tuple[int, dict[str, Any]]:
    lines = (server.data_dir / "server.log").read_text()
    m = re.findall(r"pgferry: embedded postgres (\S+)", lines)
    assert m, "pgferry dev prints its database URL"
    out = subprocess.run(
        [str(binary()), "workflow", "replay", "--kind", "example_order", "--database-url", m[-1]],
        capture_output=True, text=True, timeout=120,
    )
    return out.returncode, json.loads(out.stdout)


def test_rust_replays_python_journals(server: Server, queue: str) -> None:
    async def main() -> tuple[int, int]:
        app = build(server, queue, "reserve")
        async with app, running(app.worker(concurrency=4)):
            done = await app.start_workflow("example_order", {"order_id": "A1", "amount": 5})
            parked = await app.start_workflow("example_order", {"order_id": "A2", "amount": 7})
            expired = await app.start_workflow("example_order", {"order_id": "A3", "amount": 1, "payment_timeout_s": 0})
            await done.signal("paid", {"amount": 5})
            assert await done.result(timeout=WAIT) == {"order_id": "A1", "paid": True, "tracking": "TRACK-A1"}
            assert (await expired.result(timeout=WAIT))["paid"] is False
            for _ in range(400):
                if (await parked.describe()).status == "awaiting":
                    break
                await asyncio.sleep(0.05)
            assert (await parked.describe()).status == "awaiting"
        return done.id, parked.id

    asyncio.run(main())
    code, report = rust_replay(server)
    assert code == 0, report
    assert report["instances"] >= 3 and report["consistent"] == report["instances"], report

    async def diverge() -> None:
        app = build(server, queue, "reserve_v2")  # a renamed step, run by Python
        async with app, running(app.worker(concurrency=2)):
            h = await app.start_workflow("example_order", {"order_id": "B1", "amount": 3})
            for _ in range(400):
                if (await h.describe()).status == "awaiting":
                    break
                await asyncio.sleep(0.05)

    asyncio.run(diverge())
    code, report = rust_replay(server)
    assert code == 3, report
    (d,) = report["divergent"]
    assert d["position"] == 0 and "reserve_v2" in d["recorded"] and "reserve" in d["found"], d
