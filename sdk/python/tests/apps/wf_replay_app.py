"""A code-first workflow whose step names depend on $WF_VERSION (2 renames a step), for the
replay test (`python -m pgferry.replay wf_replay_app:app --kind py_replayed`)."""

from __future__ import annotations

import os
from typing import Any

import pgferry

app = pgferry.App(default_queue=os.environ.get("WF_QUEUE", "default"))


@app.workflow("py_replayed")
async def replayed(ctx: pgferry.WorkflowContext, n: int) -> int:
    a = await ctx.step("reserve", lambda: n + 1)
    name = "charge_v2" if os.environ.get("WF_VERSION") == "2" else "charge"
    b: Any = await ctx.step(name, lambda: a + 1)
    await ctx.wait_for_signal("ship")
    return int(b)
