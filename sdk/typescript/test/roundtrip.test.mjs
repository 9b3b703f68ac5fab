// Enqueue and work over a real server: single and batch enqueues, meta, results, paging,
// typed tasks end to end, the HTTP-only client and the admin calls (gRPC and HTTP fallback).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import { Client, InvalidArgument, Pgferry, Worker, JobFailedError } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { Recorder, queueName, quiet, running, waitState } from "./helpers/util.mjs";

let server;
before(async () => {
  server = await Server.start("roundtrip");
});
after(async () => {
  await server?.cleanup();
});

const client = () => new Client({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
const worker = (queue, extra = {}) =>
  new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], concurrency: 8, handleSignals: false, logger: quiet, ...extra });

describe("round trip", () => {
  it("enqueues one and a batch, and runs each exactly once with its args", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("add", ({ a, b }, ctx) => {
      rec.add("ran", ctx, a + b);
      return a + b;
    });
    const c = client();
    await running(w, async () => {
      const one = await c.enqueue("add", { a: 1, b: 2 }, { queue });
      assert.ok(one.id > 0 && !one.duplicate);
      const many = await c.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ kind: "add", args: { a: i, b: 100 }, queue })));
      const manyIds = new Set(many.map((j) => j.id));
      assert.equal(manyIds.size, 50);
      assert.ok(!manyIds.has(one.id));
      const want = [one.id, ...manyIds];
      await rec.waitUntil(() => want.every((id) => rec.ids("ran").includes(id)), "all 51 jobs");
      const sums = new Map(rec.events.map((e) => [e.id, e.data]));
      assert.equal(sums.get(one.id), 3);
      assert.deepEqual(many.map((j) => sums.get(j.id)).sort((x, y) => x - y), Array.from({ length: 50 }, (_, i) => i + 100));
      assert.equal(rec.ids("ran").length, 51, "no job ran twice");
    });
    assert.equal(w.stats.completed, 51);
    assert.equal(w.stats.acked, 51);
    await c.close();
  });

  it("ctx.enqueuedAtMs carries the fraction of a millisecond the server sends", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("stamp", (_args, ctx) => {
      rec.add("ran", ctx, ctx.enqueuedAtMs);
    });
    const c = client();
    await running(w, async () => {
      // One at a time: the jobs of one batch share their transaction's time.
      const jobs = [];
      for (let i = 0; i < 5; i++) jobs.push(await c.enqueue("stamp", {}, { queue }));
      await rec.waitUntil(() => jobs.every((j) => rec.ids("ran").includes(j.id)), "5 jobs");
      const stamps = rec.events.map((e) => e.data);
      assert.ok(stamps.every((ms) => ms > 1.7e12), String(stamps));
      // Five enqueue times all on a whole millisecond would be a one-in-10^15 chance.
      assert.ok(stamps.some((ms) => !Number.isInteger(ms)), String(stamps));
    });
    await c.close();
  });

  it("a worker that does not ask for batches works with single messages", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue, { maxBatch: 0 }).handle("one", ({ i }, ctx) => {
      rec.add("ran", ctx, i);
      return i;
    });
    const c = client();
    await running(w, async () => {
      assert.equal(w.helloAck.max_batch, 0);
      const jobs = await c.enqueueMany(Array.from({ length: 30 }, (_, i) => ({ kind: "one", args: { i }, queue })));
      await rec.waitUntil(() => jobs.every((j) => rec.ids("ran").includes(j.id)), "30 jobs");
      assert.deepEqual(await c.result(jobs[29]), 29);
    });
    assert.deepEqual([w.stats.completed, w.stats.acked], [30, 30]);
    await c.close();
  });

  it("result() waits for a job that finishes later (long-poll and GetJob polling)", async (t) => {
    const queue = queueName(t);
    const w = worker(queue).handle("slow", async ({ ms }) => {
      await new Promise((r) => setTimeout(r, ms));
      return "late";
    });
    const viaHttp = client();
    const viaGrpc = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
    await running(w, async () => {
      const a = await viaHttp.enqueue("slow", { ms: 1500 }, { queue });
      const b = await viaGrpc.enqueue("slow", { ms: 1500 }, { queue });
      assert.deepEqual(await Promise.all([viaHttp.result(a), viaGrpc.result(b)]), ["late", "late"]);
      const c2 = await viaHttp.enqueue("slow", { ms: 5000 }, { queue });
      const e = await viaHttp.result(c2, { timeoutMs: 500 }).then(
        () => assert.fail("resolved before the job finished"),
        (err) => err,
      );
      assert.ok(e instanceof JobFailedError && e.code === "timeout", String(e));
    });
    assert.equal(viaHttp.longPoll, true);
    assert.equal(viaGrpc.longPoll, undefined);
    await viaHttp.close();
    await viaGrpc.close();
  });

  it("pipelines concurrent enqueues on one Producer stream", async (t) => {
    const queue = queueName(t);
    const c = client();
    const jobs = await Promise.all(Array.from({ length: 500 }, (_, i) => c.enqueue("noop", { i }, { queue })));
    assert.equal(new Set(jobs.map((j) => j.id)).size, 500);
    await c.close();
  });

  it("carries meta to the handler and keeps the result with the job", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("square", ({ n }, ctx) => {
      rec.add("ran", ctx, { origin: ctx.meta.origin, queue: ctx.queue, kind: ctx.kind, max: ctx.maxAttempts });
      return { n2: n * n };
    });
    const c = client();
    const job = await c.enqueue("square", { n: 7 }, { queue, maxAttempts: 3, meta: { origin: "test" } });
    const pending = await c.getJob(job.id);
    assert.deepEqual([pending.id, pending.queue, pending.kind, pending.args], [job.id, queue, "square", { n: 7 }]);
    assert.equal(pending.maxAttempts, 3);
    assert.ok(["pending", "running"].includes(pending.state), pending.state);
    await running(w, async () => {
      const done = await waitState(c, job.id, ["completed", "dead"]);
      assert.equal(done.state, "completed");
      assert.deepEqual(done.result, { n2: 49 });
      assert.deepEqual(done.attempts.map((a) => a.outcome), ["completed"]);
      assert.deepEqual(await c.result(job.id), { n2: 49 });
      // With an HTTP address, results come from the long-poll route, not from polling.
      assert.equal(c.longPoll, true);
    });
    assert.deepEqual(rec.of("ran", job.id)[0].data, { origin: "test", queue, kind: "square", max: 3 });
    await c.close();
  });

  it("pages through a queue's jobs with listJobs", async (t) => {
    const queue = queueName(t);
    const c = client();
    const ids = (await c.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ kind: "k", args: { i }, queue })))).map((j) => j.id);
    const seen = [];
    let cursor = "";
    for (let i = 0; i < 10; i++) {
      const page = await c.listJobs({ queue, limit: 2, cursor });
      assert.ok(page.items.length <= 2);
      seen.push(...page.items.map((j) => j.id));
      if (page.nextCursor === null) break;
      cursor = page.nextCursor;
    }
    assert.deepEqual(seen.sort(), [...ids].sort());
    const pending = await c.listJobs({ queue, state: "pending" });
    assert.deepEqual(pending.items.map((j) => j.id).sort(), [...ids].sort());
    await c.close();
  });
});

