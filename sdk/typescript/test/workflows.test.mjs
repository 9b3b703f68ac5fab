// Workflows against a real server: code-first (steps journaled and never run twice, one
// outcome per step, durable sleep, signals early and late and timed out, children, step
// retries and failures, cancel, non-determinism parked then fixed by a retry, replay after
// a worker is SIGKILLed) and state machines (await, spawn/join, done), through the gRPC
// WorkflowWorker stream and WorkflowAdmin, and the HTTP fallback for admin calls.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { appendFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import {
  Client,
  NonDeterminismError,
  Pgferry,
  Step,
  StepFailed,
  ValidationError,
  WorkflowFailedError,
} from "../dist/esm/index.js";
import { Server, binary } from "./helpers/server.mjs";
import { WAIT, pollUntil, queueName, quiet, running } from "./helpers/util.mjs";

const APP = join(dirname(fileURLToPath(import.meta.url)), "apps/wf-kill-app.mjs");

let server;
let pg;
before(async () => {
  server = await Server.start("workflows");
  pg = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
});
after(async () => {
  await pg?.close();
  await server?.cleanup();
});

const wfWorker = (workflows, queue, extra = {}) =>
  pg.workflowWorker({ workflows, queues: [queue], handleSignals: false, logger: quiet, concurrency: 4, ...extra });

/** Waits until the instance has one of `statuses`. */
async function waitStatus(id, statuses) {
  let last;
  await pollUntil(async () => {
    last = await pg.client.workflows.get(id);
    return statuses.includes(last.status);
  }, `workflow ${id} in ${statuses}`);
  return last;
}

