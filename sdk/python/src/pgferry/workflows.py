"""Durable workflows in Python, on the server's workflow engine (docs/workflows.md).

Code-first: an async function of a context and its input; `ctx.step` journals results, and
`ctx.sleep`, `ctx.wait_for_signal` and `ctx.child` park the instance without holding a slot.

    @app.workflow("order")
    async def order(ctx: pgferry.WorkflowContext, o: dict[str, Any]) -> dict[str, Any]:
        charge = await ctx.step("charge", lambda: charge_card(o))
        paid = await ctx.wait_for_signal("paid", timeout=3600)
        return {"charge": charge, "paid": paid is not None}

    handle = await order.start({"items": [1, 2]}, correlation_key="order-42")
    await handle.signal("paid", {"amount": 30})
    receipt = await handle.result(timeout=60)

State machines (the engine's handlers, one per step, each returning one outcome):

    m = app.machine("refund", inbox=True)

    @m.step("start")
    async def start(s: pgferry.ClaimedStep) -> pgferry.workflows.Outcome:
        return workflows.Await(["approved"], step="pay", timeout=3600)
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pgferry import _conn
from pgferry._journal import NONDETERMINISM, ChildSpec, WorkflowContext, claimed
from pgferry._signature import _BaseModel, _is_model
from pgferry._types import _ms_to_dt
from pgferry._wf_worker import ClaimedStep, KindEntry
from pgferry.errors import InvalidArgument, PgferryError, ResultTimeout, from_rpc_error
from pgferry.v1 import workflow_pb2

if TYPE_CHECKING:
    from pgferry.app import App
    from pgferry.client import Client

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")

_SERVICE = "/pgferry.v1.WorkflowAdmin/"


# -- errors ------------------------------------------------------------------------------


class WorkflowFailed(PgferryError):
    """Awaiting a workflow's result: it ended `failed`. `instance` is the WorkflowInfo."""

    default_code = "workflow_failed"

    def __init__(self, message: str, *, instance: WorkflowInfo, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.instance = instance
        self.error = instance.error


class NonDeterminismError(WorkflowFailed):
    """The instance was parked because its code no longer matches its journal (a step
    renamed, moved, added before a recorded one). Deploy matching code, then retry()."""

    default_code = "non_determinism"


class WorkflowCancelled(WorkflowFailed):
    default_code = "workflow_cancelled"


# -- state-machine outcomes ----------------------------------------------------------------


def _ms(d: float | timedelta) -> int:
    return int((d.total_seconds() if isinstance(d, timedelta) else float(d)) * 1000)


def _json(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


@dataclass(frozen=True)
class Next:
    """Run `step` next (at once), with `state` written (None: the state is kept)."""

    step: str
    state: Any = None

    def fields(self) -> dict[str, Any]:
        return {"outcome": "next", "step": self.step, "state": None if self.state is None else _json(self.state)}


@dataclass(frozen=True)
class Retry:
    """The same step again after `delay` seconds (attempt + 1)."""

    delay: float | timedelta = 1.0
    reason: str = ""

    def fields(self) -> dict[str, Any]:
        return {"outcome": "retry", "delay_ms": _ms(self.delay), "reason": self.reason}


@dataclass(frozen=True)
class Await:
    """Park until a signal with one of `signals` (or `timeout` seconds); `step` runs then."""

    signals: Sequence[str]
    step: str
    timeout: float | timedelta | None = None
    state: Any = None

    def fields(self) -> dict[str, Any]:
        return {
            "outcome": "await",
            "signals": list(self.signals),
            "step": self.step,
            "timeout_ms": None if self.timeout is None else _ms(self.timeout),
            "state": None if self.state is None else _json(self.state),
        }


@dataclass(frozen=True)
class Sleep:
    """Park for `seconds` (or until `until`, an aware datetime); `step` runs then."""

    step: str
    seconds: float | timedelta | None = None
    until: datetime | None = None
    state: Any = None

    def fields(self) -> dict[str, Any]:
        o: dict[str, Any] = {"outcome": "sleep", "step": self.step}
        if self.until is not None:
            o["until_unix_ms"] = int(self.until.timestamp() * 1000)
        else:
            o["for_ms"] = _ms(self.seconds or 0)
        o["state"] = None if self.state is None else _json(self.state)
        return o


@dataclass(frozen=True)
class Spawn:
    """Start `children` and park until joined (`join` all|any); `step` runs then and sees
    their ends in `ClaimedStep.children` (with a machine declared `children=True`)."""

    children: Sequence[ChildSpec]
    step: str
    join: str = "all"
    deliver_failures: bool = False
    state: Any = None

    def fields(self) -> dict[str, Any]:
        return {
            "outcome": "spawn",
            "children": list(self.children),
            "step": self.step,
            "join": self.join,
            "on_child_failure": "deliver" if self.deliver_failures else "fail_parent",
            "state": None if self.state is None else _json(self.state),
        }


@dataclass(frozen=True)
class Done:
    result: Any = None

    def fields(self) -> dict[str, Any]:
        return {"outcome": "done", "result": _json(self.result)}


@dataclass(frozen=True)
class Fail:
    reason: str

    def fields(self) -> dict[str, Any]:
        return {"outcome": "fail", "reason": self.reason}


Outcome = Next | Retry | Await | Sleep | Spawn | Done | Fail
StepHandler = Callable[[ClaimedStep], Awaitable[Outcome]]


# -- what the server reports ------------------------------------------------------------------


@dataclass(frozen=True)
class StepRecord:
    step_seq: int
    step: str
    attempt: int
    outcome: str
    error: str
    worker: str


@dataclass(frozen=True)
class WorkflowInfo:
    """An instance as `describe()` reports it (for a code-first one, `state` holds the
    journal)."""

    id: int
    kind: str
    queue: str
    step: str
    status: str
    state: Any
    input: Any
    result: Any
    error: str
    attempt: int
    awaits: list[str]
    parent_id: int | None
    children_pending: int
    correlation_key: str
    created_at: datetime | None
    finished_at: datetime | None
    history: list[StepRecord] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.status in ("done", "failed", "cancelled")


def _info(pb: workflow_pb2.WorkflowInstance) -> WorkflowInfo:
    def loads(s: str) -> Any:
        return json.loads(s) if s else None

    return WorkflowInfo(
        id=pb.id,
        kind=pb.kind,
        queue=pb.queue,
        step=pb.step,
        status=pb.status,
        state=loads(pb.state),
        input=loads(pb.input),
        result=loads(pb.result),
        error=pb.error,
        attempt=pb.attempt,
        awaits=list(pb.awaits),
        parent_id=pb.parent_id if pb.HasField("parent_id") else None,
        children_pending=pb.children_pending,
        correlation_key=pb.correlation_key,
        created_at=_ms_to_dt(pb.created_at_unix_ms),
        finished_at=_ms_to_dt(pb.finished_at_unix_ms) if pb.HasField("finished_at_unix_ms") else None,
        history=[StepRecord(h.step_seq, h.step, h.attempt, h.outcome, h.error, h.worker) for h in pb.history],
    )


# -- admin calls (WorkflowAdmin over gRPC) ------------------------------------------------------


class WorkflowCalls:
    """The WorkflowAdmin calls; pgferry.Client has them."""

    _api_key: str
    timeout: float | None
    default_queue: str

    def _chan(self) -> Any:  # pragma: no cover - Client's
        raise NotImplementedError

    async def _wf(self, name: str, req: Any, resp_type: Any) -> Any:
        import grpc

        method = self._chan().unary_unary(
            _SERVICE + name, request_serializer=type(req).SerializeToString, response_deserializer=resp_type.FromString
        )
        try:
            return await method(req, metadata=_conn.auth_metadata(self._api_key), timeout=self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def start_workflow(
        self,
        kind: str,
        input: Any = None,
        *,
        queue: str | None = None,
        step: str | None = None,
        state: Any = None,
        correlation_key: str | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> WorkflowHandle[Any]:
        """Start an instance of `kind`; with a correlation key an active instance with
        that key is returned instead (`handle.duplicate`)."""
        req = workflow_pb2.WorkflowStartRequest(
            kind=kind, queue=queue or self.default_queue, input=_json(input), priority=priority
        )
        for f, v in (("step", step), ("correlation_key", correlation_key), ("concurrency_key", concurrency_key),
                     ("concurrency_limit", concurrency_limit), ("max_attempts", max_attempts)):
            if v is not None:
                setattr(req, f, v)
        if state is not None:
            req.state = _json(state)
        r = await self._wf("Start", req, workflow_pb2.WorkflowStarted)
        return WorkflowHandle(self, r.id, duplicate=r.duplicate)

    async def get_workflow(self, id: int) -> WorkflowInfo:
        return _info(await self._wf("Get", workflow_pb2.WorkflowIdRequest(id=id), workflow_pb2.WorkflowInstance))

    async def signal_workflow(
        self, name: str, payload: Any = None, *, id: int | None = None, queue: str | None = None, correlation_key: str | None = None
    ) -> bool:
        """Signal an instance by id or by (queue, correlation key). True: it awaited the
        name and runs now; False: kept in its inbox for a later wait."""
        req = workflow_pb2.WorkflowSignalRequest(name=name, payload=_json(payload))
        if id is not None:
            req.id = id
        elif correlation_key is not None:
            req.correlation.queue = queue or self.default_queue
            req.correlation.key = correlation_key
        else:
            raise ValueError("signal_workflow: give id= or correlation_key=")
        r = await self._wf("Signal", req, workflow_pb2.WorkflowSignalSent)
        return bool(r.delivered)

    async def cancel_workflow(self, id: int, reason: str = "") -> WorkflowInfo:
        r = await self._wf("Cancel", workflow_pb2.WorkflowCancelRequest(id=id, reason=reason), workflow_pb2.WorkflowCancelled)
        return _info(r.instance)

    async def list_workflows(
        self, *, queue: str | None = None, kind: str = "", status: str = "", correlation_key: str = "",
        before: int = 0, limit: int = 50,
    ) -> tuple[list[int], int | None]:
        """Instance ids of a queue, newest first, and the `before` of the next page (None:
        the last page). Filters: kind, status, correlation key."""
        req = workflow_pb2.WorkflowListRequest(
            queue=queue or self.default_queue, kind=kind, status=status, correlation_key=correlation_key,
            before=before, limit=limit,
        )
        r = await self._wf("List", req, workflow_pb2.WorkflowList)
        return [i.id for i in r.instances], (r.next if r.has_more and r.HasField("next") else None)

    async def get_workflow_retention(self, queue: str | None = None) -> int | None:
        """How long `queue` keeps its ended instances, in milliseconds; None: the server's
        default applies (the queue has no setting of its own)."""
        req = workflow_pb2.WorkflowRetentionRequest(queue=queue or self.default_queue)
        r = await self._wf("GetRetention", req, workflow_pb2.WorkflowRetention)
        return int(r.retention_ms) if r.HasField("retention_ms") else None

    async def set_workflow_retention(self, retention_ms: int | None, *, queue: str | None = None) -> int | None:
        """Keep `queue`'s ended instances `retention_ms` milliseconds (0 to ten years) after
        they ended; None clears the queue's own setting, so the server's default applies.
        Returns the setting as stored. Needs an admin key; audited."""
        if retention_ms is not None and (isinstance(retention_ms, bool) or not isinstance(retention_ms, int)):
            raise TypeError("set_workflow_retention: retention_ms must be an int (milliseconds) or None")
        if retention_ms is not None and retention_ms < 0:
            # uint64 on the wire: a negative number would not even encode.
            raise InvalidArgument("must be 0 to ten years", field="retention_ms")
        req = workflow_pb2.WorkflowRetention(queue=queue or self.default_queue)
        if retention_ms is not None:
            req.retention_ms = retention_ms
        r = await self._wf("SetRetention", req, workflow_pb2.WorkflowRetention)
        return int(r.retention_ms) if r.HasField("retention_ms") else None

    async def retry_workflow(self, id: int) -> str:
        """Run a failed instance again from its failed step; returns that step."""
        r = await self._wf("Retry", workflow_pb2.WorkflowIdRequest(id=id), workflow_pb2.WorkflowRetried)
        return str(r.step)


class WorkflowHandle(Generic[O]):
    """A started instance: `await result(timeout)`, `signal`, `cancel`, `describe`, `retry`."""

    def __init__(
        self, calls: Any, id: int, *, duplicate: bool = False, decode: Callable[[Any], Any] | None = None
    ) -> None:
        # calls: a WorkflowCalls (the server) or the in-memory engine of app.eager().
        self._calls: WorkflowCalls = calls
        self.id = id
        self.duplicate = duplicate
        self._decode = decode

    def __repr__(self) -> str:
        return f"WorkflowHandle(id={self.id})"

    async def describe(self) -> WorkflowInfo:
        return await self._calls.get_workflow(self.id)

    async def signal(self, name: str, payload: Any = None) -> bool:
        return await self._calls.signal_workflow(name, payload, id=self.id)

    async def cancel(self, reason: str = "") -> WorkflowInfo:
        return await self._calls.cancel_workflow(self.id, reason)

    async def retry(self) -> str:
        return await self._calls.retry_workflow(self.id)

    async def result(self, timeout: float | None = None) -> O:
        """The result once the instance is done. Raises WorkflowFailed (NonDeterminismError
        for a divergence), WorkflowCancelled, or ResultTimeout. (Polls `get`: 5 ms
        doubling to 200 ms.)"""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.005
        while True:
            info = await self.describe()
            if info.status == "done":
                return self._decode(info.result) if self._decode is not None else info.result  # type: ignore[no-any-return]
            if info.status == "failed":
                cls = NonDeterminismError if info.error.startswith(NONDETERMINISM) else WorkflowFailed
                raise cls(f"workflow {self.id} ({info.kind}) failed: {info.error}", instance=info)
            if info.status == "cancelled":
                raise WorkflowCancelled(f"workflow {self.id} ({info.kind}) was cancelled: {info.error}", instance=info)
            if deadline is not None and loop.time() + delay > deadline:
                raise ResultTimeout(f"workflow {self.id} did not end within {timeout}s (status {info.status})")
            await asyncio.sleep(delay)
            delay = min(0.2, delay * 2)


# -- kinds registered on an App --------------------------------------------------------------


class _Codec:
    """A workflow function's input and result on the wire: a pydantic model annotated as
    the input (the second parameter) or the result is encoded to JSON and decoded back,
    as task arguments are; other values travel as JSON as they are."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._done = False
        self.input_model: Any = None
        self.result_model: Any = None

    def _hints(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            hints = typing.get_type_hints(self.fn)
            params = list(inspect.signature(self.fn).parameters)
        except Exception:  # unresolvable annotations: plain JSON
            return
        if len(params) >= 2 and _is_model(hints.get(params[1])):
            self.input_model = hints[params[1]]
        if _is_model(hints.get("return")):
            self.result_model = hints["return"]

    @staticmethod
    def encode(v: Any) -> Any:
        model: Any = v
        return model.model_dump(mode="json") if _BaseModel is not None and isinstance(v, _BaseModel) else v

    def decode_input(self, v: Any) -> Any:
        self._hints()
        return self.input_model.model_validate(v) if self.input_model is not None and v is not None else v

    def decode_result(self, v: Any) -> Any:
        self._hints()
        return self.result_model.model_validate(v) if self.result_model is not None and v is not None else v


class Workflow(Generic[I, O]):
    """A code-first workflow kind (what `@app.workflow` returns). Calling it is not
    allowed; start it with `await wf.start(input)`."""

    def __init__(self, app: App, kind: str, queue: str, fn: Callable[[WorkflowContext, I], Awaitable[O]]) -> None:
        self.app = app
        self.kind = kind
        self.queue = queue
        self.fn = fn
        self._codec = _Codec(fn)

    async def _body(self, ctx: WorkflowContext, input: Any) -> Any:
        """The function as the driver runs it: input decoded, result encoded."""
        fn: Callable[[WorkflowContext, Any], Awaitable[Any]] = self.fn
        return self._codec.encode(await fn(ctx, self._codec.decode_input(input)))

    async def start(
        self,
        input: I,
        *,
        correlation_key: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
    ) -> WorkflowHandle[O]:
        client = self.app._workflow_client()
        h = await client.start_workflow(
            self.kind,
            self._codec.encode(input),
            queue=queue or self.queue,
            correlation_key=correlation_key,
            priority=priority,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
        )
        return WorkflowHandle(client, h.id, duplicate=h.duplicate, decode=self._codec.decode_result)

    def handle(self, id: int) -> WorkflowHandle[O]:
        """A handle to an instance started elsewhere (its id stored in your database)."""
        return WorkflowHandle(self.app._workflow_client(), int(id), decode=self._codec.decode_result)

    def child(self, input: I, **options: Any) -> ChildSpec:
        """A child spec of this kind (for `ctx.spawn_children` or a machine's Spawn)."""
        return ChildSpec(self.kind, self._codec.encode(input), **options)

    def kind_entry(self) -> KindEntry:
        async def run(s: ClaimedStep) -> dict[str, Any]:
            return await claimed(
                self._body, id=s.id, state=s.state, input=s.input, attempt=s.attempt, wake=s.wake,
                inbox=s.inbox, children=s.children, queue=s.queue,
            )

        return KindEntry(run, inbox=True, children=True)


class Machine:
    """A state-machine kind (what `app.machine(kind)` returns): one handler per step,
    each returning one outcome (Next, Retry, Await, Sleep, Spawn, Done, Fail). A handler
    that raises is retried after `retry_delay` seconds (attempt + 1) until max_attempts."""

    def __init__(self, app: App, kind: str, queue: str, *, inbox: bool, children: bool, retry_delay: float) -> None:
        self.app = app
        self.kind = kind
        self.queue = queue
        self.inbox = inbox
        self.children = children
        self.retry_delay = retry_delay
        self.steps: dict[str, StepHandler] = {}

    def step(self, name: str) -> Callable[[StepHandler], StepHandler]:
        def deco(fn: StepHandler) -> StepHandler:
            if name in self.steps:
                raise ValueError(f"machine {self.kind}: step {name!r} is already registered")
            self.steps[name] = fn
            return fn

        return deco

    async def start(self, input: Any = None, *, step: str = "start", state: Any = None,
                    correlation_key: str | None = None, queue: str | None = None) -> WorkflowHandle[Any]:
        client: WorkflowCalls = self.app._workflow_client()
        return await client.start_workflow(
            self.kind, input, queue=queue or self.queue, step=step, state=state, correlation_key=correlation_key
        )

    def handle(self, id: int) -> WorkflowHandle[Any]:
        return WorkflowHandle(self.app._workflow_client(), int(id))

    def child(self, input: Any = None, **options: Any) -> ChildSpec:
        return ChildSpec(self.kind, input, **options)

    def kind_entry(self) -> KindEntry:
        async def run(s: ClaimedStep) -> dict[str, Any]:
            handler = self.steps.get(s.step)
            if handler is None:
                return {"outcome": "fail", "reason": f"machine {self.kind} has no step {s.step!r}"}
            try:
                out = await handler(s)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                return Retry(self.retry_delay, f"{type(e).__name__}: {e}").fields()
            if not hasattr(out, "fields"):
                return {"outcome": "fail", "reason": f"step {s.step!r} returned {type(out).__name__}, not an outcome"}
            f = out.fields()
            if "state" in f and f["state"] is None and s.state is not None:
                # "Keep the state": sent back as it is, because the engine's SQL reads an
                # outcome whose state is JSON null (what an absent state becomes on the
                # server) as "write null" (coalesce of jsonb 'null' is not NULL).
                f["state"] = _json(s.state)
            return f

        return KindEntry(run, inbox=self.inbox, children=self.children)


__all__ = [
    "Await",
    "ChildSpec",
    "ClaimedStep",
    "Done",
    "Fail",
    "Machine",
    "Next",
    "NonDeterminismError",
    "Outcome",
    "Retry",
    "Sleep",
    "Spawn",
    "Workflow",
    "WorkflowCalls",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowInfo",
]
