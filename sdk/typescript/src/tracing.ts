// W3C trace context through @opentelemetry/api when the application has it (an optional
// peer dependency, loaded with a dynamic import so the SDK neither requires nor
// type-depends on it). traceparent is written and read here directly rather than through
// the global propagator, so it works whether or not the application registered one.

// The slice of @opentelemetry/api used here (structural, so no import of its types).
interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
  traceState?: unknown;
}
interface Span {
  spanContext(): SpanContext;
  setStatus(s: { code: number; message?: string }): void;
  recordException(e: unknown): void;
  end(): void;
  isRecording(): boolean;
}
interface OtelApi {
  trace: {
    getActiveSpan(): Span | undefined;
    getTracer(name: string): {
      startActiveSpan<T>(name: string, opts: object, ctx: unknown, fn: (span: Span) => T): T;
      startSpan(name: string): Span;
    };
    setSpanContext(ctx: unknown, sc: SpanContext): unknown;
  };
  context: { active(): unknown };
  ROOT_CONTEXT: unknown;
  SpanKind: { CONSUMER: number };
  SpanStatusCode: { ERROR: number };
}

let api: OtelApi | null | undefined;
let loading: Promise<void> | undefined;

/** Loads @opentelemetry/api once if installed; later calls are free. */
export function loadTracing(): Promise<void> {
  if (api !== undefined) return Promise.resolve();
  loading ??= import("@opentelemetry/api" as string).then(
    (m: { default?: OtelApi } & OtelApi) => {
      api = (m.trace ? m : m.default) ?? null;
    },
    () => {
      api = null;
    },
  );
  return loading;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The active span's `traceparent` header, or null outside a span (or without OTel). */
export function currentTraceHeaders(): Record<string, string> | null {
  const span = api?.trace.getActiveSpan();
  if (!span) return null;
  const sc = span.spanContext();
  if (!/^[0-9a-f]{32}$/.test(sc.traceId) || /^0+$/.test(sc.traceId)) return null;
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, "0");
  return { traceparent: `00-${sc.traceId}-${sc.spanId}-${flags}` };
}

let probed: boolean | undefined;

/** True when OTel is installed and a real tracer provider is registered (the API's
 * default records nothing, so a span per job would be pure cost). Probed once per process
 * after loadTracing(). */
export function tracingEnabled(): boolean {
  if (!api) return false;
  if (probed === undefined) {
    const span = api.trace.getTracer("pgferry").startSpan("pgferry.probe");
    probed = span.isRecording();
    // Not ended: an un-ended span is never exported.
  }
  return probed;
}

/** Runs fn inside a CONSUMER span parented on the job's traceparent (when it has one). */
export function withJobSpan<T>(
  kind: string,
  queue: string,
  jobId: number,
  attempt: number,
  meta: Record<string, string>,
  fn: () => Promise<T>,
): Promise<T> {
  const otel = api;
  if (!otel) return fn();
  let parent: unknown = otel.ROOT_CONTEXT;
  const m = TRACEPARENT.exec(meta.traceparent ?? "");
  if (m) {
    parent = otel.trace.setSpanContext(otel.ROOT_CONTEXT, {
      traceId: m[1] as string,
      spanId: m[2] as string,
      traceFlags: parseInt(m[3] as string, 16),
      isRemote: true,
    });
  }
  const attributes = {
    "pgferry.job_id": jobId,
    "pgferry.attempt": attempt,
    "pgferry.queue": queue,
    "pgferry.kind": kind,
  };
  return otel.trace
    .getTracer("pgferry")
    .startActiveSpan(`pgferry.job ${kind}`, { kind: otel.SpanKind.CONSUMER, attributes }, parent, async (span) => {
      try {
        return await fn();
      } catch (e) {
        span.recordException(e);
        span.setStatus({ code: otel.SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
        throw e;
      } finally {
        span.end();
      }
    });
}