describe("typed tasks", () => {
  it("enqueue, enqueueMany, schedule and run go through the schema and the worker", async (t) => {
    const queue = queueName(t);
    const pg = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
    const seen = [];
    const greet = pg.task({
      name: "greet",
      queue,
      retries: 2,
      input: z.object({ name: z.string().min(1), times: z.number().int().default(1) }),
      fn: async (input, ctx) => {
        seen.push({ input, attempt: ctx.attempt, max: ctx.maxAttempts });
        return { text: `hello ${input.name}`.repeat(input.times) };
      },
    });
    const w = pg.worker({ tasks: [greet], concurrency: 4, handleSignals: false, logger: quiet });
    assert.deepEqual(w.queues, [queue]);
    await running(w, async () => {
      // run(): enqueue and await the result; the default (times: 1) is applied in the worker.
      assert.deepEqual(await greet.run({ name: "ada" }), { text: "hello ada" });
      assert.deepEqual(seen[0], { input: { name: "ada", times: 1 }, attempt: 1, max: 3 });
      const many = await greet.enqueueMany([{ name: "a" }, { name: "b", times: 2 }]);
      assert.deepEqual(await greet.result(many[1]), { text: "hello bhello b" });
      const later = await greet.schedule(Date.now() + 3_600_000, { name: "later" });
      const info = await pg.client.getJob(later);
      assert.equal(info.state, "scheduled");
      assert.ok(info.runAt && info.runAt.getTime() > Date.now() + 3_000_000);
    });
    await pg.close();
  });

  it("run() rejects with JobFailedError when the job is dead-lettered", async (t) => {
    const queue = queueName(t);
    const pg = new Pgferry({ url: server.grpcUrl, apiKey: server.apiKey });
    const boom = pg.task({
      name: "boom",
      queue,
      retries: 0,
      fn: () => {
        throw new RangeError("never works");
      },
    });
    const w = pg.worker({ tasks: [boom], handleSignals: false, logger: quiet });
    await running(w, async () => {
      const err = await boom.run({}).then(
        () => assert.fail("run() resolved"),
        (e) => e,
      );
      assert.ok(err instanceof JobFailedError, String(err));
      assert.equal(err.job.state, "dead");
      assert.match(err.message, /never works/);
      assert.match(err.job.attempts.at(-1).errorKind + err.job.attempts.at(-1).error, /RangeError/);
    });
    await pg.close();
  });
});

