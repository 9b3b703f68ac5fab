// A worker process for the drain test. Every job appends "start ID" and "end ID" lines to
// $DRAIN_LOG; SIGTERM (handled by the worker) drains it and run() resolves.
import { appendFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Worker } from "../../dist/esm/index.js";

const log = process.env.DRAIN_LOG;
const worker = new Worker({
  url: process.env.PGFERRY_URL,
  apiKey: process.env.PGFERRY_API_KEY,
  queues: [process.env.DRAIN_QUEUE],
  concurrency: 10,
  gracePeriodMs: 60_000,
});
worker.handle("work", async ({ n }, ctx) => {
  appendFileSync(log, `start ${ctx.id}\n`);
  await sleep(200);
  appendFileSync(log, `end ${ctx.id}\n`);
  return n;
});
await worker.run();
process.exit(worker.stats.acked === worker.stats.completed ? 0 : 3);
