// Workflow definitions: code-first (`pgferry.workflow({ name, input, fn })`) and state
// machines (`pgferry.machine({ name, steps })`). Each is a kind a WorkflowWorker runs and a
// handle that starts typed instances.
import type { Client } from "./client.js";
import type { StandardSchemaV1 } from "./standard-schema.js";
import { startWorkflowTx, type SqlClient } from "./tx.js";
import type { Json } from "./types.js";
import { validate } from "./task.js";
import { WorkflowHandle } from "./wf-admin.js";
import { type WorkflowContext, type WorkflowRef, driveClaim } from "./wf-code.js";
import type { ClaimedStep, MachineDefinition, StartOptions, StepOutcome } from "./wf-types.js";
import type { StepRegistry, StepRunner } from "./wf-worker.js";

type InputOf<S> = S extends StandardSchemaV1 ? StandardSchemaV1.InferInput<S> : unknown;
type ParsedOf<S> = S extends StandardSchemaV1 ? StandardSchemaV1.InferOutput<S> : unknown;

export interface WorkflowDefinition<S extends StandardSchemaV1 | undefined, O> {
  /** The kind (1-128 of A-Z a-z 0-9 _ - . :). */
  name: string;
  /** Any Standard Schema for the input: checked at start and in the worker. */
  input?: S;
  /** Default queue of its instances (default: the client's). */
  queue?: string;
  /** The workflow: deterministic code around ctx calls (steps, sleeps, signals, children). */
  fn: (ctx: WorkflowContext, input: ParsedOf<S>) => Promise<O>;
}

/** Something that can be registered on a WorkflowWorker. */
export interface Registrable {
  readonly name: string;
  readonly queue: string | undefined;
  /** @internal */
  registerOn(worker: StepRegistry): void;
}

abstract class Startable<I, O> {
  constructor(
    protected readonly client: Client,
    readonly name: string,
    readonly queue: string | undefined,
    private readonly schema: StandardSchemaV1 | undefined,
  ) {}

  /** Validate the input and start an instance (resolves once it is committed). */
  async start(input: I, opts: StartOptions = {}): Promise<WorkflowHandle<O>> {
    if (this.schema) await validate(this.schema, input, `workflow "${this.name}": invalid input`);
    const admin = this.client.workflows;
    const s = await admin.start(this.name, input, { ...opts, queue: opts.queue ?? this.queue ?? this.client.defaultQueue });
    return new WorkflowHandle<O>(admin, s.id, s.duplicate);
  }

  /** Validate the input and start an instance on `db`, a connection inside the caller's own
   * transaction (any node-postgres-shaped client): it exists only if that transaction
   * commits. Goes through the SQL function `pgferry.tenant_wf_start`, not the server. */
  async startTx(
    db: SqlClient,
    tenant: string,
    input: I,
    opts: Omit<StartOptions, "step" | "state"> = {},
  ): Promise<WorkflowHandle<O>> {
    if (this.schema) await validate(this.schema, input, `workflow "${this.name}": invalid input`);
    const { queue, ...rest } = opts;
    const s = await startWorkflowTx(db, {
      ...rest,
      tenant,
      kind: this.name,
      queue: queue ?? this.queue ?? this.client.defaultQueue,
      input: input as Json,
    });
    return new WorkflowHandle<O>(this.client.workflows, s.id, s.duplicate);
  }

  /** Start and wait for the result. */
  async run(input: I, opts: StartOptions & { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<O> {
    const { timeoutMs, signal, ...start } = opts;
    const h = await this.start(input, start);
    return h.result({ ...(timeoutMs !== undefined ? { timeoutMs } : {}), ...(signal ? { signal } : {}) });
  }

  /** The handle of an existing instance. */
  handle(id: number): WorkflowHandle<O> {
    return new WorkflowHandle<O>(this.client.workflows, id, false);
  }
}

export class Workflow<I, P, O> extends Startable<I, O> implements Registrable, WorkflowRef<I, O> {
  declare readonly __types?: { input: I; output: O };
  /** @internal */
  constructor(client: Client, private readonly def: WorkflowDefinition<StandardSchemaV1<I, P> | undefined, O>) {
    if (!def.name) throw new TypeError("pgferry: a workflow needs a name");
    super(client, def.name, def.queue, def.input);
  }

  /** @internal one claim: replay, run on, one outcome. */
  runClaim(step: ClaimedStep): Promise<StepOutcome> {
    return driveClaim(this.def.fn as never, this.def.input, step);
  }

  /** @internal */
  registerOn(worker: StepRegistry): void {
    worker.register(this.name, (s) => this.runClaim(s), { inbox: true, children: true });
  }
}

export class Machine<I> extends Startable<I, unknown> implements Registrable {
  /** @internal */
  constructor(client: Client, private readonly def: MachineDefinition<I>) {
    if (!def.name) throw new TypeError("pgferry: a machine needs a name");
    if (!def.steps || Object.keys(def.steps).length === 0) throw new TypeError(`pgferry: machine "${def.name}" has no steps`);
    super(client, def.name, def.queue, def.input);
  }

  /** @internal */
  registerOn(worker: StepRegistry): void {
    const run: StepRunner = async (s) => {
      const handler = this.def.steps[s.step];
      if (!handler) return { outcome: "fail", reason: `machine "${this.name}" has no step "${s.step}"` };
      return handler(s);
    };
    worker.register(this.name, run, { inbox: Boolean(this.def.inbox), children: Boolean(this.def.children) });
  }
}

export type WorkflowOf<S extends StandardSchemaV1 | undefined, O> = Workflow<InputOf<S>, ParsedOf<S>, O>;
