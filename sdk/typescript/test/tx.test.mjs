// Transactional enqueue with node-postgres: a job written in the application's own
// transaction exists exactly when it commits, and a worker runs it; bad input is refused
// naming the field, and a rolled-back or refused enqueue leaves nothing.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { z } from "zod";
import { InvalidArgument, NotFound, Pgferry, ValidationError, enqueueTx, startWorkflowTx } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { queueName, quiet, running } from "./helpers/util.mjs";

// `pgferry dev` makes its key for the tenant "dev".
const TENANT = "dev";

let server;
let db;
before(async () => {
  server = await Server.start("tx");
  db = new pg.Client({ connectionString: server.databaseUrl });
  await db.connect();
  await db.query("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY)");
});
after(async () => {
  await db?.end();
  await server?.cleanup();
});

describe("transactional enqueue", () => {
  it("a job exists exactly when the app's transaction commits, and runs", async (t) => {
    const queue = queueName(t);
    const app = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
    const ran = [];
    const ship = app.task({
      name: "ship",
      queue,
      input: z.object({ order: z.number().int() }),
      fn: async (input, ctx) => {
        ran.push({ id: ctx.id, order: input.order });
        return input.order;
      },
    });

    // Rolled back together with the app's own row: no job.
    await db.query("BEGIN");
    await db.query("INSERT INTO orders VALUES (1)");
    const gone = await ship.enqueueTx(db, TENANT, { order: 1 });
    await db.query("ROLLBACK");
    await assert.rejects(app.client.getJob(gone), NotFound);

    // Committed: the job is there and a worker runs it.
    await db.query("BEGIN");
    await db.query("INSERT INTO orders VALUES (2)");
    const id = await ship.enqueueTx(db, TENANT, { order: 2 }, { priority: 1 });
    const plain = await enqueueTx(db, { tenant: TENANT, queue, kind: "ship", args: { order: 3 }, meta: { via: "sql" } });
    await db.query("COMMIT");
    const info = await app.client.getJob(id);
    assert.equal(info.queue, queue);
    assert.equal(info.priority, 1);
    const w = app.worker({ tasks: [ship], concurrency: 2, handleSignals: false, logger: quiet });
    await running(w, async () => {
      assert.equal(await ship.result(id), 2);
      assert.equal(await ship.result(plain), 3);
    });
    assert.deepEqual(ran.map((r) => r.order).sort(), [2, 3]);
    await app.close();
  });

  it("a workflow started in the app's transaction runs only if it commits", async (t) => {
    const queue = queueName(t);
    const app = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
    const wf = app.workflow({
      name: `tx_${queue}`,
      queue,
      input: z.object({ n: z.number() }),
      fn: async (ctx, i) => ctx.step("double", () => i.n * 2),
    });
    await db.query("BEGIN");
    const gone = await wf.startTx(db, TENANT, { n: 1 });
    await db.query("ROLLBACK");
    await assert.rejects(app.client.workflows.get(gone.id), NotFound);

    await db.query("BEGIN");
    const h = await wf.startTx(db, TENANT, { n: 21 }, { correlationKey: "o-21", concurrencyKey: "ck" });
    const again = await startWorkflowTx(db, { tenant: TENANT, kind: wf.name, queue, input: { n: 21 }, correlationKey: "o-21" });
    assert.deepEqual(again, { id: h.id, duplicate: true });
    await assert.rejects(wf.startTx(db, TENANT, { n: "x" }), ValidationError);
    await db.query("COMMIT");
    const w = app.workflowWorker({ workflows: [wf], queues: [queue], handleSignals: false, logger: quiet });
    await running(w, async () => {
      assert.equal(await h.result({ timeoutMs: 60_000 }), 42);
    });
    await app.close();
  });

  it("bad input is refused naming the field and writes nothing", async (t) => {
    const queue = queueName(t);
    const app = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
    const typed = app.task({ name: "typed", queue, input: z.object({ n: z.number() }), fn: async () => {} });
    await db.query("BEGIN");
    // The task's schema, before any SQL.
    await assert.rejects(typed.enqueueTx(db, TENANT, { n: "x" }), ValidationError);
    const cases = [
      [{ tenant: TENANT, queue, kind: "k", priority: 9 }, "priority"],
      [{ tenant: TENANT, queue, kind: "no spaces" }, "kind"],
      [{ tenant: TENANT, queue: "Bad Queue", kind: "k" }, "queue"],
      [{ tenant: "nobody", queue, kind: "k" }, "tenant"],
    ];
    for (const [job, field] of cases) {
      await db.query("SAVEPOINT s");
      await assert.rejects(enqueueTx(db, job), (e) => e instanceof InvalidArgument && e.field === field, field);
      await db.query("ROLLBACK TO SAVEPOINT s");
    }
    await db.query("COMMIT");
    // Nothing was written: the queue has no job (it may not even exist yet).
    const listed = await app.client.listJobs({ queue, limit: 10 }).catch((e) => (e instanceof NotFound ? { items: [] } : Promise.reject(e)));
    assert.deepEqual(listed.items, []);
    await app.close();
  });
});
