// Handler outcomes against a real server: retry with backoff, dead letters and their
// retry, permanent failure, snooze, cancel of a running and of a pending job, heartbeats
// and leases, timeouts, schema validation in the worker, unique jobs, delays.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import { Cancel, Client, Fail, JobAborted, Pgferry, Snooze, Worker } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { Recorder, WAIT, httpPatchQueue, pollUntil, queueName, quiet, running, waitState } from "./helpers/util.mjs";

let server;
let c;
before(async () => {
  server = await Server.start("outcomes");
  c = new Client({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
});
after(async () => {
  await c?.close();
  await server?.cleanup();
});

const worker = (queue, extra = {}) =>
  new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], concurrency: 2, handleSignals: false, logger: quiet, ...extra });

describe("retries and dead letters", () => {
  it("a thrown error retries, then the job succeeds", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("flaky", (_, ctx) => {
      rec.add("ran", ctx);
      if (ctx.attempt < 3) throw new Error(`boom ${ctx.attempt}`);
      return "ok";
    });
    await httpPatchQueue(server, queue, { backoff_base_ms: 10, backoff_cap_ms: 50 });
    await running(w, async () => {
      const job = await c.enqueue("flaky", null, { queue, maxAttempts: 5 });
      await rec.waitUntil(() => rec.of("ran", job.id).length === 3, "three attempts");
      assert.deepEqual(rec.of("ran", job.id).map((e) => e.attempt), [1, 2, 3]);
      const done = await waitState(c, job.id, ["completed"]);
      assert.deepEqual(done.attempts.map((a) => a.outcome), ["failed", "failed", "completed"]);
      assert.match(done.attempts[0].error, /boom 1/);
    });
    assert.equal(w.stats.failed, 2);
    assert.equal(w.stats.completed, 1);
  });

  it("exhausted attempts dead-letter; retryDead runs the job again", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    let fixed = false;
    class StillBroken extends Error {
      name = "StillBroken";
    }
    const w = worker(queue).handle("always_fails", (_, ctx) => {
      rec.add("ran", ctx);
      if (!fixed) throw new StillBroken("still broken");
    });
    await httpPatchQueue(server, queue, { backoff_base_ms: 10, backoff_cap_ms: 50 });
    await running(w, async () => {
      const job = await c.enqueue("always_fails", {}, { queue, maxAttempts: 2 });
      const info = await waitState(c, job.id, ["dead"]);
      assert.equal(rec.of("ran", job.id).length, 2);
      const last = info.attempts.at(-1);
      assert.equal(last.outcome, "dead");
      assert.match(last.error, /still broken/);
      assert.match(last.errorKind + last.error, /StillBroken/);
      const dead = await c.listDead({ queue });
      assert.ok(dead.items.some((d) => d.id === job.id));
      fixed = true;
      assert.equal(await c.retryDead({ queue, ids: [job.id] }), 1);
      await waitState(c, job.id, ["completed"]);
      assert.equal(rec.of("ran", job.id).length, 3);
    });
  });

  it("Fail({ permanent: true }) dead-letters at once; purgeDead removes it", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("bad_input", (_, ctx) => {
      rec.add("ran", ctx);
      throw new Fail("input can never work", { permanent: true });
    });
    await running(w, async () => {
      const job = await c.enqueue("bad_input", {}, { queue, maxAttempts: 10 });
      const info = await waitState(c, job.id, ["dead"]);
      assert.equal(rec.of("ran", job.id).length, 1);
      assert.match(info.attempts.at(-1).error, /input can never work/);
      assert.equal(await c.purgeDead({ queue, ids: [job.id] }), 1);
      assert.equal((await c.listDead({ queue })).items.length, 0);
    });
  });

  it("a task's input that fails the schema in the worker dead-letters without retries", async (t) => {
    const queue = queueName(t);
    const pg = new Pgferry({ url: server.grpcUrl, apiKey: server.apiKey });
    let ran = 0;
    const strict = pg.task({
      name: "strict",
      queue,
      input: z.object({ email: z.email() }),
      fn: () => {
        ran++;
      },
    });
    const w = pg.worker({ tasks: [strict], handleSignals: false, logger: quiet });
    await running(w, async () => {
      // A producer without the schema (plain client) sends what the task refuses.
      const job = await c.enqueue("strict", { email: "not-an-address" }, { queue, maxAttempts: 5 });
      const info = await waitState(c, job.id, ["dead"]);
      assert.equal(info.attempts.length, 1);
      assert.match(info.attempts[0].errorKind + info.attempts[0].error, /ValidationError/);
      assert.match(info.attempts[0].error, /input\.email/);
    });
    assert.equal(ran, 0);
    await pg.close();
  });
});

