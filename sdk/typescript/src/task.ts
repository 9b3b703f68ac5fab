// Typed tasks: a name, a Standard Schema for the input, defaults for enqueue (queue,
// retries, priority) and the handler. The handle enqueues with the input type the schema
// accepts, and the handler gets the type the schema outputs; the input is validated at
// enqueue and again in the worker (a worker may run a newer schema than the producer).
import type { Client, WaitOptions } from "./client.js";
import type { JobContext } from "./context.js";
import { ValidationError } from "./errors.js";
import type { Ensured, ScheduleOptions } from "./schedules.js";
import type { StandardSchemaV1 } from "./standard-schema.js";
import { enqueueTx, type SqlClient } from "./tx.js";
import type { EnqueueOptions, EnqueuedJob, JobRequest, Json } from "./types.js";

type InputOf<S> = S extends StandardSchemaV1 ? StandardSchemaV1.InferInput<S> : unknown;
type ParsedOf<S> = S extends StandardSchemaV1 ? StandardSchemaV1.InferOutput<S> : unknown;
type ResultOf<OS, O> = OS extends StandardSchemaV1 ? StandardSchemaV1.InferOutput<OS> : Awaited<O>;

export interface TaskDefinition<S extends StandardSchemaV1 | undefined, O, OS extends StandardSchemaV1 | undefined = undefined> {
  /** The job kind (1-128 of A-Z a-z 0-9 _ - . :). */
  name: string;
  /** Any Standard Schema (zod, valibot, arktype, …) for the input. */
  input?: S;
  /** A schema for the result that `run()` and `result()` check (and may transform). */
  output?: OS;
  /** Queue the task's jobs go to (default: the client's default queue). */
  queue?: string;
  /** Retries after the first attempt (max attempts = retries + 1; default: the queue's). */
  retries?: number;
  /** Default priority, 0 (most urgent) to 3. */
  priority?: number;
  /** An attempt fails (retryable) after this long; ctx.signal aborts. */
  timeoutMs?: number;
  fn: (input: ParsedOf<S>, ctx: JobContext) => O | Promise<O>;
}

/** The path of an issue in the caller's terms: "input.items[2].name". */
export function issuePath(issue: StandardSchemaV1.Issue, root = "input"): string {
  let out = root;
  for (const seg of issue.path ?? []) {
    const key = typeof seg === "object" && seg !== null ? (seg as StandardSchemaV1.PathSegment).key : seg;
    out += typeof key === "number" ? `[${key}]` : `.${String(key)}`;
  }
  return out;
}

/** Validate `value` with a Standard Schema; throws ValidationError naming the first bad field. */
export async function validate<S extends StandardSchemaV1>(
  schema: S,
  value: unknown,
  what: string,
  root = "input",
): Promise<StandardSchemaV1.InferOutput<S>> {
  let r = schema["~standard"].validate(value);
  if (r instanceof Promise) r = await r;
  if (r.issues) {
    const first = r.issues[0];
    const field = first ? issuePath(first, root) : root;
    const detail = r.issues.map((i) => `${issuePath(i, root)}: ${i.message}`).join("; ");
    throw new ValidationError(`${what}: ${detail}`, r.issues, field);
  }
  return r.value as StandardSchemaV1.InferOutput<S>;
}

export class Task<I, P, O, R = Awaited<O>> {
  readonly name: string;
  readonly queue: string | undefined;
  /** @internal */
  readonly definition: TaskDefinition<StandardSchemaV1<I, P> | undefined, O, StandardSchemaV1 | undefined>;

  /** @internal — made by `Pgferry.task()`. */
  constructor(
    private readonly client: Client,
    def: TaskDefinition<StandardSchemaV1<I, P> | undefined, O, StandardSchemaV1 | undefined>,
  ) {
    if (!def.name) throw new TypeError("pgferry: a task needs a name");
    if (def.retries !== undefined && !(Number.isInteger(def.retries) && def.retries >= 0)) {
      throw new RangeError(`pgferry: task "${def.name}": retries must be an integer >= 0`);
    }
    this.name = def.name;
    this.queue = def.queue;
    this.definition = def;
  }

  private async request(input: I, opts: EnqueueOptions, index?: number): Promise<JobRequest> {
    const def = this.definition;
    if (def.input) {
      const root = index === undefined ? "input" : `inputs[${index}]`;
      await validate(def.input, input, `task "${this.name}": invalid input`, root);
    }
    const { idempotencyKey: _key, ...rest } = opts;
    const req: JobRequest = { kind: this.name, args: input, ...rest };
    req.queue ??= def.queue;
    if (req.maxAttempts === undefined && def.retries !== undefined) req.maxAttempts = def.retries + 1;
    if (req.priority === undefined && def.priority !== undefined) req.priority = def.priority;
    return req;
  }