describe("code-first workflows", () => {
  it("steps run once each, their results are journaled, and each step costs one outcome", async (t) => {
    const queue = queueName(t);
    const runs = { charge: 0, ship: 0, notify: 0 };
    const order = pg.workflow({
      name: `order_${queue}`,
      queue,
      input: z.object({ amount: z.number(), items: z.array(z.string()) }),
      fn: async (ctx, o) => {
        const charged = await ctx.step("charge", () => {
          runs.charge++;
          return { id: `ch_${o.amount}` };
        });
        const shipped = await ctx.step("ship", async () => {
          runs.ship++;
          return o.items.length;
        });
        await ctx.step("notify", () => {
          runs.notify++;
        });
        return { charge: charged.id, shipped };
      },
    });
    const w = wfWorker([order], queue);
    await running(w, async () => {
      const h = await order.start({ amount: 30, items: ["a", "b"] });
      assert.deepEqual(await h.result({ timeoutMs: WAIT }), { charge: "ch_30", shipped: 2 });
      const info = await h.describe();
      assert.equal(info.status, "done");
      // The journal is the state: every step but the last was written by a `next`.
      assert.deepEqual(
        info.state.journal.map((e) => [e.t, e.name, e.ok]),
        [
          ["step", "charge", { id: "ch_30" }],
          ["step", "ship", 2],
        ],
      );
      assert.deepEqual(info.history.map((h) => h.outcome), ["next", "next", "done"]);
    });
    assert.deepEqual(runs, { charge: 1, ship: 1, notify: 1 });
    assert.equal(w.stats.steps, 3, "three claims for three steps");
    assert.equal(w.stats.applied, 3);
  });

  it("the input is validated at start (nothing started) and typed errors name the field", async (t) => {
    const queue = queueName(t);
    const wf = pg.workflow({ name: `typed_${queue}`, queue, input: z.object({ n: z.number() }), fn: async (_c, i) => i.n });
    await assert.rejects(wf.start({ n: "x" }), (e) => e instanceof ValidationError && e.field === "input.n");
    const page = await pg.client.workflows.list(queue);
    assert.equal(page.instances.length, 0);
  });

  it("sleep parks durably; waitForSignal takes an early signal, a late one, and times out", async (t) => {
    const queue = queueName(t);
    const seen = [];
    const wf = pg.workflow({
      name: `waits_${queue}`,
      queue,
      fn: async (ctx) => {
        const t0 = await ctx.now();
        await ctx.sleep(300);
        const t1 = await ctx.now();
        const early = await ctx.waitForSignal("early");
        await ctx.step("mark", () => seen.push("waiting for late"));
        const late = await ctx.waitForSignal(["late", "other"], { timeoutMs: 60_000 });
        const none = await ctx.waitForSignal("never", { timeoutMs: 200 });
        return { slept: t1.getTime() - t0.getTime(), early: early.payload, late: [late.name, late.payload], none };
      },
    });
    const w = wfWorker([wf], queue);
    await running(w, async () => {
      const h = await wf.start({});
      // Sent before the instance waits for it: kept in its inbox.
      const sent = await h.signal("early", { v: 1 });
      assert.equal(sent.instanceId, h.id);
      await pollUntil(() => seen.length > 0, "the step after the early signal");
      await waitStatus(h.id, ["awaiting"]);
      const late = await pg.client.workflows.signal(h.id, "late", "hello");
      assert.equal(late.delivered, true);
      const r = await h.result({ timeoutMs: WAIT });
      assert.ok(r.slept >= 300, `slept ${r.slept} ms`);
      assert.deepEqual(r.early, { v: 1 });
      assert.deepEqual(r.late, ["late", "hello"]);
      assert.equal(r.none, null);
      const info = await h.describe();
      assert.ok(info.history.some((x) => x.outcome === "sleep"));
      assert.ok(info.history.some((x) => x.outcome === "await"));
    });
    assert.equal(seen.length, 1, "the step between the waits ran once");
  });

  it("children: child, fanOut (a failed child is delivered, not fatal) and firstOf", async (t) => {
    const queue = queueName(t);
    const square = pg.workflow({
      name: `square_${queue}`,
      queue,
      fn: async (ctx, n) => {
        if (n < 0) throw new Error(`negative: ${n}`);
        return ctx.step("sq", () => n * n);
      },
    });
    const parent = pg.workflow({
      name: `parent_${queue}`,
      queue,
      fn: async (ctx, ns) => {
        const one = await ctx.child(square, 7);
        const all = await ctx.fanOut(square, ns);
        const first = await ctx.firstOf(square, [3]);
        const raw = await ctx.spawn([{ kind: square.name, input: 2 }]);
        return {
          one,
          ok: all.filter((r) => r.status === "fulfilled").map((r) => r.value),
          failed: all.filter((r) => r.status === "rejected").map((r) => r.reason.child.error),
          first,
          raw: raw.map((c) => [c.status, c.result]),
        };
      },
    });
    const w = wfWorker([parent, square], queue);
    await running(w, async () => {
      const r = await parent.run([1, -2, 3], { timeoutMs: WAIT });
      assert.equal(r.one, 49);
      assert.deepEqual(r.ok, [1, 9]);
      assert.equal(r.failed.length, 1);
      assert.match(r.failed[0], /negative: -2/);
      assert.equal(r.first, 9);
      assert.deepEqual(r.raw, [["done", 4]]);
    });
  });

  it("a failing step retries with backoff; after its retries the error is recorded and thrown again on replay", async (t) => {
    const queue = queueName(t);
    let flaky = 0;
    let broken = 0;
    const wf = pg.workflow({
      name: `retries_${queue}`,
      queue,
      fn: async (ctx) => {
        const v = await ctx.step(
          "flaky",
          () => {
            flaky++;
            if (flaky < 3) throw new Error(`flaky ${flaky}`);
            return "ok";
          },
          { retries: 5, backoffMs: 10 },
        );
        let caught = "";
        try {
          await ctx.step(
            "broken",
            () => {
              broken++;
              throw new Error("always");
            },
            { retries: 1, backoffMs: 10 },
          );
        } catch (e) {
          caught = e instanceof StepFailed ? `${e.step}: ${e.detail}` : "other";
        }
        await ctx.step("after", () => 1); // forces a replay past the recorded failure
        return { v, caught };
      },
    });
    const w = wfWorker([wf], queue);
    await running(w, async () => {
      const r = await wf.run({}, { timeoutMs: WAIT });
      assert.deepEqual(r, { v: "ok", caught: "broken: always" });
    });
    assert.equal(flaky, 3);
    assert.equal(broken, 2, "first run + one retry, then recorded");
  });

  it("an uncaught error fails the instance: result() rejects with WorkflowFailedError", async (t) => {
    const queue = queueName(t);
    const wf = pg.workflow({
      name: `fails_${queue}`,
      queue,
      fn: async (ctx) => {
        await ctx.step("one", () => 1);
        throw new Error("no stock");
      },
    });
    const w = wfWorker([wf], queue);
    await running(w, async () => {
      const h = await wf.start(null);
      await assert.rejects(h.result({ timeoutMs: WAIT }), (e) => {
        assert.ok(e instanceof WorkflowFailedError && !(e instanceof NonDeterminismError));
        assert.equal(e.instance.status, "failed");
        assert.match(e.instance.error, /no stock/);
        return true;
      });
    });
  });

  it("cancel aborts the running step's signal and ends the instance cancelled", async (t) => {
    const queue = queueName(t);
    let started = false;
    let abortedWith = null;
    const wf = pg.workflow({
      name: `cancel_${queue}`,
      queue,
      fn: async (ctx) =>
        ctx.step("long", () =>
          new Promise((resolve) => {
            started = true;
            ctx.signal.addEventListener("abort", () => {
              abortedWith = String(ctx.signal.reason?.message);
              resolve("stopped");
            });
          }),
        ),
    });
    const w = wfWorker([wf], queue);
    await running(w, async () => {
      const h = await wf.start(null);
      await pollUntil(() => started, "the long step started");
      const info = await h.cancel("user asked");
      assert.equal(info.status, "cancelled");
      await pollUntil(() => abortedWith !== null, "the step's signal aborted");
      assert.match(abortedWith, /cancelled/);
      await assert.rejects(h.result({ timeoutMs: WAIT }), (e) => e instanceof WorkflowFailedError && e.code === "cancelled");
      await pollUntil(() => w.stats.cancelled === 1, "the outcome answered cancelled");
    });
  });

  it("changed code parks the instance failed with non-determinism; the fixed deploy's retry finishes it", async (t) => {
    const queue = queueName(t);
    const name = `evolving_${queue}`;
    const ran = [];
    const v1 = (p) =>
      p.workflow({
        name,
        queue,
        fn: async (ctx) => {
          const a = await ctx.step("reserve", () => {
            ran.push("reserve");
            return 1;
          });
          const go = await ctx.waitForSignal("go");
          const b = await ctx.step("charge", () => {
            ran.push("charge");
            return 2;
          });
          return a + b + go.payload;
        },
      });
    const v2 = pg.workflow({
      name,
      queue,
      fn: async (ctx) => {
        await ctx.step("reserve_v2", () => ran.push("reserve_v2"));
        return 0;
      },
    });
    const h = await v1(pg).start(null);
    await running(wfWorker([v1(pg)], queue), async () => {
      await waitStatus(h.id, ["awaiting"]);
    });
    await h.signal("go", 10);
    await running(wfWorker([v2], queue), async () => {
      const err = await h.result({ timeoutMs: WAIT }).catch((e) => e);
      assert.ok(err instanceof NonDeterminismError, String(err));
      assert.match(err.instance.error, /^non-determinism: .*position 0: recorded step "reserve", the code now calls step "reserve_v2"/);
    });
    assert.deepEqual(ran, ["reserve"], "nothing ran on the diverged code");
    await running(wfWorker([v1(pg)], queue), async () => {
      await h.retry();
      assert.equal(await h.result({ timeoutMs: WAIT }), 13);
    });
    assert.deepEqual(ran, ["reserve", "charge"]);
  });

  it("now() and random() are recorded: every replay sees the first run's values", async (t) => {
    const queue = queueName(t);
    const seen = [];
    const wf = pg.workflow({
      name: `recorded_${queue}`,
      queue,
      fn: async (ctx) => {
        const at = await ctx.now();
        const r = await ctx.random();
        seen.push([at.getTime(), r]);
        await ctx.sleep(50);
        await ctx.step("s", () => 1);
        return [at.getTime(), r];
      },
    });
    await running(wfWorker([wf], queue), async () => {
      const [at, r] = await wf.run(null, { timeoutMs: WAIT });
      assert.equal(seen.length, 2, "the first run and one replay after the sleep");
      for (const v of seen) assert.deepEqual(v, [at, r]);
      assert.ok(Number.isInteger(r) && r >= 0);
    });
  });

  it("patched(): instances from before the change keep the old path, new ones take the new", async (t) => {
    const queue = queueName(t);
    const name = `patched_${queue}`;
    const ran = [];
    const before = pg.workflow({
      name,
      queue,
      fn: async (ctx) => {
        await ctx.step("reserve", () => ran.push("reserve"));
        await ctx.waitForSignal("go");
        return "old";
      },
    });
    const after = pg.workflow({
      name,
      queue,
      fn: async (ctx) => {
        const v2 = await ctx.patched("reserve-v2");
        await ctx.step(v2 ? "reserve_v2" : "reserve", () => ran.push(v2 ? "reserve_v2" : "reserve"));
        await ctx.waitForSignal("go");
        return v2 ? "new" : "old path";
      },
    });
    const old = await before.start(null);
    await running(wfWorker([before], queue), async () => {
      await waitStatus(old.id, ["awaiting"]);
    });
    await running(wfWorker([after], queue), async () => {
      const fresh = await after.start(null);
      await waitStatus(fresh.id, ["awaiting"]);
      await old.signal("go");
      await fresh.signal("go");
      assert.equal(await old.result({ timeoutMs: WAIT }), "old path");
      assert.equal(await fresh.result({ timeoutMs: WAIT }), "new");
      assert.deepEqual((await fresh.describe()).state.journal[0], { t: "patch", name: "reserve-v2" });
    });
    assert.deepEqual(ran, ["reserve", "reserve_v2"]);
  });

  it("a worker SIGKILLed in the middle of a step: the next worker replays, journaled steps do not run again", async (t) => {
    const queue = queueName(t);
    const log = join(server.dataDir, `wf-kill-${queue}.log`);
    writeFileSync(log, "");
    const proc = spawn(process.execPath, [APP], {
      env: { ...process.env, PGFERRY_URL: server.grpcUrl, PGFERRY_API_KEY: server.apiKey, WF_QUEUE: queue, WF_LOG: log },
      stdio: ["ignore", "inherit", "inherit"],
    });
    const exited = new Promise((r) => proc.once("exit", r));
    try {
      const h = await pg.client.workflows.start("killable", { n: 41 }, { queue });
      await pollUntil(() => readFileSync(log, "utf8").includes("two "), "step two started in the child");
      proc.kill("SIGKILL");
      await exited;
      const lines = () => readFileSync(log, "utf8").trim().split("\n");
      // The same workflow in this process, whose step two finishes.
      const killable = pg.workflow({
        name: "killable",
        queue,
        fn: async (ctx, input) => {
          const a = await ctx.step("one", () => {
            appendFileSync(log, `one ${process.pid}\n`);
            return input.n + 1;
          });
          const b = await ctx.step("two", () => {
            appendFileSync(log, `two ${process.pid}\n`);
            return 2;
          });
          return { a, b };
        },
      });
      await running(wfWorker([killable], queue), async () => {
        assert.deepEqual(await pg.client.workflows.result(h.id, { timeoutMs: WAIT }), { a: 42, b: 2 });
      });
      const got = lines();
      assert.equal(got.filter((l) => l.startsWith("one ")).length, 1, `step one ran once: ${got}`);
      assert.deepEqual(
        got.filter((l) => l.startsWith("two ")).map((l) => l.split(" ")[1]),
        [String(proc.pid), String(process.pid)],
        "step two ran in the killed worker, then again here",
      );
      const info = await pg.client.workflows.get(h.id);
      assert.equal(info.attempt, 2, "the lapsed lease cost one attempt");
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    }
  });
});

