"""W3C trace context, only when OpenTelemetry is installed (it is an optional extra).

The import is dynamic so the SDK neither requires nor type-depends on opentelemetry."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

_otel: Any = None
_loaded = False


def _load() -> Any:
    global _otel, _loaded
    if not _loaded:
        _loaded = True
        try:
            propagate = importlib.import_module("opentelemetry.propagate")
            trace = importlib.import_module("opentelemetry.trace")
            _otel = (propagate, trace)
        except ImportError:
            _otel = None
    return _otel


def carrier() -> dict[str, str] | None:
    """The current span's `traceparent` (and `tracestate`) headers, or None outside a span.
    Looked up once per enqueue call: every job of a batch is enqueued in the same span."""
    otel = _load()
    if otel is None:
        return None
    propagate, trace = otel
    span = trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers or None


@contextlib.contextmanager
def job_span(kind: str, queue: str, job_id: int, meta: dict[str, str]) -> Iterator[None]:
    """A consumer span around a handler, parented on the enqueuer's traceparent."""
    otel = _load()
    if otel is None:
        yield
        return
    propagate, trace = otel
    ctx = propagate.extract(meta) if "traceparent" in meta else None
    tracer = trace.get_tracer("pgferry")
    attrs = {"pgferry.job_id": job_id, "pgferry.queue": queue, "pgferry.kind": kind}
    with tracer.start_as_current_span(
        f"pgferry.job {kind}", context=ctx, kind=trace.SpanKind.CONSUMER, attributes=attrs
    ):
        yield


def enabled() -> bool:
    """True when OpenTelemetry is installed and a real tracer provider is configured (the
    API's default proxy records nothing, so a span per job would be pure cost)."""
    otel = _load()
    if otel is None:
        return False
    _, trace = otel
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
