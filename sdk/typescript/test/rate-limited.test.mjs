// The API key's HTTP rate limit (`pgferry serve --rate-limit --rate-burst`) under a running
// HTTP workflow worker: a step's outcome refused with 429 (not processed) is posted again
// after the server's Retry-After and recorded, not dropped (which left the step claimed until
// its lease ran out, then ran it again). Runs its own cluster and `pgferry serve`: the limit
// is a server flag.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { Pgferry } from "../dist/esm/index.js";
import { Postgres, Server, binary } from "./helpers/server.mjs";
import { pollUntil, running } from "./helpers/util.mjs";

// Requests per second and burst per API key. A full bucket holds exactly BURST tokens: spent
// quickly, the request after them is refused and the next token is about 1/RATE s away, well
// beyond the moment the outcome is posted.
const RATE = 2;
const BURST = 4;
const PATIENCE = 30_000;
// Longer than the test: a dropped outcome cannot be rescued by the lease running out (and
// its step run again) within it; heartbeats (every third of it) play no part either.
const WF_LEASE_MS = 120_000;

const within = (p, ms, what) =>
  Promise.race([p, new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms).unref())]);

describe("rate limited", () => {
  let pg;
  let server;
  // A second key of the same tenant, with a bucket of its own: the test starts and reads the
  // workflow with it, so that only the worker's key is limited.
  let observerKey;
  before(async () => {
    pg = await Postgres.create();
    await pg.start();
    server = Server.on(pg, ["--rate-limit", String(RATE), "--rate-burst", String(BURST)]);
    await server.start();
    const out = execFileSync(binary(), ["key", "create", "--tenant", "acme", "--database-url", pg.url()], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
    observerKey = JSON.parse(out).key;
  });
  after(async () => {
    await server?.stop();
    await pg?.cleanup();
  });

  it("a workflow step's outcome refused by the key's rate limit (429) is posted again and recorded (HTTP)", async (tc) => {
    const observer = new Pgferry({ httpUrl: server.httpUrl, apiKey: observerKey });
    const pgf = new Pgferry({ httpUrl: server.httpUrl, apiKey: server.apiKey });
    try {
      const t = { claims: 0, runs: 0 };
      const started = new Promise((resolve) => (t.start = resolve));
      const released = new Promise((resolve) => (t.release = resolve));
      const flow = observer.workflow({
        name: "rate_limited",
        queue: "wfq_rl",
        fn: async (ctx, n) => {
          t.claims++;
          const v = await ctx.step("block", async () => {
            t.runs++;
            t.start();
            await released;
            return n + 1;
          });
          return v * 10;
        },
      });
      // Started before the worker: its first claim takes it, and the worker's key spends
      // little before the step runs.
      const h = await flow.start(4);
      const warnings = [];
      const logger = { warn: (m) => warnings.push(m), debug() {} };
      const worker = pgf.httpWorkflowWorker({ workflows: [flow], concurrency: 1, leaseMs: WF_LEASE_MS, pollMs: 50, handleSignals: false, logger });
      await running(worker, async () => {
        await within(started, PATIENCE, "the step to reach its function");
        // The worker sends nothing while its one step runs: let the key's bucket fill up.
        await sleep(((BURST / RATE) * 1000) + 500);
        // Spend the worker key's burst with cheap authenticated requests until one is refused.
        let refused = null;
        for (let i = 0; i < 10 * BURST && !refused; i++) {
          const r = await fetch(`${server.httpUrl}/v1/queues`, { headers: { authorization: `Bearer ${server.apiKey}` } });
          const text = await r.text();
          if (r.status === 429) refused = r;
          else assert.ok(r.ok, `GET /v1/queues: ${r.status} ${text}`);
        }
        assert.ok(refused, "the key's burst was spent");
        assert.ok(Number(refused.headers.get("retry-after")) >= 1, "a 429 says when to come back");

        // The step finishes now: its outcome (done) is refused with 429.
        t.release();
        await pollUntil(() => worker.stats.applied + worker.stats.lost >= 1, "the step's outcome to be recorded or given up", PATIENCE);
        assert.equal(worker.stats.lost, 0, `a 429 is not a final refusal: ${JSON.stringify(worker.stats)} ${JSON.stringify(warnings)}`);
        assert.equal(worker.stats.applied, 1, JSON.stringify(worker.stats));
        assert.ok(worker.stats.outcomesResent >= 1, `the outcome was refused, then posted again: ${JSON.stringify(worker.stats)}`);
        assert.equal(worker.stats.stale, 0, `recorded by this post, not after a rerun: ${JSON.stringify(worker.stats)}`);
        assert.equal(worker.stats.steps, 1, `the step was claimed once: ${JSON.stringify(worker.stats)}`);

        const info = await h.describe();
        assert.equal(info.status, "done", JSON.stringify(info));
        assert.equal(info.result, 50, JSON.stringify(info));
        assert.deepEqual(info.history.map((x) => [x.outcome, x.attempt]), [["done", 1]], `one claim, not a rerun: ${JSON.stringify(info.history)}`);
        assert.deepEqual([t.claims, t.runs], [1, 1], "the step ran exactly once");
        tc.diagnostic(`worker stats: ${JSON.stringify(worker.stats)}`);
      });
    } finally {
      await pgf.close();
      await observer.close();
    }
  });
});
