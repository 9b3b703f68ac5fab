// Process lifecycle: a drain on SIGTERM loses nothing; a server restart mid-run is
// survived by producers and workers, and the ledger of job ids balances.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { Client, Unavailable, Worker } from "../dist/esm/index.js";
import { Server, dataDir } from "./helpers/server.mjs";
import { Recorder, WAIT, httpPatchQueue, queueName, quiet, running } from "./helpers/util.mjs";

const APP = fileURLToPath(new URL("./apps/drain-app.mjs", import.meta.url));

function readLog(path) {
  const starts = [];
  const ends = [];
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const [what, id] = line.split(" ");
    if (what === "start") starts.push(Number(id));
    if (what === "end") ends.push(Number(id));
  }
  return { starts, ends };
}

describe("lifecycle", () => {
  let server;
  before(async () => {
    server = await Server.start("lifecycle");
  });
  after(async () => {
    await server?.cleanup();
  });

  it("drain on SIGTERM finishes what started, hands back the rest, loses nothing", async (t) => {
    const queue = queueName(t);
    const log = join(server.dataDir, `${queue}.log`);
    writeFileSync(log, "");
    const c = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
    // A lease far longer than the test: a job the drain failed to hand back would wait for
    // it and the test would time out instead of passing by rescue.
    await httpPatchQueue(server, queue, { lease_ms: 600_000 });
    const ids = new Set((await c.enqueueMany(Array.from({ length: 150 }, (_, n) => ({ kind: "work", args: { n }, queue })))).map((j) => j.id));

    const proc = spawn(process.execPath, [APP], {
      env: { ...process.env, PGFERRY_URL: server.grpcUrl, PGFERRY_API_KEY: server.apiKey, DRAIN_QUEUE: queue, DRAIN_LOG: log },
      stdio: ["ignore", "inherit", "inherit"],
    });
    const exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
    try {
      const deadline = Date.now() + WAIT;
      while (readLog(log).ends.length < 20) {
        assert.equal(proc.exitCode, null, "the worker exited early");
        assert.ok(Date.now() < deadline, "the worker did not complete 20 jobs");
        await sleep(50);
      }
      proc.kill("SIGTERM");
      const { code, signal } = await exited;
      assert.deepEqual({ code, signal }, { code: 0, signal: null });
    } finally {
      if (proc.exitCode === null) proc.kill("SIGKILL");
    }
    const { starts, ends } = readLog(log);
    // Every job the worker started it also finished within the grace period.
    assert.deepEqual([...starts].sort(), [...ends].sort());
    assert.equal(new Set(ends).size, ends.length, "a job ran twice in the draining worker");
    assert.ok(ends.length < ids.size, "the worker finished everything before SIGTERM");

    // A second worker takes the rest; nothing waits for a lease to expire.
    const rec = new Recorder();
    const w = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], concurrency: 20, handleSignals: false, logger: quiet });
    w.handle("work", (_, ctx) => rec.add("ran", ctx));
    const rest = [...ids].filter((id) => !ends.includes(id));
    await running(w, () => rec.waitUntil(() => rest.every((id) => rec.ids("ran").includes(id)), `${rest.length} remaining jobs`));
    const second = rec.ids("ran");
    assert.ok(!second.some((id) => ends.includes(id)), "a job finished by the drained worker ran again");
    assert.equal(new Set(second).size, second.length);
    assert.deepEqual(new Set([...second, ...ends]), ids);
    await c.close();
  });

  it("a job that arrives after the Drain went out is handed back too, and the drain ends", async (t) => {
    // The race behind a CI failure: a result carried a credit, the server answered it with
    // the next buffered job at once, and stop() sent the Drain before that job arrived. The
    // job then sat in the worker unreleased: the drain never finished (the grace period ran
    // out) and the job waited for its lease.
    const queue = queueName(t);
    const c = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
    await httpPatchQueue(server, queue, { lease_ms: 600_000 });
    const ids = (await c.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ kind: "step", args: { n }, queue })))).map((j) => j.id);
    const rec = new Recorder();
    // The grace period is far longer than the test: only a drain that finishes lets run()
    // resolve in time.
    const w1 = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], concurrency: 1, gracePeriodMs: 600_000, handleSignals: false, logger: quiet });
    w1.handle("step", (_, ctx) => {
      rec.add("first", ctx);
      // Two turns later: after this result and its credit were written, before the job
      // the server sends for that credit can arrive.
      setImmediate(() => setImmediate(() => w1.stop()));
    });
    const run1 = w1.run();
    await rec.waitUntil(() => rec.ids("first").length > 0, "the first job");
    await Promise.race([run1, sleep(WAIT).then(() => Promise.reject(new Error("the drain did not finish")))]);
    assert.equal(rec.ids("first").length, 1, "the draining worker started a second job");
    const w2 = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], concurrency: 5, handleSignals: false, logger: quiet });
    w2.handle("step", (_, ctx) => rec.add("second", ctx));
    const rest = ids.filter((id) => !rec.ids("first").includes(id));
    await running(w2, () => rec.waitUntil(() => rest.every((id) => rec.ids("second").includes(id)), "the other jobs to run at once"));
    await c.close();
  });

  it("stop() aborts jobs still running when the grace period ends; they run again elsewhere", async (t) => {
    const queue = queueName(t);
    const c = new Client({ url: server.grpcUrl, apiKey: server.apiKey });
    await httpPatchQueue(server, queue, { lease_ms: 600_000 });
    const rec = new Recorder();
    const w1 = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], concurrency: 2, gracePeriodMs: 300, handleSignals: false, logger: quiet });
    w1.handle("endless", async (_, ctx) => {
      rec.add("started", ctx);
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
      rec.add("aborted", ctx, ctx.signal.reason.reason);
      ctx.throwIfAborted();
    });
    const run1 = w1.run();
    await w1.ready();
    const job = await c.enqueue("endless", {}, { queue, maxAttempts: 1 });
    await rec.waitUntil(() => rec.ids("started").includes(job.id), "the job to start");
    w1.stop();
    await run1;
    assert.deepEqual(rec.of("aborted", job.id).map((e) => e.data), ["shutdown"]);
    // Handed back as a snooze (attempt kept): with maxAttempts 1 and a 10-minute lease, only
    // that lets another worker run it now.
    const w2 = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: [queue], handleSignals: false, logger: quiet });
    w2.handle("endless", (_, ctx) => rec.add("finished", ctx));
    await running(w2, () => rec.waitUntil(() => rec.ids("finished").includes(job.id), "the second worker to run it"));
    await c.close();
  });
});

