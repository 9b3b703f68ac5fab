"""W3C trace context: enqueue inside a span puts `traceparent` in the job's meta; the
worker runs the handler in a span parented on it. Uses the real OpenTelemetry SDK."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgferry
from pgferry import _tracing, _types

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
