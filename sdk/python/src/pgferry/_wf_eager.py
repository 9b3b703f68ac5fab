"""Workflows in memory, for application tests without a server (`with app.eager():`).

The same step runners as the real worker (the code-first driver with its journal, the
state-machine handlers) run against a small in-memory stand-in of the engine's outcomes:
next, retry, sleep, await, spawn, done and fail, with signals (an inbox, consumed once),
children (join all or any, failures delivered or failing the parent), cancel and retry.

Differences from the server, on purpose: sleeps and retry delays are skipped (the instance
runs on at once), so a test does not wait for them; await timeouts run in real time (a test
that wants the timeout path passes a short one). Nothing is durable and nothing crashes."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pgferry._journal import ChildSpec
from pgferry._wf_worker import ClaimedStep, KindEntry
from pgferry.errors import Conflict, NotFound

if TYPE_CHECKING:
    from pgferry.workflows import WorkflowHandle, WorkflowInfo

_ENDED = ("done", "failed", "cancelled")


@dataclass
class _Instance:
    id: int
    kind: str
    queue: str
    step: str
    input: Any
    state: Any
    max_attempts: int
    correlation_key: str = ""
    parent_id: int | None = None
    status: str = "runnable"
    attempt: int = 1
    seq: int = 0
    result: Any = None
    error: str = ""
    awaits: list[str] = field(default_factory=list)
    inbox: list[dict[str, Any]] = field(default_factory=list)
    wake: str = ""
    consumed: list[dict[str, Any]] | None = None
    # The current spawn: child ids, join, failure policy; ends as they arrive.
    children: list[int] = field(default_factory=list)
    join_any: bool = False
    deliver: bool = True
    child_ends: list[dict[str, Any]] | None = None
    timer: asyncio.TimerHandle | None = None
    history: list[tuple[int, str, int, str, str]] = field(default_factory=list)
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime | None = None


class EagerWorkflows:
    """The WorkflowCalls of an App in eager mode (duck-typed: handles call these)."""

    def __init__(self, kinds: dict[str, KindEntry], default_queue: str) -> None:
        self.kinds = kinds
        self.default_queue = default_queue
        self.instances: dict[int, _Instance] = {}
        self._ids = itertools.count(1)
        self._signals = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the WorkflowCalls API -------------------------------------------------------------

    async def start_workflow(
        self,
        kind: str,
        input: Any = None,
        *,
        queue: str | None = None,
        step: str | None = None,
        state: Any = None,
        correlation_key: str | None = None,
        max_attempts: int | None = None,
        **_: Any,
    ) -> WorkflowHandle[Any]:
        from pgferry.workflows import WorkflowHandle

        q = queue or self.default_queue
        if correlation_key:
            for i in self.instances.values():
                if i.queue == q and i.correlation_key == correlation_key and i.status not in _ENDED:
                    return WorkflowHandle(self, i.id, duplicate=True)
        inst = self._new(kind, q, step or "start", _roundtrip(input), state, max_attempts, None)
        inst.correlation_key = correlation_key or ""
        self._schedule(inst)
        return WorkflowHandle(self, inst.id)

    async def get_workflow(self, id: int) -> WorkflowInfo:
        from pgferry.workflows import StepRecord, WorkflowInfo

        i = self._get(id)
        await asyncio.sleep(0)  # let runnable instances make progress between polls
        return WorkflowInfo(
            id=i.id, kind=i.kind, queue=i.queue, step=i.step, status=i.status, state=i.state, input=i.input,
            result=i.result, error=i.error, attempt=i.attempt, awaits=list(i.awaits), parent_id=i.parent_id,
            children_pending=sum(1 for c in i.children if self.instances[c].status not in _ENDED),
            correlation_key=i.correlation_key, created_at=i.created_at, finished_at=i.finished_at,
            history=[StepRecord(*h, worker="eager") for h in i.history],
        )

    async def signal_workflow(
        self, name: str, payload: Any = None, *, id: int | None = None, queue: str | None = None, correlation_key: str | None = None
    ) -> bool:
        if id is not None:
            inst = self._get(id)
        else:
            q = queue or self.default_queue
            found = [i for i in self.instances.values() if i.queue == q and i.correlation_key == correlation_key and i.status not in _ENDED]
            if not found:
                raise NotFound(f"no active workflow with correlation key {correlation_key!r} in queue {q!r}")
            inst = found[-1]
        if inst.status in _ENDED:
            raise Conflict(f"workflow {inst.id} has ended ({inst.status})")
        inst.inbox.append({"signal_id": next(self._signals), "name": name, "payload": _roundtrip(payload)})
        if inst.status == "awaiting" and name in inst.awaits:
            self._consume(inst, "signal")
            return True
        return False

    async def cancel_workflow(self, id: int, reason: str = "") -> WorkflowInfo:
        inst = self._get(id)
        if inst.status not in _ENDED:
            self._end(inst, "cancelled", error=reason or "cancelled")
        return await self.get_workflow(id)

    async def retry_workflow(self, id: int) -> str:
        inst = self._get(id)
        if inst.status != "failed":
            raise Conflict(f"workflow {id} is {inst.status}, not failed")
        inst.status, inst.attempt, inst.error, inst.finished_at, inst.wake = "runnable", 1, "", None, ""
        self._schedule(inst)
        return inst.step

    async def list_workflows(self, *, queue: str | None = None, kind: str = "", **_: Any) -> tuple[list[int], int | None]:
        q = queue or self.default_queue
        ids = [i.id for i in self.instances.values() if i.queue == q and (not kind or i.kind == kind)]
        return sorted(ids, reverse=True), None

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- the engine --------------------------------------------------------------------------

    def _get(self, id: int) -> _Instance:
        inst = self.instances.get(int(id))
        if inst is None:
            raise NotFound(f"no workflow {id}")
        return inst

    def _new(self, kind: str, queue: str, step: str, input: Any, state: Any, max_attempts: int | None, parent: int | None) -> _Instance:
        inst = _Instance(
            id=next(self._ids), kind=kind, queue=queue, step=step, input=input,
            state=_roundtrip(state) if state is not None else {}, max_attempts=max_attempts or 25, parent_id=parent,
        )
        self.instances[inst.id] = inst
        return inst

    def _schedule(self, inst: _Instance) -> None:
        t = asyncio.get_running_loop().create_task(self._drive(inst))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _drive(self, inst: _Instance) -> None:
        await asyncio.sleep(0)  # start() returns first, as it does against a server
        while inst.status == "runnable":
            entry = self.kinds.get(inst.kind)
            inst.seq += 1
            seq = inst.seq
            inst.status = "running"
            step = ClaimedStep(
                id=inst.id, seq=seq, queue=inst.queue, kind=inst.kind, step=inst.step, state=_roundtrip(inst.state),
                input=_roundtrip(inst.input), attempt=inst.attempt, max_attempts=inst.max_attempts, wake=inst.wake,
                parent_id=inst.parent_id,
                inbox=inst.consumed if entry is not None and entry.inbox and inst.wake == "signal" else None,
                children=inst.child_ends if entry is not None and entry.children and inst.wake == "children" else None,
            )
            if entry is None:
                out: dict[str, Any] = {"outcome": "fail", "reason": f"no workflow registered for kind {inst.kind!r}"}
            else:
                out = await entry.run(step)
            if inst.status != "running" or inst.seq != seq:
                return  # cancelled meanwhile: the outcome is stale
            if not self._apply(inst, out):
                return

    def _apply(self, inst: _Instance, o: dict[str, Any]) -> bool:
        """Records an outcome; True: the instance runs on in this drive (next, sleep,
        retry), else it parked, ended, or was handed to a drive of its own."""
        kind = o["outcome"]
        inst.history.append((inst.seq, inst.step, inst.attempt, kind, str(o.get("reason") or "")))
        if o.get("state") is not None:
            inst.state = json.loads(o["state"])
        inst.wake, inst.consumed = "", None
        if kind != "retry":
            inst.attempt = 1
        if kind in ("next", "sleep"):  # sleeps are skipped in eager mode
            inst.step, inst.status = o["step"], "runnable"
        elif kind == "retry":
            inst.attempt += 1
            inst.status = "runnable"
            if inst.attempt > inst.max_attempts:
                self._end(inst, "failed", error=f"{o.get('reason') or 'retry'} (attempt {inst.attempt - 1} of {inst.max_attempts})")
        elif kind == "await":
            inst.step, inst.awaits, inst.status = o["step"], list(o["signals"]), "awaiting"
            if any(s["name"] in inst.awaits for s in inst.inbox):
                self._consume(inst, "signal")
            elif o.get("timeout_ms") is not None:
                seq = inst.seq
                inst.timer = asyncio.get_running_loop().call_later(
                    o["timeout_ms"] / 1000, lambda: self._timed_out(inst, seq)
                )
        elif kind == "spawn":
            inst.step, inst.status = o["step"], "waiting_children"
            inst.join_any = o.get("join") == "any"
            inst.deliver = o.get("on_child_failure") == "deliver"
            inst.child_ends = []
            inst.children = []
            for c in o["children"]:
                spec = c if isinstance(c, ChildSpec) else ChildSpec(**c)
                child = self._new(spec.kind, spec.queue or inst.queue, spec.step or "start", _roundtrip(spec.input), None,
                                  spec.max_attempts, inst.id)
                inst.children.append(child.id)
                self._schedule(child)
        elif kind == "done":
            self._end(inst, "done", result=json.loads(o.get("result") or "null"))
        else:
            self._end(inst, "failed", error=str(o.get("reason") or "failed"))
        return kind in ("next", "sleep", "retry") and inst.status == "runnable"

    def _consume(self, inst: _Instance, wake: str) -> None:
        got = next(s for s in inst.inbox if s["name"] in inst.awaits)
        inst.inbox.remove(got)
        self._resume(inst, wake, consumed=[got])

    def _timed_out(self, inst: _Instance, seq: int) -> None:
        if inst.status == "awaiting" and inst.seq == seq:
            self._resume(inst, "timeout", consumed=None)

    def _resume(self, inst: _Instance, wake: str, consumed: list[dict[str, Any]] | None) -> None:
        if inst.timer is not None:
            inst.timer.cancel()
            inst.timer = None
        inst.awaits, inst.wake, inst.consumed, inst.status = [], wake, consumed, "runnable"
        self._schedule(inst)

    def _end(self, inst: _Instance, status: str, *, result: Any = None, error: str = "") -> None:
        if inst.timer is not None:
            inst.timer.cancel()
            inst.timer = None
        inst.status, inst.result, inst.error = status, result, error
        inst.finished_at = datetime.now(timezone.utc)
        for c in inst.children:  # cancel cascades to descendants
            child = self.instances[c]
            if child.status not in _ENDED:
                self._end(child, "cancelled", error=f"parent {inst.id} ended {status}")
        if inst.parent_id is None:
            return
        parent = self.instances[inst.parent_id]
        if parent.status != "waiting_children" or inst.id not in parent.children or parent.child_ends is None:
            return
        parent.child_ends.append({"id": inst.id, "kind": inst.kind, "status": status, "result": result, "error": error or None})
        if status != "done" and not parent.deliver:
            self._end(parent, "failed", error=f"child {inst.id} ({inst.kind}) ended {status}: {error}")
            return
        pending = [self.instances[c] for c in parent.children if self.instances[c].status not in _ENDED]
        if parent.join_any or not pending:
            parent.wake, parent.status = "children", "runnable"  # first: the siblings' ends below are not joins
            for sib in pending:
                self._end(sib, "cancelled", error="another child ended first")
                parent.child_ends.append({"id": sib.id, "kind": sib.kind, "status": "cancelled", "result": None, "error": sib.error})
            self._schedule(parent)


def _roundtrip(v: Any) -> Any:
    """What the value is after a trip through the server (JSON)."""
    return json.loads(json.dumps(v))