describe("transports", () => {
  it("an HTTP-only client enqueues, looks up and administers", async (t) => {
    const queue = queueName(t);
    const c = new Client({ httpUrl: server.httpUrl, apiKey: server.apiKey });
    assert.equal(c.transport, "http");
    const one = await c.enqueue("k", { x: 1 }, { queue, priority: 2, uniqueKey: "u1" });
    const dup = await c.enqueue("k", { x: 1 }, { queue, uniqueKey: "u1" });
    assert.deepEqual([dup.id, dup.duplicate], [one.id, true]);
    const batch = await c.enqueueMany([{ kind: "k", queue }, { kind: "k", queue, delayMs: 3_600_000 }]);
    assert.equal(batch.length, 2);
    const info = await c.getJob(one);
    // (GET /v1/jobs/{id} does not report unique_key; the gRPC GetJob does.)
    assert.deepEqual([info.kind, info.args, info.priority], ["k", { x: 1 }, 2]);
    assert.equal((await c.getJob(batch[1])).state, "scheduled");
    const q = await c.updateQueue(queue, { leaseMs: 5000, maxAttempts: 7 });
    assert.deepEqual([q.name, q.settings.leaseMs, q.settings.maxAttempts], [queue, 5000, 7]);
    assert.equal((await c.cancel(one)).state, "cancelled");
    const bulk = await c.cancelJobs(queue);
    assert.equal(bulk.pending + bulk.scheduled, 2);
  });

  it("queue admin over the gRPC Admin service (no HTTP address given)", async (t) => {
    const queue = queueName(t);
    const c = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
    const job = await c.enqueue("k", {}, { queue });
    assert.equal((await c.getJob(job)).kind, "k");
    const q = await c.updateQueue(queue, { leaseMs: 5000, maxAttempts: 7, durability: "async" });
    assert.deepEqual([q.name, q.settings.leaseMs, q.settings.maxAttempts, q.durability], [queue, 5000, 7, "async"]);
    assert.equal((await c.pauseQueue(queue)).paused, true);
    assert.equal((await c.resumeQueue(queue)).paused, false);
    const listed = (await c.listQueues()).find((x) => x.name === queue);
    assert.ok(listed);
    assert.equal(listed.counts.enqueued >= 0, true);
    await c.close();
  });

  it("an idempotency key writes a request once; repeats answer the first ids (gRPC and HTTP)", async (t) => {
    const queue = queueName(t);
    const clients = [
      new Client({ url: server.grpcUrl, apiKey: server.apiKey }),
      new Client({ httpUrl: server.httpUrl, apiKey: server.apiKey }),
    ];
    for (const c of clients) {
      const key = `once-${queue}-${c.transport}`;
      const first = await c.enqueue("k", { n: 1 }, { queue, idempotencyKey: key });
      const again = await c.enqueue("k", { n: 1 }, { queue, idempotencyKey: key });
      assert.deepEqual([first.replayed, again.replayed, again.id], [false, true, first.id]);
      const jobs = [
        { kind: "k", args: { n: 2 }, queue },
        { kind: "k", args: { n: 3 }, queue },
      ];
      const b1 = await c.enqueueMany(jobs, { idempotencyKey: `${key}-batch` });
      const b2 = await c.enqueueMany(jobs, { idempotencyKey: `${key}-batch` });
      assert.deepEqual(b2.map((j) => j.id), b1.map((j) => j.id));
      assert.ok(b2.every((j) => j.replayed) && !b1.some((j) => j.replayed));
      // The same key for other jobs is refused, naming the key.
      const e = await c.enqueue("other", { n: 9 }, { queue, idempotencyKey: key }).then(
        () => assert.fail("a reused key was accepted"),
        (err) => err,
      );
      assert.ok(e instanceof InvalidArgument, String(e));
    }
    // Each transport wrote its three jobs once.
    assert.equal((await clients[0].listJobs({ queue, limit: 100 })).items.length, 6);
    for (const c of clients) await c.close();
  });
});
