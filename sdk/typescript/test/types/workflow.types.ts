// Type-level test for workflows, checked by `tsc -p tsconfig.types-test.json` (npm test):
// every line marked @ts-expect-error must fail to compile; if inference regressed (input or
// result became `any`), the directive would be unused and tsc would fail.
import { z } from "zod";
import { Pgferry, Step, type ChildEnd, type SignalRecord, type WorkflowContext, type WorkflowHandle } from "../../src/index.js";

declare const pg: Pgferry;

const shipping = pg.workflow({
  name: "shipping",
  input: z.object({ orderId: z.string() }),
  fn: async (ctx: WorkflowContext, o) => ctx.step("label", () => `TRACK-${o.orderId}`),
});

const order = pg.workflow({
  name: "order",
  input: z.object({ orderId: z.string(), amount: z.number(), express: z.boolean().default(false) }),
  fn: async (ctx, o) => {
    // The function gets the schema's output: the default applied.
    const express: boolean = o.express;
    // @ts-expect-error -- no such field in the schema
    void o.customer;
    // A step resolves to its function's (awaited) return type.
    const charged = await ctx.step("charge", async () => ({ id: "ch_1", cents: o.amount * 100 }));
    const cents: number = charged.cents;
    // @ts-expect-error -- the step's result has no such field
    void charged.missing;
    await ctx.sleep(1_000);
    const paid: SignalRecord<{ amount: number }> | null = await ctx.waitForSignal<{ amount: number }>("paid", { timeoutMs: 60_000 });
    // @ts-expect-error -- the signal may not have come (null on a timeout)
    void paid.payload;
    // A typed child: its input is checked and its result typed.
    const tracking: string = await ctx.child(shipping, { orderId: o.orderId });
    // @ts-expect-error -- the child's input is { orderId: string }
    await ctx.child(shipping, { id: 1 });
    const all = await ctx.fanOut(shipping, [{ orderId: "a" }, { orderId: "b" }]);
    for (const r of all) if (r.status === "fulfilled") void (r.value satisfies string);
    const ends: ChildEnd[] = await ctx.spawn([{ kind: "shipping", input: { orderId: "c" } }], { join: "any" });
    // @ts-expect-error -- join is "all" or "any"
    await ctx.spawn([], { join: "some" });
    const at: Date = await ctx.now();
    return { express, cents, paid: paid !== null, tracking, ends: ends.length, at: at.getTime() };
  },
});

export async function usage(): Promise<void> {
  // Input as the schema accepts it: `express` may be left out (it has a default).
  const h: WorkflowHandle<{ express: boolean; cents: number; paid: boolean; tracking: string; ends: number; at: number }> = await order.start(
    { orderId: "o-1", amount: 30 },
    { correlationKey: "o-1" },
  );
  // @ts-expect-error -- `amount` is required
  await order.start({ orderId: "o-1" });
  // @ts-expect-error -- `amount` must be a number
  await order.start({ orderId: "o-1", amount: "30" });
  // The result is the function's return type.
  const r = await h.result({ timeoutMs: 1_000 });
  const tracking: string = r.tracking;
  void tracking;
  // @ts-expect-error -- the result has no such field
  void r.missing;
  const direct = await order.run({ orderId: "o-2", amount: 1 });
  // @ts-expect-error -- cents is a number
  const wrong: string = direct.cents;
  void wrong;

  // State machines: handlers return one of the Step outcomes.
  const m = pg.machine<{ items: string[] }>({
    name: "m",
    inbox: true,
    steps: {
      start: (s) => Step.await(["paid"], "ship", { timeoutMs: 1_000 }),
      ship: (s) => (s.wake === "timeout" ? Step.fail("not paid") : Step.done({ ok: true })),
      // @ts-expect-error -- a handler must return an outcome
      bad: () => "done",
    },
  });
  await m.start({ items: ["a"] });
  // @ts-expect-error -- items is string[]
  await m.start({ items: [1] });
  // @ts-expect-error -- Step.sleep takes milliseconds, then the next step
  Step.sleep("ship", 1_000);
  pg.workflowWorker({ workflows: [order, shipping, m] });
}