describe("state machines", () => {
  it("await a signal, spawn children and join them, then done", async (t) => {
    const queue = queueName(t);
    const pack = pg.machine({
      name: `pack_${queue}`,
      queue,
      steps: { start: (s) => Step.done({ packed: s.input }) },
    });
    const order = pg.machine({
      name: `order_m_${queue}`,
      queue,
      inbox: true,
      children: true,
      steps: {
        start: (s) => Step.await(["paid"], "paid", { timeoutMs: 60_000, state: { items: s.input.items } }),
        paid: (s) => {
          assert.equal(s.wake, "signal");
          const amount = s.inbox[0].payload.amount;
          return Step.spawn(
            s.state.items.map((i) => ({ kind: pack.name, input: i })),
            "shipped",
            { state: { ...s.state, amount } },
          );
        },
        shipped: (s) => {
          assert.equal(s.wake, "children");
          return Step.done({ amount: s.state.amount, packed: s.children.map((c) => c.result.packed).sort() });
        },
      },
    });
    const w = wfWorker([order, pack], queue);
    await running(w, async () => {
      const h = await order.start({ items: ["x", "y"] }, { correlationKey: "order-1" });
      const again = await order.start({ items: [] }, { correlationKey: "order-1" });
      assert.equal(again.id, h.id);
      assert.equal(again.duplicate, true);
      await waitStatus(h.id, ["awaiting"]);
      await pg.client.workflows.signal({ queue, correlationKey: "order-1" }, "paid", { amount: 30 });
      assert.deepEqual(await h.result({ timeoutMs: WAIT }), { amount: 30, packed: ["x", "y"] });
      const info = await h.describe();
      assert.deepEqual(info.history.map((x) => [x.step, x.outcome]), [
        ["start", "await"],
        ["paid", "spawn"],
        ["shipped", "done"],
      ]);
    });
  });

  it("a throwing step handler is retried; an unknown step fails the instance", async (t) => {
    const queue = queueName(t);
    let n = 0;
    const m = pg.machine({
      name: `flaky_m_${queue}`,
      queue,
      steps: {
        start: () => {
          n++;
          if (n < 2) throw new Error("transient");
          return Step.next("nowhere");
        },
      },
    });
    await running(wfWorker([m], queue), async () => {
      const h = await m.start(null);
      const err = await h.result({ timeoutMs: WAIT }).catch((e) => e);
      assert.ok(err instanceof WorkflowFailedError);
      assert.match(err.instance.error, /no step "nowhere"/);
      assert.equal(n, 2);
      assert.equal(err.instance.history[0].outcome, "retry");
    });
  });
});

