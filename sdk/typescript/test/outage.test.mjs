// A database outage under a running worker: a result (a job's, or a workflow step's outcome,
// over the gRPC stream or the HTTP API) that reaches the server while its Postgres is down
// is refused as `unavailable` (not recorded), and the worker sends it again until it is.
// Runs its own cluster and `pgferry serve`: the tests stop and start Postgres.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, beforeEach, describe, it } from "node:test";
import { Pgferry, Worker } from "../dist/esm/index.js";
import { Postgres, Server } from "./helpers/server.mjs";
import { pollUntil, quiet, running } from "./helpers/util.mjs";

// Well below the default lease (60 s): a job whose result was dropped is still running then,
// and only its lease running out would run it again (as a second attempt).
const PATIENCE = 30_000;
// The workflow steps' lease: longer than the tests' patience, so that a dropped outcome
// cannot be rescued by the lease running out (and its step run again) within a test;
// heartbeats (every third of it) play no part either.
const WF_LEASE_MS = 120_000;
// The HTTP workflow worker used to give up on an outcome after 8 tries over about 7 s:
// its test keeps the database down longer than that.
const HTTP_OUTAGE_MS = 10_000;

const within = (p, ms, what) =>
  Promise.race([p, new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms).unref())]);

/** A code-first workflow on `queue` whose one step finishes only when told to; counts the
 * runs of the function (one per claim) and of the step. */
function blockingWorkflow(pgf, queue) {
  const t = { claims: 0, runs: 0 };
  t.started = new Promise((resolve) => (t.start = resolve));
  t.released = new Promise((resolve) => (t.release = resolve));
  t.flow = pgf.workflow({
    name: `outage_${queue}`,
    queue,
    fn: async (ctx, n) => {
      t.claims++;
      const v = await ctx.step("block", async () => {
        t.runs++;
        t.start();
        await t.released;
        return n + 1;
      });
      return v * 10;
    },
  });
  return t;
}

async function assertDoneOnce(h, t) {
  const info = await h.describe();
  assert.equal(info.status, "done", JSON.stringify(info));
  assert.equal(info.result, 50, JSON.stringify(info));
  assert.deepEqual(info.history.map((x) => [x.outcome, x.attempt]), [["done", 1]], `one claim, not a rerun: ${JSON.stringify(info.history)}`);
  assert.deepEqual([t.claims, t.runs], [1, 1], "the step ran exactly once");
}

