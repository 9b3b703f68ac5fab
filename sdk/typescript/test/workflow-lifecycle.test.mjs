// The workflow worker's lifecycle against a real server: stop() lets a running step finish
// and its outcome commit before run() resolves (the instance goes on in the next worker);
// a server restart in the middle of many instances: the worker reconnects, resends what
// was not acknowledged, and every instance ends done with the right result.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { Pgferry } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { WAIT, pollUntil, queueName, quiet, running } from "./helpers/util.mjs";

let server;
let pg;
before(async () => {
  server = await Server.start("wf-lifecycle");
  pg = new Pgferry({ url: server.grpcUrl, apiKey: server.apiKey, timeoutMs: 60_000, connectTimeoutMs: 120_000 });
});
after(async () => {
  await pg?.close();
  await server?.cleanup();
});

describe("workflow worker lifecycle", () => {
  it("stop() drains: the running step finishes and is recorded, the next worker goes on", async (t) => {
    const queue = queueName(t);
    let release;
    const gate = new Promise((r) => (release = r));
    const ran = [];
    const wf = (slowFirst) =>
      pg.workflow({
        name: `drain_${queue}`,
        queue,
        fn: async (ctx) => {
          const a = await ctx.step("slow", async () => {
            ran.push("slow");
            if (slowFirst) await gate;
            return 1;
          });
          const b = await ctx.step("after", () => {
            ran.push("after");
            return 2;
          });
          return a + b;
        },
      });
    const w1 = pg.workflowWorker({ workflows: [wf(true)], handleSignals: false, logger: quiet });
    const run1 = w1.run();
    await w1.ready();
    const h = await wf(true).start(null);
    await pollUntil(() => ran.length === 1, "the slow step started");
    w1.stop();
    let resolved = false;
    void run1.then(() => (resolved = true));
    await sleep(300);
    assert.equal(resolved, false, "run() waits for the running step");
    release();
    await run1;
    assert.equal(w1.stats.applied, 1, "its outcome was acknowledged before run() resolved");
    const mid = await h.describe();
    assert.deepEqual(mid.state.journal.map((e) => e.name), ["slow"]);
    await running(pg.workflowWorker({ workflows: [wf(false)], handleSignals: false, logger: quiet }), async () => {
      assert.equal(await h.result({ timeoutMs: WAIT }), 3);
    });
    assert.deepEqual(ran, ["slow", "after"], "no step ran twice");
  });

  it("heartbeats keep a step longer than its lease: it runs once and its outcome is applied", async (t) => {
    const queue = queueName(t);
    let runs = 0;
    const wf = pg.workflow({
      name: `long_${queue}`,
      queue,
      fn: async (ctx) =>
        ctx.step("long", async () => {
          runs++;
          await sleep(1_500);
          return "ok";
        }),
    });
    const w = pg.workflowWorker({ workflows: [wf], handleSignals: false, logger: quiet, leaseMs: 300 });
    await running(w, async () => {
      assert.equal(await wf.run(null, { timeoutMs: WAIT }), "ok");
    });
    assert.equal(runs, 1, "the lease never lapsed, so the step was never claimed again");
    assert.equal(w.stats.stale, 0);
  });

  it("a server restart mid-run: the worker reconnects and every instance ends done", async (t) => {
    const queue = queueName(t);
    const n = 40;
    const runs = new Map();
    const wf = pg.workflow({
      name: `restart_${queue}`,
      queue,
      fn: async (ctx, i) => {
        const a = await ctx.step("one", () => {
          runs.set(`${i}:one`, (runs.get(`${i}:one`) ?? 0) + 1);
          return i * 2;
        });
        await ctx.sleep(300);
        const b = await ctx.step("two", () => {
          runs.set(`${i}:two`, (runs.get(`${i}:two`) ?? 0) + 1);
          return a + 1;
        });
        return b;
      },
    });
    // A short lease: steps claimed just before the restart whose batch never arrived come back soon.
    const w = pg.workflowWorker({ workflows: [wf], handleSignals: false, logger: quiet, reconnectCapMs: 500, leaseMs: 2_000 });
    await running(w, async () => {
      const handles = [];
      for (let i = 0; i < n; i++) handles.push(await wf.start(i));
      await pollUntil(() => [...runs.keys()].filter((k) => k.endsWith(":one")).length >= n / 2, "half the instances past step one");
      await server.restart();
      const results = await Promise.all(handles.map((h) => h.result({ timeoutMs: WAIT })));
      assert.deepEqual(results, Array.from({ length: n }, (_, i) => i * 2 + 1));
      assert.ok(w.stats.reconnects >= 1, "the worker reconnected");
    });
    for (let i = 0; i < n; i++) {
      // At least once: a step whose outcome the restart lost may run again, never more than
      // once more per lost claim (here: at most one restart).
      for (const s of ["one", "two"]) {
        const c = runs.get(`${i}:${s}`) ?? 0;
        assert.ok(c >= 1 && c <= 2, `instance ${i} step ${s} ran ${c} times`);
      }
    }
  });
});