describe("server restart", () => {
  let srv;
  before(async () => {
    srv = new Server(dataDir("restart"));
    await srv.start();
  });
  after(async () => {
    await srv?.cleanup();
  });

  it("producers and workers survive a restart mid-run and the ledger balances", async () => {
    const queue = "restart_ledger";
    const total = 600;
    const rec = new Recorder();
    const acked = new Set();
    let unknown = 0;
    const w = new Worker({ url: srv.grpcUrl, apiKey: srv.apiKey, queues: [queue], concurrency: 20, reconnectCapMs: 1000, handleSignals: false, logger: quiet });
    w.handle("entry", async (_, ctx) => {
      await sleep(5);
      rec.add("ran", ctx);
    });
    const c = new Client({ url: srv.grpcUrl, apiKey: srv.apiKey, connectTimeoutMs: WAIT });
    await running(w, async () => {
      const produce = async (lo, hi) => {
        for (let i = lo; i < hi; i++) {
          try {
            acked.add((await c.enqueue("entry", { n: i }, { queue })).id);
          } catch (e) {
            if (!(e instanceof Unavailable)) throw e;
            unknown++; // outcome unknown: may or may not have been committed
          }
        }
      };
      const producers = Array.from({ length: total / 60 }, (_, k) => produce(k * 60, (k + 1) * 60));
      await rec.waitUntil(() => rec.ids("ran").length >= 100, "100 jobs before the restart");
      await srv.restart();
      await Promise.all(producers);
      await rec.waitUntil(() => [...acked].every((id) => rec.ids("ran").includes(id)), "every acknowledged job to run");
    });
    const ran = new Set(rec.ids("ran"));
    assert.equal(acked.size + unknown, total);
    assert.ok([...acked].every((id) => ran.has(id)));
    // Jobs beyond the acknowledged ones can only be enqueues whose ack the restart ate.
    assert.ok([...ran].filter((id) => !acked.has(id)).length <= unknown);
    assert.ok(w.stats.reconnects >= 1, "the worker never saw the restart");
    await c.close();
  });
});