  /** Validate and enqueue; resolves once the job is committed. */
  async enqueue(input: I, opts: EnqueueOptions = {}): Promise<EnqueuedJob> {
    const { kind, args, ...rest } = await this.request(input, opts);
    return this.client.enqueue(kind, args, { ...rest, ...(opts.idempotencyKey ? { idempotencyKey: opts.idempotencyKey } : {}) });
  }

  /** Validate and enqueue on `db`, a connection inside the caller's own transaction (any
   * node-postgres-shaped client): the job exists exactly when that transaction commits.
   * Goes through the SQL function `pgferry.enqueue`, not the server; `tenant` owns the
   * queue. Resolves to the job id. */
  async enqueueTx(
    db: SqlClient,
    tenant: string,
    input: I,
    opts: Pick<EnqueueOptions, "queue" | "priority" | "maxAttempts" | "meta" | "runAt"> = {},
  ): Promise<number> {
    const req = await this.request(input, opts);
    return enqueueTx(db, {
      tenant,
      queue: req.queue ?? "default",
      kind: req.kind,
      args: req.args as Json,
      ...(req.meta !== undefined ? { meta: req.meta } : {}),
      ...(req.priority !== undefined ? { priority: req.priority } : {}),
      ...(req.maxAttempts !== undefined ? { maxAttempts: req.maxAttempts } : {}),
      ...(req.runAt !== undefined ? { runAt: req.runAt } : {}),
    });
  }

  /** Validate every input, then enqueue them atomically (all or none). */
  async enqueueMany(inputs: readonly I[], opts: EnqueueOptions = {}): Promise<EnqueuedJob[]> {
    const reqs = await Promise.all(inputs.map((input, i) => this.request(input, opts, i)));
    return this.client.enqueueMany(reqs, opts.idempotencyKey ? { idempotencyKey: opts.idempotencyKey } : {});
  }

  /** Enqueue to run no earlier than `at` (a Date or Unix milliseconds). */
  schedule(at: Date | number, input: I, opts: Omit<EnqueueOptions, "runAt" | "delayMs"> = {}): Promise<EnqueuedJob> {
    return this.enqueue(input, { ...opts, runAt: at });
  }

  /** Enqueue and wait for the result (the handler's return value, JSON round-tripped).
   * Rejects with JobFailedError when the job is dead-lettered or cancelled. */
  async run(input: I, opts: EnqueueOptions & WaitOptions = {}): Promise<R> {
    const { timeoutMs, signal, ...enqueue } = opts;
    const job = await this.enqueue(input, enqueue);
    return this.result(job, { ...(timeoutMs !== undefined ? { timeoutMs } : {}), ...(signal ? { signal } : {}) });
  }

  /** Declare a schedule that enqueues this task with `input` at every fire of `cron`
   * (5 or 6 fields, or @daily …; docs/schedules.md). Idempotent: an identical schedule of
   * that name is left alone, a different one is replaced. Needs the client's httpUrl. */
  async cron(
    name: string,
    cron: string,
    input: I,
    opts: ScheduleOptions & { queue?: string; priority?: number; maxAttempts?: number } = {},
  ): Promise<Ensured> {
    const def = this.definition;
    if (def.input) await validate(def.input, input, `task "${this.name}": invalid input`);
    const { queue, priority, maxAttempts, ...rest } = opts;
    const attempts = maxAttempts ?? (def.retries !== undefined ? def.retries + 1 : undefined);
    const prio = priority ?? def.priority;
    return this.client.schedules.ensure({
      ...rest,
      name,
      cron,
      target: {
        type: "job",
        queue: queue ?? def.queue ?? this.client.defaultQueue,
        kind: this.name,
        args: input,
        ...(prio !== undefined ? { priority: prio } : {}),
        ...(attempts !== undefined ? { maxAttempts: attempts } : {}),
      },
    });
  }

  /** The result of a job of this task (waits for it). */
  async result(job: number | EnqueuedJob, opts: WaitOptions = {}): Promise<R> {
    const value = await this.client.result(job, opts);
    const out = this.definition.output;
    return (out ? await validate(out, value, `task "${this.name}": invalid result`, "result") : value) as R;
  }
}

/** The Task type a definition makes: input as the schema accepts it, parsed input as the
 * handler gets it, the handler's return type, and the result type run() resolves to. */
export type TaskOf<S extends StandardSchemaV1 | undefined, O, OS extends StandardSchemaV1 | undefined> = Task<
  InputOf<S>,
  ParsedOf<S>,
  O,
  ResultOf<OS, O>
>;