describe("admin over HTTP", () => {
  it("an HTTP-only client starts, signals, reads and awaits instances a gRPC worker runs", async (t) => {
    const queue = queueName(t);
    const http = new Client({ httpUrl: server.httpUrl, apiKey: server.apiKey });
    const wf = pg.workflow({
      name: `http_${queue}`,
      queue,
      fn: async (ctx, input) => {
        const s = await ctx.waitForSignal("go");
        return { input, got: s.payload };
      },
    });
    try {
      await running(wfWorker([wf], queue), async () => {
        const s = await http.workflows.start(wf.name, { a: 1 }, { queue, correlationKey: "k" });
        assert.equal(s.duplicate, false);
        await pollUntil(async () => (await http.workflows.get(s.id)).status === "awaiting", "awaiting");
        await http.workflows.signal(s.id, "go", [1, 2]);
        assert.deepEqual(await http.workflows.result(s.id, { timeoutMs: WAIT }), { input: { a: 1 }, got: [1, 2] });
        const page = await http.workflows.list(queue, { kind: wf.name });
        assert.deepEqual(page.instances.map((i) => i.id), [s.id]);
        await assert.rejects(http.workflows.get(999_999_999), (e) => e.code === "not_found");
      });
    } finally {
      await http.close();
    }
  });
});

