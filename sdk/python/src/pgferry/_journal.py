"""Code-first workflows: the context a workflow function receives, and the driver that runs
one claim of an instance and turns where the function stopped into one engine outcome.

The journal format is the Rust runtime's (crates/pgferry-core/src/workflow/code/journal.rs):
the instance's state is `{"journal": [entry, ...]}`, each entry tagged by `t` (`step`,
`sleep`, `signal`, `children`, `now`, `random`, `patch`). A Python worker and a Rust worker
can therefore replay each other's instances of a kind.

Each context call takes the next journal position. A recorded position returns its record
without running anything; a new one runs (a step) or suspends the function (sleep, signal,
children). A suspension is raised as `_Suspended`, a BaseException, so `except Exception`
in user code does not swallow it; and it is recorded on the context first, so even code
that swallows it cannot turn a suspension into a return (the driver checks the context)."""

from __future__ import annotations

import inspect
import json
import random as _random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

T = TypeVar("T")

ENGINE_STEP = "start"
"""The one engine step of a code-first kind."""
NONDETERMINISM = "non-determinism:"
"""How the error of an instance parked by a divergence starts."""


class StepError(Exception):
    """A step that ended with an error after its retries (journaled: a replay raises the
    same)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"step {step!r} failed: {message}")
        self.step = step
        self.message = message


class ChildError(Exception):
    """A child workflow that ended failed or cancelled (or whose result is missing)."""

    def __init__(self, id: int, kind: str, status: str, error: str) -> None:
        super().__init__(f"child {id} ({kind}) ended {status}: {error}")
        self.id = id
        self.kind = kind
        self.status = status
        self.error = error


@dataclass(frozen=True)
class Signal:
    """A signal as a workflow receives it."""

    signal_id: int
    name: str
    payload: Any


@dataclass(frozen=True)
class ChildSpec:
    """A child to start: its kind and input (and optionally first step, queue, keys)."""

    kind: str
    input: Any = None
    step: str | None = None
    queue: str | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    priority: int | None = None
    max_attempts: int | None = None


@dataclass(frozen=True)
class Divergence:
    position: int
    recorded: str
    found: str

    def __str__(self) -> str:
        return (
            f"non-determinism at journal position {self.position}: recorded {self.recorded}, "
            f"the code now calls {self.found}"
        )


# -- suspensions ---------------------------------------------------------------------------


@dataclass
class Suspend:
    """Why the function stopped before returning: `what` is next, retry, sleep, await,
    spawn or diverged."""

    what: str
    delay_ms: int = 0
    reason: str = ""
    until_ms: int = 0
    names: Sequence[str] = ()
    timeout_ms: int | None = None
    children: Sequence[ChildSpec] = ()
    any: bool = False
    divergence: Divergence | None = None


class _Suspended(BaseException):
    """Unwinds the workflow function at a suspension (not an Exception: see the module doc)."""


def _label(e: dict[str, Any]) -> str:
    """What a divergence report calls an entry (the Rust runtime's labels)."""
    t = e.get("t")
    if t == "step":
        return f"step {json.dumps(e.get('name'))}"
    if t == "signal":
        return f"wait_for_signal {json.dumps(e.get('names'))}"
    if t == "children":
        return f"{'first_of' if e.get('any') else 'children'} {json.dumps(e.get('kinds'))}"
    if t == "patch":
        return f"patched {json.dumps(e.get('name'))}"
    return str(t)


def _seconds(d: float | timedelta | None) -> float | None:
    if d is None:
        return None
    return d.total_seconds() if isinstance(d, timedelta) else float(d)


class WorkflowContext:
    """What a code-first workflow function gets: `await ctx.step(name, fn)`,
    `await ctx.sleep(seconds)`, `await ctx.wait_for_signal(names, timeout)`,
    `await ctx.child(wf, input)` / `fan_out` / `first_of`, `await ctx.now()`,
    `await ctx.random()`, `await ctx.patched(name)`."""

    def __init__(
        self,
        id: int,
        journal: list[dict[str, Any]],
        attempt: int = 1,
        *,
        wake: str = "",
        inbox: list[dict[str, Any]] | None = None,
        children: list[dict[str, Any]] | None = None,
        replay: bool = False,
        queue: str = "",
    ) -> None:
        self.id = id
        self.queue = queue
        self.attempt = attempt
        self.journal = journal
        self.pos = 0
        self.replay = replay
        # The journal holds what no outcome wrote yet (a step ended in this claim, or a
        # resume filled in a signal or the children): the next new step writes it first.
        self.dirty = False
        self.suspend_: Suspend | None = None
        last = journal[-1] if journal else None
        if last is not None and last.get("t") == "signal" and not last.get("done") and wake in ("signal", "timeout"):
            last["done"] = True
            names = last.get("names") or []
            got = next((s for s in inbox or [] if s.get("name") in names), None)
            if got is not None:
                last["got"] = {"signal_id": got["signal_id"], "name": got["name"], "payload": got.get("payload")}
            self.dirty = True
        elif last is not None and last.get("t") == "children" and last.get("results") is None and wake == "children":
            last["results"] = [
                {k: c.get(k) for k in ("id", "kind", "status", "result", "error")} for c in children or []
            ]
            self.dirty = True

    # -- the journal ---------------------------------------------------------------------

    def _suspend(self, s: Suspend) -> _Suspended:
        if self.suspend_ is None:
            self.suspend_ = s
        return _Suspended()

    def _diverge(self, position: int, recorded: str, found: str) -> _Suspended:
        return self._suspend(Suspend("diverged", divergence=Divergence(position, recorded, found)))

    def _slot(self, found: str, same: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The recorded entry at the next position (None: a new position). Raises at a
        divergence, at the end of a replay's record, or when already suspended."""
        if self.suspend_ is not None:
            raise _Suspended()
        if self.pos < len(self.journal):
            e = self.journal[self.pos]
            if same(e):
                self.pos += 1
                return e
            raise self._diverge(self.pos, _label(e), found)
        if self.replay:
            raise self._suspend(Suspend("end_of_record"))
        return None

    def _push(self, e: dict[str, Any]) -> None:
        self.journal.append(e)
        self.pos += 1

    def unconsumed(self) -> Divergence | None:
        if self.pos < len(self.journal):
            return Divergence(self.pos, _label(self.journal[self.pos]), "the workflow's end")
        return None

    # -- calls ---------------------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]] | Callable[[], T],
        *,
        retries: int = 3,
        backoff: float = 1.0,
        backoff_cap: float = 300.0,
    ) -> T:
        """Runs `fn()` (async or not) once and journals its result (JSON). On an error with
        retries left the claim ends with the engine's retry (backoff from `backoff`
        seconds, doubling, at most `backoff_cap`) and the function runs again from its
        journal; the last error is journaled and raised as StepError, now and on replay."""
        rec = self._slot(f"step {json.dumps(name)}", lambda e: e.get("t") == "step" and e.get("name") == name)
        if rec is not None:
            if rec.get("err") is not None:
                raise StepError(name, str(rec["err"]))
            return rec.get("ok")  # type: ignore[return-value]
        if self.dirty:
            # One new step per claim: what ran before is written before this one runs.
            raise self._suspend(Suspend("next"))
        self.dirty = True
        attempt = 1 if self.replay else self.attempt
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
        except Exception as e:
            if attempt <= retries:
                delay = min(backoff_cap, backoff * (2 ** (attempt - 1)))
                raise self._suspend(Suspend("retry", delay_ms=int(delay * 1000), reason=f"step {name!r}: {e}")) from e
            self._push({"t": "step", "name": name, "err": str(e) or type(e).__name__})
            raise StepError(name, str(e) or type(e).__name__) from e
        try:
            # JSON as it will come back on replay (a pydantic model as its JSON object).
            ok = json.loads(json.dumps(value, default=_json_default))
        except (TypeError, ValueError) as e:
            msg = f"result does not serialize: {e}"
            self._push({"t": "step", "name": name, "err": msg})
            raise StepError(name, msg) from e
        self._push({"t": "step", "name": name, "ok": ok})
        return ok  # type: ignore[no-any-return]

    async def sleep(self, duration: float | timedelta) -> None:
        """Sleeps durably: the instance parks (no worker slot, no connection)."""
        if self._slot("sleep", lambda e: e.get("t") == "sleep") is not None:
            return
        until_ms = time.time() * 1000 + (_seconds(duration) or 0.0) * 1000
        self._push({"t": "sleep", "until_ms": until_ms})
        raise self._suspend(Suspend("sleep", until_ms=int(until_ms)))

    async def wait_for_signal(
        self, names: str | Sequence[str], timeout: float | timedelta | None = None
    ) -> Signal | None:
        """The first signal with one of `names` (one already in the inbox counts), or None
        when `timeout` passed first."""
        ns = [names] if isinstance(names, str) else list(names)
        t = _seconds(timeout)
        timeout_ms = None if t is None else int(t * 1000)
        rec = self._slot(
            f"wait_for_signal {json.dumps(ns)}", lambda e: e.get("t") == "signal" and e.get("names") == ns
        )
        if rec is not None:
            if rec.get("done"):
                got = rec.get("got")
                if got is None:
                    return None
                return Signal(int(got["signal_id"]), str(got["name"]), got.get("payload"))
            # Recorded but not resumed yet: park again (a replay's record ends here).
            if self.replay:
                raise self._suspend(Suspend("end_of_record"))
            raise self._suspend(Suspend("await", names=ns, timeout_ms=timeout_ms))
        self._push({"t": "signal", "names": ns, "done": False})
        raise self._suspend(Suspend("await", names=ns, timeout_ms=timeout_ms))

    async def spawn_children(self, children: Sequence[ChildSpec], *, any: bool = False) -> list[dict[str, Any]]:
        """Starts `children` together and waits until all ended (`any`: the first; the
        others are cancelled). Each end is {id, kind, status, result, error}."""
        if not children:
            return []
        kinds = [c.kind for c in children]
        call = "first_of" if any else "children"
        rec = self._slot(
            f"{call} {json.dumps(kinds)}",
            lambda e: e.get("t") == "children" and e.get("kinds") == kinds and bool(e.get("any")) == any,
        )
        if rec is not None:
            if rec.get("results") is not None:
                return sorted(rec["results"], key=lambda c: int(c["id"]))
            if self.replay:
                raise self._suspend(Suspend("end_of_record"))
            raise self._diverge(self.pos - 1, f"{call} {json.dumps(kinds)}", "children whose join was not delivered")
        entry: dict[str, Any] = {"t": "children", "kinds": kinds}
        if any:
            entry["any"] = True
        self._push(entry)
        raise self._suspend(Suspend("spawn", children=list(children), any=any))

    async def child(self, workflow: Any, input: Any = None) -> Any:
        """Starts one child workflow (a Workflow or a kind) and returns its result; raises
        ChildError when it failed or was cancelled."""
        ends = await self.spawn_children([ChildSpec(_kind(workflow), _encode(input))])
        return _decoded(workflow, _child_result(ends[0] if ends else None, _kind(workflow)))

    async def fan_out(self, workflow: Any, inputs: Sequence[Any]) -> list[Any | ChildError]:
        """One child per input, together; the results in input order (a ChildError in
        place of a child that failed: a failed child does not fail the parent)."""
        ends = await self.spawn_children([ChildSpec(_kind(workflow), _encode(i)) for i in inputs])
        out: list[Any | ChildError] = []
        for c in ends:
            try:
                out.append(_decoded(workflow, _child_result(c, _kind(workflow))))
            except ChildError as e:
                out.append(e)
        return out

    async def first_of(self, workflow: Any, inputs: Sequence[Any]) -> Any:
        """Children together; the result of the first to end (the others are cancelled)."""
        ends = await self.spawn_children([ChildSpec(_kind(workflow), _encode(i)) for i in inputs], any=True)
        first = next((c for c in ends if c.get("status") == "done"), None) or next(
            (c for c in ends if c.get("status") != "cancelled"), None
        )
        return _decoded(workflow, _child_result(first or (ends[0] if ends else None), _kind(workflow)))

    async def now(self) -> datetime:
        """The current time, journaled: a replay returns the same instant."""
        rec = self._slot("now", lambda e: e.get("t") == "now")
        if rec is not None:
            ms = float(rec["ms"])
        else:
            ms = time.time() * 1000
            self._push({"t": "now", "ms": ms})
        return datetime.fromtimestamp(ms / 1000, timezone.utc)

    async def random(self) -> float:
        """A random number in [0, 1), journaled (as the Rust runtime's u64)."""
        rec = self._slot("random", lambda e: e.get("t") == "random")
        if rec is not None:
            v = int(rec["v"])
        else:
            v = _random.getrandbits(64)
            self._push({"t": "random", "v": v})
        return v / 2**64

    async def patched(self, name: str) -> bool:
        """A version marker for changing a running workflow: True on a run reaching it for
        the first time (journaled) or whose journal has it here; False on a run recorded
        before the change (its journal has something else here: take the old path)."""
        if self.suspend_ is not None:
            raise _Suspended()
        if self.pos < len(self.journal):
            e = self.journal[self.pos]
            if e.get("t") == "patch" and e.get("name") == name:
                self.pos += 1
                return True
            return False
        if self.replay:
            raise self._suspend(Suspend("end_of_record"))
        self._push({"t": "patch", "name": name})
        return True


def _decoded(workflow: Any, result: Any) -> Any:
    """A child's JSON result as its workflow's result type (a pydantic model, when it is
    annotated with one)."""
    codec = getattr(workflow, "_codec", None)
    return codec.decode_result(result) if codec is not None else result


def _encode(v: Any) -> Any:
    dump = getattr(v, "model_dump", None)
    return dump(mode="json") if callable(dump) else v


def _json_default(v: Any) -> Any:
    dump = getattr(v, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _kind(workflow: Any) -> str:
    return workflow if isinstance(workflow, str) else str(workflow.kind)


def _child_result(c: dict[str, Any] | None, kind: str) -> Any:
    if c is None:
        raise ChildError(0, kind, "missing", "no child result was delivered")
    if c.get("status") != "done":
        raise ChildError(int(c["id"]), str(c.get("kind")), str(c.get("status")), str(c.get("error") or ""))
    return c.get("result")


# -- the driver ------------------------------------------------------------------------------


@dataclass
class Ending:
    """How a run of the function ended: returned (ok, value), raised (error), or suspended."""

    suspend: Suspend | None = None
    returned: bool = False
    value: Any = None
    error: str | None = None


async def run(ctx: WorkflowContext, fn: Callable[[WorkflowContext, Any], Awaitable[Any]], input: Any) -> Ending:
    """Runs the function until it returns or suspends. A suspension wins over a return or an
    error (they may rest on a halted call)."""
    try:
        value = await fn(ctx, input)
    except _Suspended:
        value, err = None, None
    except Exception as e:
        value, err = None, f"{type(e).__name__}: {e}" if not isinstance(e, StepError) else str(e)
        if ctx.suspend_ is None:
            return Ending(error=err)
    else:
        if ctx.suspend_ is None:
            return Ending(returned=True, value=value)
    assert ctx.suspend_ is not None
    return Ending(suspend=ctx.suspend_)


def _outcome_for(ctx: WorkflowContext, ending: Ending) -> dict[str, Any]:
    """The engine outcome (the fields of a StepOutcome) for one claim's ending."""
    state = json.dumps({"journal": ctx.journal}, separators=(",", ":"))

    def fail(reason: str) -> dict[str, Any]:
        if ctx.dirty:
            # A fail writes no state: what this claim journaled is written first with
            # next, and the replay of the next claim fails the same way.
            return {"outcome": "next", "step": ENGINE_STEP, "state": state}
        return {"outcome": "fail", "reason": reason}

    if ending.suspend is None:
        if not ending.returned:
            return fail(ending.error or "the workflow raised")
        d = ctx.unconsumed()
        if d is not None:
            return fail(f"{NONDETERMINISM} {d}")
        try:
            result = json.dumps(ending.value, separators=(",", ":"))
        except (TypeError, ValueError) as e:
            return fail(f"the result does not serialize: {e}")
        return {"outcome": "done", "result": result}
    s = ending.suspend
    if s.what == "next":
        return {"outcome": "next", "step": ENGINE_STEP, "state": state}
    if s.what == "retry":
        return {"outcome": "retry", "delay_ms": s.delay_ms, "reason": s.reason[:1000]}
    if s.what == "sleep":
        return {"outcome": "sleep", "step": ENGINE_STEP, "until_unix_ms": s.until_ms, "state": state}
    if s.what == "await":
        o: dict[str, Any] = {"outcome": "await", "signals": list(s.names), "step": ENGINE_STEP, "state": state}
        if s.timeout_ms is not None:
            o["timeout_ms"] = s.timeout_ms
        return o
    if s.what == "spawn":
        return {
            "outcome": "spawn",
            "children": list(s.children),
            "step": ENGINE_STEP,
            "join": "any" if s.any else "all",
            "on_child_failure": "deliver",
            "state": state,
        }
    if s.what == "diverged":
        return fail(f"{NONDETERMINISM} {s.divergence}")
    return {"outcome": "fail", "reason": "a live run reached the end of a replay record (a bug in pgferry)"}


async def claimed(
    fn: Callable[[WorkflowContext, Any], Awaitable[Any]],
    *,
    id: int,
    state: Any,
    input: Any,
    attempt: int,
    wake: str,
    inbox: list[dict[str, Any]] | None,
    children: list[dict[str, Any]] | None,
    queue: str = "",
) -> dict[str, Any]:
    """One claim of a code-first instance: replay the journal, run on, one outcome."""
    journal = state.get("journal") if isinstance(state, dict) else None
    if journal is not None and not isinstance(journal, list):
        return {"outcome": "fail", "reason": f"{NONDETERMINISM} unreadable journal: not a list"}
    ctx = WorkflowContext(
        id, list(journal or []), attempt, wake=wake, inbox=inbox, children=children, queue=queue
    )
    return _outcome_for(ctx, await run(ctx, fn, input))
