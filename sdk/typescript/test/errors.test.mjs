// Errors from the server (and from local validation) surface as typed errors with stable
// codes and the offending field in the caller's terms.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import {
  AuthError,
  Client,
  InvalidArgument,
  NotFound,
  PayloadTooLarge,
  Pgferry,
  PgferryError,
  Unavailable,
  ValidationError,
  Worker,
} from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { queueName, quiet } from "./helpers/util.mjs";

let server;
before(async () => {
  server = await Server.start("errors");
});
after(async () => {
  await server?.cleanup();
});

const rejects = async (p, cls) => {
  const e = await p.then(
    (v) => assert.fail(`resolved with ${JSON.stringify(v)}`),
    (err) => err,
  );
  assert.ok(e instanceof cls, `expected ${cls.name}, got ${e?.name}: ${e}`);
  assert.ok(e instanceof PgferryError);
  return e;
};

describe("typed errors", () => {
  it("a bad API key is AuthError for the client (gRPC and HTTP)", async (t) => {
    const c = new Client({ url: server.grpcUrl, apiKey: "pgf_not_a_real_key" });
    await rejects(c.enqueue("x", {}, { queue: queueName(t) }), AuthError);
    await rejects(c.getJob(1), AuthError);
    await c.close();
    const h = new Client({ httpUrl: server.httpUrl, apiKey: "pgf_not_a_real_key" });
    const e = await rejects(h.enqueue("x", {}, { queue: queueName(t) }), AuthError);
    assert.equal(e.code, "unauthenticated");
  });

  it("a worker with a bad key stops with AuthError instead of reconnecting", async (t) => {
    const w = new Worker({ url: server.grpcUrl, apiKey: "pgf_not_a_real_key", queues: [queueName(t)], handleSignals: false, logger: quiet });
    w.handle("x", () => {});
    await rejects(w.run(), AuthError);
    assert.equal(w.stats.reconnects, 0);
  });

  it("an invalid job is InvalidArgument naming the field; the stream survives it", async (t) => {
    const queue = queueName(t);
    for (const c of [
      new Client({ url: server.grpcUrl, apiKey: server.apiKey }),
      new Client({ httpUrl: server.httpUrl, apiKey: server.apiKey }),
    ]) {
      let e = await rejects(c.enqueue("x", {}, { queue, priority: 9 }), InvalidArgument);
      assert.match(e.field, /priority/);
      e = await rejects(c.enqueue("", {}, { queue }), InvalidArgument);
      assert.match(e.field, /kind/);
      e = await rejects(c.enqueue("x", {}, { queue: "Bad Queue!" }), InvalidArgument);
      assert.match(e.field, /queue/);
      // All or nothing: one bad job fails the batch and names its index.
      e = await rejects(c.enqueueMany([{ kind: "ok", queue }, { kind: "bad", queue, maxAttempts: 0 }]), InvalidArgument);
      assert.match(e.field, /jobs\[1\]/);
      assert.match(e.field, /max_attempts/);
      assert.ok((await c.enqueue("ok", {}, { queue })).id > 0);
      await c.close();
    }
  });

  it("an oversized payload is PayloadTooLarge", async (t) => {
    const queue = queueName(t);
    const c = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
    await c.enqueue("warmup", {}, { queue });
    const limit = c.maxPayloadBytes;
    assert.ok(limit > 0);
    const e = await rejects(c.enqueue("big", { blob: "x".repeat(limit + 10) }, { queue }), PayloadTooLarge);
    assert.equal(e.code, "payload_too_large");
    await c.close();
  });

  it("an unknown job is NotFound (gRPC and HTTP)", async () => {
    for (const c of [
      new Client({ url: server.grpcUrl, apiKey: server.apiKey }),
      new Client({ httpUrl: server.httpUrl, apiKey: server.apiKey }),
    ]) {
      await rejects(c.getJob(987_654_321_000), NotFound);
      await rejects(c.cancel(987_654_321_000), NotFound);
      await rejects(c.result(987_654_321_000), NotFound);
      await c.close();
    }
  });

  it("an unreachable server is Unavailable", async () => {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    const c = new Client({ url: "http://127.0.0.1:9", apiKey: "k", connectTimeoutMs: 500 });
    await rejects(c.enqueue("x", {}), Unavailable);
    await c.close();
    const h = new Client({ httpUrl: "http://127.0.0.1:9", apiKey: "k" });
    await rejects(h.getJob(1), Unavailable);
  });

  it("a worker that cannot reach its server keeps retrying, and stop() ends it", async () => {
    const w = new Worker({ url: "http://127.0.0.1:9", apiKey: "k", queues: ["q"], reconnectCapMs: 200, handleSignals: false, logger: quiet });
    w.handle("x", () => {});
    const run = w.run();
    const deadline = Date.now() + 30_000;
    while (w.stats.reconnects < 3) {
      assert.ok(Date.now() < deadline, "no reconnect attempts");
      await new Promise((r) => setTimeout(r, 20));
    }
    w.stop();
    await run;
  });

  it("local mistakes are refused before anything is sent", async () => {
    const c = new Client({ url: "http://127.0.0.1:9", apiKey: "k" });
    await assert.rejects(c.enqueue("x", {}, { delayMs: 1, runAt: new Date() }), TypeError);
    await assert.rejects(c.enqueue("x", {}, { delayMs: -1 }), RangeError);
    await assert.rejects(c.enqueue("x", {}, { runAt: new Date("nope") }), RangeError);
    await assert.rejects(c.enqueue("x", { big: 1n }), TypeError);
    await c.close();
  });

  it("a task's bad input is ValidationError naming the field, and nothing is enqueued", async (t) => {
    const queue = queueName(t);
    const pg = new Pgferry({ url: server.grpcUrl, apiKey: server.apiKey });
    const task = pg.task({
      name: "signup",
      queue,
      input: z.object({ email: z.email(), tags: z.array(z.string()) }),
      fn: () => {},
    });
    let e = await rejects(task.enqueue({ email: "a@b.co", tags: ["x", 5] }), ValidationError);
    assert.equal(e.field, "input.tags[1]");
    assert.equal(e.issues.length, 1);
    e = await rejects(task.enqueueMany([{ email: "a@b.co", tags: [] }, { email: "nope", tags: [] }]), ValidationError);
    assert.equal(e.field, "inputs[1].email");
    assert.equal((await pg.client.listJobs({ queue })).items.length, 0);
    await pg.close();
  });
});