describe("the journal format is Rust's", () => {
  // `pgferry workflow replay` replays recorded instances of its built-in code-first kinds
  // against the Rust code: instances a TypeScript worker ran must read as consistent when
  // the TypeScript code makes the same calls, and as divergent when it does not.
  const replay = (kind) =>
    new Promise((resolve) => {
      const p = spawn(binary(), ["workflow", "replay", "--kind", kind, "--database-url", server.databaseUrl], { stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      let err = "";
      p.stdout.on("data", (d) => (out += d));
      p.stderr.on("data", (d) => (err += d));
      p.on("exit", (code) => resolve({ code, out, err }));
    });

  it("Rust replays a TypeScript worker's code_three instances as consistent, and finds a divergence", async (t) => {
    assert.ok(server.databaseUrl, "the dev server printed its database URL");
    const queue = queueName(t);
    const three = (second) =>
      pg.workflow({
        name: "code_three",
        queue,
        fn: async (ctx, input) => {
          const a = await ctx.step("one", () => input.i);
          const b = await ctx.step(second, () => a + 1);
          return ctx.step("three", () => b + 1);
        },
      });
    await running(wfWorker([three("two")], queue), async () => {
      assert.equal(await three("two").run({ i: 5 }, { timeoutMs: WAIT }), 7);
    });
    const ok = await replay("code_three");
    assert.equal(ok.code, 0, `${ok.out}\n${ok.err}`);
    const report = JSON.parse(ok.out);
    assert.equal(report.instances, 1, ok.out);
    assert.equal(report.consistent, 1, ok.out);
    await running(wfWorker([three("two_b")], queue), async () => {
      assert.equal(await three("two_b").run({ i: 1 }, { timeoutMs: WAIT }), 3);
    });
    const bad = await replay("code_three");
    assert.equal(bad.code, 3, `${bad.out}\n${bad.err}`);
    const verdict = JSON.parse(bad.out);
    assert.equal(verdict.instances, 2, bad.out);
    assert.equal(verdict.consistent, 1, bad.out);
    assert.equal(verdict.divergent.length, 1, bad.out);
    assert.match(JSON.stringify(verdict.divergent[0]), /two_b/);
  });
});
