// A database outage under a running worker: a result that reaches the server while its
// Postgres is down is refused as `unavailable` (not recorded), and the worker sends it again
// until it is. Runs its own cluster and `pgferry serve`: the test stops and starts Postgres.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Worker } from "../dist/esm/index.js";
import { Postgres, Server } from "./helpers/server.mjs";
import { pollUntil, quiet, running } from "./helpers/util.mjs";

// Well below the default lease (60 s): a job whose result was dropped is still running then,
// and only its lease running out would run it again (as a second attempt).
const PATIENCE = 30_000;

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
});