async function http(server, method, path, body) {
  const r = await fetch(`${server.httpUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${server.apiKey}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

describe("outage", () => {
  let pg;
  let server;
  before(async () => {
    pg = await Postgres.create();
    await pg.start();
    server = Server.on(pg);
    await server.start();
  });
  beforeEach(async () => {
    // A test that failed while the database was down left it down: start it for the next.
    if (!existsSync(join(pg.pgdata, "postmaster.pid"))) await pg.start();
  });
  after(async () => {
    await server?.stop();
    await pg?.cleanup();
  });

  it("a result refused in an outage is sent again and recorded", async () => {
    const { job_id: id } = await http(server, "POST", "/v1/jobs", { queue: "q", kind: "k" });

    // A worker whose handler finishes only when told to.
    let started;
    const startedP = new Promise((resolve) => (started = resolve));
    let release;
    const released = new Promise((resolve) => (release = resolve));
    const worker = new Worker({ url: server.grpcUrl, apiKey: server.apiKey, queues: ["q"], concurrency: 1, handleSignals: false, logger: quiet });
    worker.handle("k", async (_args, ctx) => {
      started(ctx.id);
      await released;
    });

    await running(worker, async () => {
      const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("the job never reached the handler")), PATIENCE).unref());
      assert.equal(await Promise.race([startedP, timeout]), id);

      // The database goes away; the handler finishes meanwhile.
      await pg.stop();
      release();
      await pollUntil(() => worker.stats.resultsResent >= 1, "the result to be refused as unavailable", PATIENCE);
      assert.equal(worker.stats.acked, 0, `nothing is acknowledged while the database is down: ${JSON.stringify(worker.stats)}`);

      // Back on the same port: the result is sent again and recorded.
      await pg.start();
      const back = Date.now();
      await pollUntil(() => worker.stats.acked >= 1, "the result to be recorded once the database is back", PATIENCE);
      assert.ok(Date.now() - back < PATIENCE);
      assert.equal(worker.stats.stale, 0, `recorded by this send, not by a rerun: ${JSON.stringify(worker.stats)}`);
      assert.equal(worker.stats.ackErrors, 0, `unavailable is not a final refusal: ${JSON.stringify(worker.stats)}`);
      assert.equal(worker.stats.completed, 1, `the job did not run again: ${JSON.stringify(worker.stats)}`);

      const job = await http(server, "GET", `/v1/jobs/${id}`);
      assert.equal(job.state, "completed", JSON.stringify(job));
      assert.equal(job.attempts.length, 1, `one attempt, not a rerun: ${JSON.stringify(job)}`);
      assert.equal(job.attempts[0].outcome, "completed", JSON.stringify(job));
    });
  });

  it("a workflow step's outcome refused in an outage is sent again and recorded (gRPC)", async () => {
    const pgf = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
    try {
      const t = blockingWorkflow(pgf, "wfq");
      const worker = pgf.workflowWorker({ workflows: [t.flow], concurrency: 1, leaseMs: WF_LEASE_MS, handleSignals: false, logger: quiet });
      await running(worker, async () => {
        const h = await t.flow.start(4);
        await within(t.started, PATIENCE, "the step to reach its function");

        // The database goes away; the step finishes meanwhile: its outcome (done) is refused.
        await pg.stop();
        t.release();
        await pollUntil(() => worker.stats.outcomesResent >= 1, "the step's outcome to be refused as unavailable", PATIENCE);
        assert.equal(worker.stats.applied, 0, `nothing is recorded while the database is down: ${JSON.stringify(worker.stats)}`);

        // Back on the same port: the outcome is sent again and recorded.
        await pg.start();
        const back = Date.now();
        await pollUntil(() => worker.stats.applied >= 1, "the step's outcome to be recorded once the database is back", PATIENCE);
        assert.ok(Date.now() - back < PATIENCE);
        assert.equal(worker.stats.stale, 0, `recorded by this send, not after a rerun: ${JSON.stringify(worker.stats)}`);
        assert.equal(worker.stats.refused, 0, `unavailable is not a final refusal: ${JSON.stringify(worker.stats)}`);
        assert.equal(worker.stats.steps, 1, `the step was claimed once: ${JSON.stringify(worker.stats)}`);
        await assertDoneOnce(h, t);
      });
    } finally {
      await pgf.close();
    }
  });

  it("a workflow step's outcome refused in an outage is posted again and recorded (HTTP)", async () => {
    const pgf = new Pgferry({ httpUrl: server.httpUrl, apiKey: server.apiKey });
    try {
      const t = blockingWorkflow(pgf, "wfq_http");
      const worker = pgf.httpWorkflowWorker({ workflows: [t.flow], concurrency: 1, leaseMs: WF_LEASE_MS, pollMs: 50, handleSignals: false, logger: quiet });
      await running(worker, async () => {
        const h = await t.flow.start(4);
        await within(t.started, PATIENCE, "the step to reach its function");

        // The database goes away, for longer than the worker used to keep trying; the step
        // finishes meanwhile: its outcome (done) is refused.
        await pg.stop();
        t.release();
        await pollUntil(() => worker.stats.outcomesResent >= 1, "the step's outcome to be refused as unavailable", PATIENCE);
        await sleep(HTTP_OUTAGE_MS);
        assert.equal(worker.stats.applied, 0, `nothing is recorded while the database is down: ${JSON.stringify(worker.stats)}`);
        assert.equal(worker.stats.lost, 0, `an outcome is not given up while the database is down: ${JSON.stringify(worker.stats)}`);

        // Back on the same port: the outcome is posted again and recorded.
        await pg.start();
        const back = Date.now();
        await pollUntil(() => worker.stats.applied >= 1, "the step's outcome to be recorded once the database is back", PATIENCE);
        assert.ok(Date.now() - back < PATIENCE);
        assert.equal(worker.stats.stale, 0, `recorded by this post, not after a rerun: ${JSON.stringify(worker.stats)}`);
        assert.equal(worker.stats.lost, 0, JSON.stringify(worker.stats));
        assert.equal(worker.stats.steps, 1, `the step was claimed once: ${JSON.stringify(worker.stats)}`);
        await assertDoneOnce(h, t);
      });
    } finally {
      await pgf.close();
    }
  });
});
