// Type-level test, checked by `tsc -p tsconfig.types-test.json` (npm test): every line
// marked @ts-expect-error must fail to compile. If the SDK's inference regressed (e.g. a
// task's input became `any`), those lines would compile and tsc would report the unused
// directive as an error.
import { z } from "zod";
import { Pgferry, type EnqueuedJob, type JobContext } from "../../src/index.js";

declare const pg: Pgferry;

const sendEmail = pg.task({
  name: "send_email",
  queue: "emails",
  retries: 3,
  input: z.object({ to: z.email(), subject: z.string(), attempts: z.number().default(1) }),
  fn: async (input, ctx: JobContext) => {
    // The handler gets the schema's output: defaults applied, so `attempts` is a number.
    const n: number = input.attempts;
    const to: string = input.to;
    // @ts-expect-error -- no such field in the schema
    void input.from;
    void ctx.signal;
    return { delivered: true as const, n, to };
  },
});

export async function usage(): Promise<void> {
  // Input as the schema accepts it: `attempts` may be left out (it has a default).
  const job: EnqueuedJob = await sendEmail.enqueue({ to: "a@b.co", subject: "hi" });
  void job;

  // @ts-expect-error -- `subject` is required
  await sendEmail.enqueue({ to: "a@b.co" });

  // @ts-expect-error -- `to` must be a string
  await sendEmail.enqueue({ to: 42, subject: "hi" });

  // @ts-expect-error -- unknown field (object literals are checked exactly)
  await sendEmail.enqueue({ to: "a@b.co", subject: "hi", cc: "x" });

  // @ts-expect-error -- every element of enqueueMany is checked
  await sendEmail.enqueueMany([{ to: "a@b.co", subject: "hi" }, { subject: "no to" }]);

  await sendEmail.schedule(new Date(), { to: "a@b.co", subject: "later" });
  // @ts-expect-error -- schedule takes the time first, then the input
  await sendEmail.schedule({ to: "a@b.co", subject: "later" }, new Date());

  // run() resolves to the handler's (awaited) return type.
  const out = await sendEmail.run({ to: "a@b.co", subject: "hi" });
  const delivered: true = out.delivered;
  void delivered;
  // @ts-expect-error -- the result has no such field
  void out.missing;

  // A task with an output schema: run() resolves to the schema's output.
  const total = pg.task({
    name: "total",
    input: z.object({ xs: z.array(z.number()) }),
    output: z.object({ sum: z.number() }),
    fn: ({ xs }) => ({ sum: xs.reduce((a, b) => a + b, 0) }),
  });
  const r = await total.run({ xs: [1, 2] });
  const sum: number = r.sum;
  void sum;
  // @ts-expect-error -- a string is not a number[] element
  await total.enqueue({ xs: ["1"] });

  // A task without a schema takes any input (unknown) and gives the handler unknown.
  const loose = pg.task({
    name: "loose",
    fn: (input) => {
      // @ts-expect-error -- unknown has no properties
      void input.anything;
      return 1;
    },
  });
  await loose.enqueue({ whatever: true });
  const one: number = await loose.run(null);
  void one;
}
