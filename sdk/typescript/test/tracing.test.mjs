// OpenTelemetry: the enqueuing span's traceparent travels in the job's meta, and the worker
// runs the handler inside a CONSUMER span parented on it.
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { Client, Worker } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { Recorder, queueName, quiet, running } from "./helpers/util.mjs";

let server;
const exporter = new InMemorySpanExporter();
before(async () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  server = await Server.start("tracing");
});
after(async () => {
  await server?.cleanup();
});

it("traceparent goes from the enqueuing span to the handler's span", async (t) => {
  const queue = queueName(t);
  const rec = new Recorder();
  const w = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], handleSignals: false, logger: quiet });
  w.handle("traced", (_, ctx) => rec.add("ran", ctx, { meta: ctx.meta.traceparent, active: trace.getActiveSpan()?.spanContext() }));
  const c = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
  const tracer = trace.getTracer("test");
  await running(w, async () => {
    const { job, sc } = await tracer.startActiveSpan("produce", async (span) => {
      const job = await c.enqueue("traced", {}, { queue });
      span.end();
      return { job, sc: span.spanContext() };
    });
    const untraced = await c.enqueue("traced", {}, { queue });
    await rec.waitUntil(() => rec.ids("ran").includes(job.id) && rec.ids("ran").includes(untraced.id), "both jobs");
    const seen = rec.of("ran", job.id)[0].data;
    assert.equal(seen.meta, `00-${sc.traceId}-${sc.spanId}-01`);
    assert.equal(seen.active.traceId, sc.traceId);
    assert.equal(rec.of("ran", untraced.id)[0].data.meta, undefined);
    assert.equal((await c.getJob(job)).meta.traceparent, seen.meta);
    const spans = exporter.getFinishedSpans().filter((s) => s.name === "pgferry.job traced");
    const mine = spans.find((s) => s.attributes["pgferry.job_id"] === job.id);
    assert.ok(mine, `no consumer span for job ${job.id}: ${spans.map((s) => s.name)}`);
    assert.equal(mine.spanContext().traceId, sc.traceId);
    assert.equal((mine.parentSpanContext ?? { spanId: mine.parentSpanId }).spanId, sc.spanId);
    assert.equal(mine.attributes["pgferry.queue"], queue);
  });
  await c.close();
});