describe("snooze, cancel, timeout", () => {
  it("Snooze runs the job again without using an attempt", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("later", (_, ctx) => {
      rec.add("ran", ctx);
      if (rec.of("ran", ctx.id).length < 3) throw new Snooze(200);
      return "done";
    });
    await running(w, async () => {
      // maxAttempts 1: if a snooze used up an attempt, the second run would never come.
      const job = await c.enqueue("later", {}, { queue, maxAttempts: 1 });
      await rec.waitUntil(() => rec.of("ran", job.id).length === 3, "three runs after two snoozes");
      await pollUntil(() => w.stats.acked === 3, "the three results to be acked");
      assert.equal((await waitState(c, job.id, ["completed"])).result, "done");
    });
    assert.deepEqual([w.stats.snoozed, w.stats.completed, w.stats.stale], [2, 1, 0]);
  });

  it("cancel reaches a running job through ctx.signal", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("long", async (_, ctx) => {
      rec.add("started", ctx);
      await new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error("never cancelled")), WAIT);
        ctx.signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        });
      });
      rec.add("saw_cancel", ctx, ctx.signal.reason instanceof JobAborted ? ctx.signal.reason.reason : "?");
      ctx.throwIfAborted();
    });
    await running(w, async () => {
      const job = await c.enqueue("long", {}, { queue });
      await rec.waitUntil(() => rec.ids("started").includes(job.id), "the job to start");
      await c.cancel(job.id);
      await rec.waitUntil(() => rec.ids("saw_cancel").includes(job.id), "the worker to see the cancel");
      assert.equal(rec.of("saw_cancel", job.id)[0].data, "cancelled");
      const info = await waitState(c, job.id, ["cancelled"]);
      assert.equal(info.state, "cancelled");
      assert.equal(rec.of("started", job.id).length, 1);
      await pollUntil(() => w.stats.cancelled === 1, "the cancelled outcome");
    });
  });

  it("a cancelled pending job never runs", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("k", ({ n }, ctx) => rec.add("ran", ctx, n));
    const doomed = await c.enqueue("k", { n: 0 }, { queue });
    await c.cancel(doomed);
    await running(w, async () => {
      const marker = await c.enqueue("k", { n: 1 }, { queue });
      await rec.waitUntil(() => rec.ids("ran").includes(marker.id), "a later job to run");
      assert.ok(!rec.ids("ran").includes(doomed.id));
      assert.equal((await c.getJob(doomed)).state, "cancelled");
    });
  });

  it("Cancel thrown by the handler ends the job cancelled", async (t) => {
    const queue = queueName(t);
    const w = worker(queue).handle("give_up", () => {
      throw new Cancel("not needed any more");
    });
    await running(w, async () => {
      const job = await c.enqueue("give_up", {}, { queue, maxAttempts: 5 });
      const info = await waitState(c, job.id, ["cancelled"]);
      assert.equal(info.attempts.length, 1);
    });
  });

  it("a task's timeout aborts its signal and fails the attempt (retryable)", async (t) => {
    const queue = queueName(t);
    const pg = new Pgferry({ url: server.grpcUrl, apiKey: server.apiKey });
    const reasons = [];
    const slow = pg.task({
      name: "slow",
      queue,
      retries: 1,
      timeoutMs: 200,
      fn: async (_, ctx) => {
        if (ctx.attempt === 2) return "fast enough";
        await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
        reasons.push(ctx.signal.reason.reason);
        return "too late";
      },
    });
    await httpPatchQueue(server, queue, { backoff_base_ms: 10, backoff_cap_ms: 50 });
    const w = pg.worker({ tasks: [slow], handleSignals: false, logger: quiet });
    await running(w, async () => {
      assert.equal(await slow.run({}), "fast enough");
      const [job] = (await c.listJobs({ queue })).items;
      assert.equal(job.attempts[0].outcome, "failed");
      assert.match(job.attempts[0].errorKind + job.attempts[0].error, /TimeoutError/);
    });
    assert.deepEqual(reasons, ["timeout"]);
    await pg.close();
  });
});

