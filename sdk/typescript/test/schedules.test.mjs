// task.cron against a real server (its own leader fires schedules): the schedule enqueues
// the task with the declared input; declaring it again is a no-op, declaring it differently
// replaces it; bad input is refused naming the field, with nothing created.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import { InvalidArgument, Pgferry, ValidationError } from "../dist/esm/index.js";
import { Server } from "./helpers/server.mjs";
import { Recorder, queueName, quiet, running } from "./helpers/util.mjs";

let server;
let pg;
before(async () => {
  server = await Server.start("schedules");
  pg = new Pgferry({ url: server.grpcUrl, httpUrl: server.httpUrl, apiKey: server.apiKey });
});
after(async () => {
  await pg?.close();
  await server?.cleanup();
});

describe("task.cron", () => {
  it("fires the task with its input; again: unchanged; changed: replaced", async (t) => {
    const queue = queueName(t);
    const rec = new Recorder();
    const report = pg.task({
      name: `report_${queue}`,
      queue,
      retries: 2,
      input: z.object({ day: z.string() }),
      fn: (input, ctx) => rec.add("ran", ctx, input.day),
    });
    const name = `nightly-${queue}`;
    const first = await report.cron(name, "* * * * * *", { day: "mon" });
    assert.equal(first.action, "created");
    assert.equal(first.schedule.target.kind, report.name);
    assert.equal(first.schedule.target.queue, queue);
    assert.equal(first.schedule.target.max_attempts, 3);
    assert.equal((await report.cron(name, "* * * * * *", { day: "mon" })).action, "unchanged");
    const w = pg.worker({ tasks: [report], handleSignals: false, logger: quiet });
    await running(w, async () => {
      await rec.waitUntil(() => rec.events.filter((e) => e.data === "mon").length >= 2, "two fires with day=mon");
      const changed = await report.cron(name, "* * * * * *", { day: "tue" });
      assert.equal(changed.action, "replaced");
      await rec.waitUntil(() => rec.events.some((e) => e.data === "tue"), "a fire with day=tue");
    });
    assert.equal((await pg.client.schedules.get(name)).target.args.day, "tue");
    await pg.client.schedules.delete(name);
  });

  it("refuses a bad input or cron expression naming the field; nothing is created", async (t) => {
    const queue = queueName(t);
    const task = pg.task({ name: `typed_${queue}`, queue, input: z.object({ n: z.number() }), fn: () => {} });
    await assert.rejects(task.cron(`bad-input-${queue}`, "@daily", { n: "x" }), (e) => e instanceof ValidationError && e.field === "input.n");
    await assert.rejects(task.cron(`bad-cron-${queue}`, "61 * * * *", { n: 1 }), (e) => e instanceof InvalidArgument && e.field === "cron");
    for (const n of [`bad-input-${queue}`, `bad-cron-${queue}`]) {
      await assert.rejects(pg.client.schedules.get(n), (e) => e.code === "not_found");
    }
  });

  it("needs the HTTP address", async () => {
    const grpcOnly = new Pgferry({ url: server.grpcUrl, apiKey: server.apiKey });
    const task = grpcOnly.task({ name: "x", fn: () => {} });
    await assert.rejects(task.cron("x", "@daily", null), (e) => e.code === "not_implemented" && e.field === "httpUrl");
    await grpcOnly.close();
  });
});
