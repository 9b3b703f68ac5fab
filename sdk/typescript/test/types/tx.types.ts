// Type-level test for transactional enqueue, checked by `tsc -p tsconfig.types-test.json`:
// node-postgres' Client and PoolClient are accepted as they are, a task's input type is
// enforced, and the result is the job id.
import pg from "pg";
import { z } from "zod";
import { Pgferry, enqueueTx } from "../../src/index.js";

declare const app: Pgferry;
declare const client: pg.Client;
declare const pooled: pg.PoolClient;

const ship = app.task({ name: "ship", input: z.object({ order: z.number() }), fn: async () => 1 });

export async function uses(): Promise<number> {
  const a: number = await enqueueTx(client, { tenant: "acme", queue: "mail", kind: "send", args: { to: "a@b" } });
  const b: number = await ship.enqueueTx(pooled, "acme", { order: 1 }, { priority: 2 });
  // @ts-expect-error: the task's input is checked
  await ship.enqueueTx(client, "acme", { order: "1" });
  // @ts-expect-error: a tenant is required
  await enqueueTx(client, { queue: "mail", kind: "send" });
  const wf = app.workflow({ name: "order", input: z.object({ n: z.number() }), fn: async (_c, i) => i.n * 2 });
  const h = await wf.startTx(client, "acme", { n: 1 }, { correlationKey: "o-1" });
  const r: number = await h.result();
  // @ts-expect-error: the workflow's input is checked
  await wf.startTx(client, "acme", { n: "1" });
  return a + b + r;
}
