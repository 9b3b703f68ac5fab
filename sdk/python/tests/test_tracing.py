"""W3C trace context: enqueue inside a span puts `traceparent` in the job's meta; the
worker runs the handler in a span parented on it. Uses the real OpenTelemetry SDK."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgferry
from pgferry import _tracing, _types
from server import Server

_exporter = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)


def test_enqueue_in_a_span_carries_traceparent() -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        spec = _types.to_spec(pgferry.JobRequest("k", {}))
        trace_id = format(span.get_span_context().trace_id, "032x")
    assert spec.meta["traceparent"].split("-")[1] == trace_id
    # Outside any span nothing is added; an explicit traceparent is never overwritten.
    assert "traceparent" not in _types.to_spec(pgferry.JobRequest("k", {})).meta
    with tracer.start_as_current_span("request"):
        mine = _types.to_spec(pgferry.JobRequest("k", {}, meta={"traceparent": "00-x-y-01"}))
    assert mine.meta["traceparent"] == "00-x-y-01"


def test_job_span_is_a_child_of_the_enqueuer() -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as parent:
        meta = dict(_types.to_spec(pgferry.JobRequest("k", {})).meta)
    _exporter.clear()
    assert _tracing.enabled()
    with _tracing.job_span("send_email", "emails", 42, meta):
        pass
    (span,) = _exporter.get_finished_spans()
    assert span.name == "pgferry.job send_email"
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.attributes is not None and span.attributes["pgferry.job_id"] == 42


def test_a_task_runs_in_a_span_child_of_its_enqueuer_around_its_middleware(server: Server, queue: str) -> None:
    import asyncio
    from collections.abc import Awaitable, Callable
    from typing import Any

    from helpers import WAIT, running

    app = pgferry.App(server.grpc_url, server.api_key, http_url=server.http_url)
    seen: list[int] = []

    @app.middleware
    async def record(ctx: pgferry.JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append(trace.get_current_span().get_span_context().trace_id)
        return await call_next()

    @app.task(queue=queue)
    async def traced() -> str:
        return "ok"

    tracer = trace.get_tracer("test")

    async def main() -> int:
        async with app, running(app.worker(concurrency=2)):
            with tracer.start_as_current_span("request") as parent:
                job = await traced.enqueue()
            assert await job.result(timeout=WAIT) == "ok"
        return parent.get_span_context().span_id

    _exporter.clear()
    parent_id = asyncio.run(main())
    spans = [s for s in _exporter.get_finished_spans() if s.name == "pgferry.job traced"]
    assert len(spans) == 1 and spans[0].parent is not None and spans[0].parent.span_id == parent_id
    assert seen == [spans[0].context.trace_id]
