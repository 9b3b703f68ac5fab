// The entry point: one object holding the client, making typed tasks and workers for them.
import { Client, type ClientOptions } from "./client.js";
import type { StandardSchemaV1 } from "./standard-schema.js";
import { Task, type TaskDefinition, type TaskOf, validate } from "./task.js";
import { Machine, type Registrable, type WorkflowDefinition, type WorkflowOf, Workflow } from "./wf-define.js";
import type { MachineDefinition } from "./wf-types.js";
import { HttpWorkflowWorker, type HttpWorkflowWorkerOptions } from "./wf-http-worker.js";
import { WorkflowWorker, type WorkflowWorkerOptions } from "./wf-worker.js";
import { Worker, type WorkerOptions } from "./worker.js";

export interface PgferryOptions extends ClientOptions {}

export type TaskWorkerOptions = Omit<WorkerOptions, "url" | "apiKey" | "queues"> & {
  /** The typed tasks this worker runs. */
  tasks?: Task<any, any, any, any>[];
  /** Default: the queues of its tasks (a task without one: the client's default queue). */
  queues?: string[];
};

export type WorkflowWorkerRunOptions = Omit<WorkflowWorkerOptions, "url" | "apiKey" | "queues"> & {
  /** The code-first workflows and machines this worker runs. */
  workflows: Registrable[];
  /** Default: the queues of its workflows. */
  queues?: string[];
};

export class Pgferry {
  readonly client: Client;
  private readonly opts: PgferryOptions;

  constructor(opts: PgferryOptions) {
    this.client = new Client(opts);
    this.opts = opts;
  }

  /** Define a typed task: `pgferry.task({ name, input: z.object({...}), fn })`. */
  task<S extends StandardSchemaV1 | undefined = undefined, O = unknown, OS extends StandardSchemaV1 | undefined = undefined>(
    def: TaskDefinition<S, O, OS>,
  ): TaskOf<S, O, OS> {
    return new Task(this.client, def as never) as unknown as TaskOf<S, O, OS>;
  }

  /** A worker (gRPC) for these tasks; `worker.handle(kind, fn)` adds untyped handlers. */
  worker(opts: TaskWorkerOptions = {}): Worker {
    if (!this.opts.url) throw new TypeError("pgferry: a worker needs the server's gRPC url");
    const { tasks = [], queues, ...rest } = opts;
    const q = queues ?? [...new Set(tasks.map((t) => t.queue ?? this.client.defaultQueue))];
    const worker = new Worker({ ...rest, url: this.opts.url, apiKey: this.opts.apiKey, queues: q });
    for (const t of tasks) register(worker, t);
    return worker;
  }

  /** Define a code-first workflow: `pgferry.workflow({ name, input, fn: async (ctx, input) => … })`. */
  workflow<S extends StandardSchemaV1 | undefined = undefined, O = unknown>(def: WorkflowDefinition<S, O>): WorkflowOf<S, O> {
    return new Workflow(this.client, def as never) as unknown as WorkflowOf<S, O>;
  }

  /** Define a state machine: a handler per step, each returning one `Step.*` outcome. */
  machine<I = unknown>(def: MachineDefinition<I>): Machine<I> {
    return new Machine<I>(this.client, def);
  }

  /** A worker (gRPC WorkflowWorker stream) for these workflows and machines. */
  workflowWorker(opts: WorkflowWorkerRunOptions): WorkflowWorker {
    if (!this.opts.url) throw new TypeError("pgferry: a workflow worker needs the server's gRPC url");
    const { workflows, queues, ...rest } = opts;
    const q = queues ?? [...new Set(workflows.map((w) => w.queue ?? this.client.defaultQueue))];
    const worker = new WorkflowWorker({ ...rest, url: this.opts.url, apiKey: this.opts.apiKey, queues: q });
    for (const w of workflows) w.registerOn(worker);
    return worker;
  }

  /** A workflow worker over the HTTP API (/v1/workflow-steps): no HTTP/2 stream needed. */
  httpWorkflowWorker(opts: Omit<HttpWorkflowWorkerOptions, "httpUrl" | "apiKey" | "queues"> & { workflows: Registrable[]; queues?: string[] }): HttpWorkflowWorker {
    if (!this.opts.httpUrl) throw new TypeError("pgferry: an HTTP workflow worker needs the server's httpUrl");
    const { workflows, queues, ...rest } = opts;
    const q = queues ?? [...new Set(workflows.map((w) => w.queue ?? this.client.defaultQueue))];
    const worker = new HttpWorkflowWorker({ ...rest, httpUrl: this.opts.httpUrl, apiKey: this.opts.apiKey, queues: q });
    for (const w of workflows) w.registerOn(worker);
    return worker;
  }

  close(): Promise<void> {
    return this.client.close();
  }
}

/** Register a typed task's handler on a worker: args validated with its schema first. */
export function register(worker: Worker, task: Task<any, any, any, any>): void {
  const def = task.definition;
  const schema = def.input;
  worker.handle(task.name, (input, ctx) => def.fn(input as never, ctx), {
    ...(schema
      ? { parse: (args: unknown) => validate(schema, args, `task "${task.name}": invalid input (in the worker)`) }
      : {}),
    ...(def.timeoutMs ? { timeoutMs: def.timeoutMs } : {}),
  });
}
