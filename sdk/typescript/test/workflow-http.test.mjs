// The HTTP workflow worker (/v1/workflow-steps/*) against a real server, with a client that
// has only the HTTP address: a code-first workflow with steps, a signal and a child runs
// to done (each step once), a state machine too, and a cancel reaches a running step
// through the heartbeat answer.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Pgferry, Step, WorkflowFailedError } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { WAIT, pollUntil, queueName, quiet, running } from "./helpers/util.mjs";

let server;
let pg;
before(async () => {
  server = await Server.start("wf-http");
  pg = new Pgferry({ httpUrl: server.httpUrl, apiKey: server.apiKey });
});
after(async () => {
  await pg?.close();
  await server?.cleanup();
});

const worker = (workflows, extra = {}) => pg.httpWorkflowWorker({ workflows, handleSignals: false, logger: quiet, pollMs: 50, ...extra });

describe("HTTP workflow worker", () => {
  it("runs a code-first workflow with steps, a signal and a child; each step once", async (t) => {
    const queue = queueName(t);
    const runs = [];
    const child = pg.workflow({ name: `child_${queue}`, queue, fn: async (ctx, n) => ctx.step("double", () => n * 2) });
    const parent = pg.workflow({
      name: `parent_${queue}`,
      queue,
      fn: async (ctx, input) => {
        const a = await ctx.step("a", () => {
          runs.push("a");
          return input.n + 1;
        });
        const go = await ctx.waitForSignal("go", { timeoutMs: 60_000 });
        const doubled = await ctx.child(child, a);
        const b = await ctx.step("b", () => {
          runs.push("b");
          return doubled + go.payload;
        });
        return b;
      },
    });
    const w = worker([parent, child]);
    await running(w, async () => {
      const h = await parent.start({ n: 4 });
      await pollUntil(async () => (await h.describe()).status === "awaiting", "awaiting the signal");
      await h.signal("go", 100);
      assert.equal(await h.result({ timeoutMs: WAIT }), 110);
    });
    assert.deepEqual(runs, ["a", "b"]);
    // Parent: await, spawn, next (the joined child is written before step b runs), done;
    // child: done.
    assert.equal(w.stats.applied, 5);
    assert.equal(w.stats.lost, 0);
  });

  it("runs a state machine", async (t) => {
    const queue = queueName(t);
    const m = pg.machine({
      name: `m_${queue}`,
      queue,
      steps: {
        start: (s) => Step.sleep(50, "two", { n: s.input }),
        two: (s) => Step.done(s.state.n * 3),
      },
    });
    await running(worker([m]), async () => {
      assert.equal(await m.run(7, { timeoutMs: WAIT }), 21);
    });
  });

  it("a cancel aborts the running step through the heartbeat answer", async (t) => {
    const queue = queueName(t);
    let started = false;
    let reason = null;
    const wf = pg.workflow({
      name: `cancel_${queue}`,
      queue,
      fn: async (ctx) =>
        ctx.step("long", () =>
          new Promise((resolve) => {
            started = true;
            ctx.signal.addEventListener("abort", () => {
              reason = String(ctx.signal.reason?.message);
              resolve(0);
            });
          }),
        ),
    });
    const w = worker([wf], { leaseMs: 600 });
    await running(w, async () => {
      const h = await wf.start(null);
      await pollUntil(() => started, "the step started");
      await h.cancel("stop it");
      await pollUntil(() => reason !== null, "the step's signal aborted");
      assert.match(reason, /cancelled/);
      await assert.rejects(h.result({ timeoutMs: WAIT }), (e) => e instanceof WorkflowFailedError && e.code === "cancelled");
      await pollUntil(() => w.stats.cancelled === 1, "the outcome answered cancelled");
    });
  });
});
