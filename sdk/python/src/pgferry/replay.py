"""Replaying recorded instances of a code-first kind against the current code, without side
effects (no step runs, nothing is written): the check Temporal users run in CI before a
deploy, and the Python twin of `pgferry workflow replay` / `code::replay_kind`.

    python -m pgferry.replay module:app --kind order [--limit 1000]

prints the report as JSON and exits with status 3 when an instance diverges. From a test:

    report = await pgferry.replay.replay_kind(order, limit=1000)
    assert report.ok, report
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pgferry._journal import WorkflowContext, run
from pgferry.workflows import Workflow


@dataclass
class ReplayReport:
    kind: str
    instances: int = 0
    consistent: int = 0
    # Per divergent (or unreadable) instance: id, status, verdict, and position / recorded /
    # found (diverged) or reason (unreadable).
    divergent: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.divergent


async def replay_one(workflow: Workflow[Any, Any], id: int, input: Any, state: Any) -> dict[str, Any]:
    """The verdict for one recorded instance: consistent, diverged or unreadable."""
    journal = state.get("journal") if isinstance(state, dict) else None
    if journal is not None and not isinstance(journal, list):
        return {"verdict": "unreadable", "reason": "journal: not a list"}
    ctx = WorkflowContext(id, list(journal or []), replay=True)
    try:
        ending = await asyncio.wait_for(run(ctx, workflow._body, input), 10)
    except asyncio.TimeoutError:
        return {"verdict": "unreadable", "reason": "the code did not reach its next context call within 10 s"}
    s = ending.suspend
    if s is not None and s.divergence is not None:
        return {"verdict": "diverged", **dataclasses.asdict(s.divergence)}
    if s is None:
        d = ctx.unconsumed()
        if d is not None:
            return {"verdict": "diverged", **dataclasses.asdict(d)}
    return {"verdict": "consistent", "replayed": ctx.pos, "recorded": len(ctx.journal), "returned": s is None}


async def replay_kind(workflow: Workflow[Any, Any], *, queue: str | None = None, limit: int = 1000) -> ReplayReport:
    """Replays the newest `limit` instances of the workflow's kind (any status) in its
    queue against the current code."""
    client = workflow.app._workflow_client()
    report = ReplayReport(workflow.kind)
    before = 0
    while report.instances < limit:
        ids, nxt = await client.list_workflows(
            queue=queue or workflow.queue, kind=workflow.kind, before=before, limit=min(500, limit - report.instances)
        )
        for id in ids:
            info = await client.get_workflow(id)
            v = await replay_one(workflow, id, info.input, info.state)
            report.instances += 1
            if v["verdict"] == "consistent":
                report.consistent += 1
            else:
                report.divergent.append({"id": id, "status": info.status, **v})
        if nxt is None:
            break
        before = nxt
    return report


def main(argv: Sequence[str] | None = None) -> int:
    from pgferry.cli import load_app

    p = argparse.ArgumentParser(prog="python -m pgferry.replay", description=__doc__)
    p.add_argument("app", help="module:attribute of a pgferry.App")
    p.add_argument("--kind", required=True)
    p.add_argument("--queue", default=None, help="default: the workflow's queue")
    p.add_argument("--limit", type=int, default=1000)
    p.add_argument("--url", default=os.environ.get("PGFERRY_URL"))
    p.add_argument("--api-key", default=os.environ.get("PGFERRY_API_KEY"))
    a = p.parse_args(argv)
    app = load_app(a.app)
    wf = getattr(app, "workflows", {}).get(a.kind)
    if not isinstance(wf, Workflow):
        print(f"pgferry.replay: {a.app} has no code-first workflow {a.kind!r}", file=sys.stderr)
        return 2
    if a.url:
        wf.app.url = a.url
    if a.api_key:
        wf.app.api_key = a.api_key

    async def go() -> ReplayReport:
        async with wf.app:
            return await replay_kind(wf, queue=a.queue, limit=a.limit)

    report = asyncio.run(go())
    print(json.dumps({**dataclasses.asdict(report), "ok": report.ok}))
    return 0 if report.ok else 3


if __name__ == "__main__":
    sys.exit(main())
