// A workflow worker process for the replay-after-kill test: the workflow "killable" runs
// step "one", then step "two", which here hangs (the test SIGKILLs this process while it
// does). Every step run appends a line to $WF_LOG, so the test can count runs.
import { appendFileSync } from "node:fs";
import { Pgferry } from "../../dist/esm/index.js";

const log = process.env.WF_LOG;
const pgferry = new Pgferry({ url: process.env.PGFERRY_URL, apiKey: process.env.PGFERRY_API_KEY });
const killable = pgferry.workflow({
  name: "killable",
  fn: async (ctx, input) => {
    const a = await ctx.step("one", () => {
      appendFileSync(log, `one ${process.pid}\n`);
      return input.n + 1;
    });
    const b = await ctx.step("two", async () => {
      appendFileSync(log, `two ${process.pid}\n`);
      await new Promise(() => {}); // hangs until the test kills this process
      return 0;
    });
    return { a, b };
  },
});
const worker = pgferry.workflowWorker({ workflows: [killable], queues: [process.env.WF_QUEUE], leaseMs: 1_000 });
await worker.run();