describe("heartbeats and leases", () => {
  it("heartbeats keep a long job past its lease", async (t) => {
    const queue = queueName(t);
    const leaseMs = 1500;
    const rec = new Recorder();
    const w = worker(queue).handle("slow", async ({ beats }, ctx) => {
      rec.add("started", ctx);
      for (let i = 0; i < beats; i++) {
        await sleep(leaseMs / 3);
        const before = ctx.leaseUntilMs;
        const held = await ctx.heartbeat();
        rec.add("beat", ctx, { held, moved: ctx.leaseUntilMs > before });
      }
      rec.add("done", ctx);
    });
    await httpPatchQueue(server, queue, { lease_ms: leaseMs });
    await running(w, async () => {
      // Runs ~4 leases long, heartbeating three times per lease.
      const job = await c.enqueue("slow", { beats: 12 }, { queue, maxAttempts: 3 });
      await rec.waitUntil(() => rec.ids("done").includes(job.id), "the long job to finish");
      await pollUntil(() => w.stats.acked === 1, "the result to be acked");
      assert.deepEqual(rec.of("beat", job.id).map((e) => e.data.held), Array(12).fill(true));
      assert.ok(rec.of("beat", job.id).every((e) => e.data.moved), "a heartbeat did not move the lease");
      assert.equal(rec.of("started", job.id).length, 1, "the job was handed out twice");
    });
    assert.deepEqual([w.stats.stale, w.stats.completed], [0, 1]);
  });

  it("without heartbeats the same short lease expires and the job is rescued", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("stuck", async (_, ctx) => {
      rec.add("started", ctx);
      // Outlive the lease without heartbeating; the first result comes too late.
      if (ctx.attempt === 1) await rec.waitUntil(() => rec.of("started", ctx.id).length >= 2, "the rescue");
    });
    await httpPatchQueue(server, queue, { lease_ms: 1000 });
    await running(w, async () => {
      const job = await c.enqueue("stuck", {}, { queue, maxAttempts: 3 });
      await rec.waitUntil(() => rec.of("started", job.id).length >= 2, "a second delivery");
      await pollUntil(() => w.stats.acked >= 2, "both results to be acked");
      assert.deepEqual(rec.of("started", job.id).slice(0, 2).map((e) => e.attempt), [1, 2]);
    });
    assert.ok(w.stats.stale >= 1, `stale ${w.stats.stale}`);
  });
});

describe("unique jobs and scheduling", () => {
  it("a unique key returns the existing job, in single and batch enqueues", async (t) => {
    const queue = queueName(t);
    const first = await c.enqueue("report", { day: 1 }, { queue, uniqueKey: "report:day1" });
    const again = await c.enqueue("report", { day: 1 }, { queue, uniqueKey: "report:day1" });
    const other = await c.enqueue("report", { day: 2 }, { queue, uniqueKey: "report:day2" });
    assert.deepEqual([first.duplicate, again.duplicate, other.duplicate], [false, true, false]);
    assert.equal(again.id, first.id);
    assert.notEqual(other.id, first.id);
    const batch = await c.enqueueMany([
      { kind: "report", args: { day: 1 }, queue, uniqueKey: "report:day1" },
      { kind: "report", args: { day: 3 }, queue, uniqueKey: "report:day3" },
    ]);
    assert.deepEqual(batch.map((b) => [b.id === first.id, b.duplicate]), [[true, true], [false, false]]);
  });

  it("a unique key is released when its job completes", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("sync_account", (_, ctx) => rec.add("ran", ctx));
    await running(w, async () => {
      const first = await c.enqueue("sync_account", {}, { queue, uniqueKey: "acct:7" });
      await rec.waitUntil(() => rec.ids("ran").includes(first.id), "the first unique job");
      await pollUntil(() => w.stats.acked === 1, "its completion to commit");
      const second = await c.enqueue("sync_account", {}, { queue, uniqueKey: "acct:7" });
      assert.ok(!second.duplicate && second.id !== first.id);
      await rec.waitUntil(() => rec.ids("ran").includes(second.id), "the second unique job");
    });
  });

  it("delayMs and runAt hold a job until due", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const w = worker(queue).handle("tick", (_, ctx) => rec.add("ran", ctx));
    await running(w, async () => {
      const later = await c.enqueue("tick", {}, { queue, delayMs: 3_600_000 });
      const at = await c.enqueue("tick", {}, { queue, runAt: new Date(Date.now() + 3_600_000) });
      const soon = await c.enqueue("tick", {}, { queue, delayMs: 300 });
      const now = await c.enqueue("tick", {}, { queue });
      await rec.waitUntil(() => [soon.id, now.id].every((id) => rec.ids("ran").includes(id)), "the due jobs");
      assert.ok(!rec.ids("ran").includes(later.id) && !rec.ids("ran").includes(at.id));
      assert.equal((await c.getJob(at)).state, "scheduled");
    });
  });
});
