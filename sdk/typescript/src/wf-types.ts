// Workflow steps as a remote worker sees them, and the one outcome each step ends with
// (docs/workflows.md "Remote workers"). The state-machine API returns these outcomes from
// its step handlers; the code-first API computes them from where its function stopped.
import type { StandardSchemaV1 } from "./standard-schema.js";

/** A signal as a step sees it (consumed by an await). */
export interface SignalRecord<P = unknown> {
  signalId: number;
  name: string;
  payload: P;
}

/** A child's end as its parent sees it after a join. */
export interface ChildEnd<R = unknown> {
  id: number;
  kind: string;
  /** done, failed or cancelled. */
  status: string;
  result: R | null;
  error: string | null;
}

/** A child workflow to start with a spawn. */
export interface ChildSpec {
  kind: string;
  input?: unknown;
  /** First step (default "start"). */
  step?: string;
  /** Default: the parent's queue. */
  queue?: string;
  concurrencyKey?: string;
  concurrencyLimit?: number;
  rateKey?: string;
  /** 0 to 9. */
  priority?: number;
  maxAttempts?: number;
}

/** One claim of one instance, as a state-machine step handler gets it. */
export interface ClaimedStep<S = unknown, I = unknown> {
  id: number;
  /** The claim's sequence number (with `id`, names the claim). */
  seq: number;
  queue: string;
  kind: string;
  step: string;
  state: S;
  input: I;
  attempt: number;
  maxAttempts: number;
  /** What resumed this step: a signal, an await's timeout, its children's join, or null. */
  wake: "signal" | "timeout" | "children" | null;
  parentId: number | null;
  /** Signals consumed by the await that resumed it (kinds declared with `inbox`). */
  inbox: SignalRecord[] | null;
  /** The children's ends (kinds declared with `children`). */
  children: ChildEnd[] | null;
  leaseUntil: Date;
  /** Aborts when the instance is cancelled, the lease is lost, or the worker shuts down. */
  signal: AbortSignal;
}

export type StepOutcome =
  | { outcome: "next"; step: string; state?: unknown }
  | { outcome: "retry"; delayMs: number; reason: string }
  | { outcome: "await"; signals: string[]; step: string; timeoutMs?: number; state?: unknown }
  | { outcome: "sleep"; step: string; forMs?: number; untilMs?: number; state?: unknown }
  | {
      outcome: "spawn";
      children: ChildSpec[];
      step: string;
      join?: "all" | "any";
      onChildFailure?: "fail_parent" | "deliver";
      state?: unknown;
    }
  | { outcome: "done"; result?: unknown }
  | { outcome: "fail"; reason: string };

const withState = <T extends object>(o: T, state: unknown): T => (state === undefined ? o : { ...o, state });

/** Outcome builders for state-machine step handlers (`return Step.next("ship", state)`). */
export const Step = {
  /** Write `state` (if given) and run `step` at once. */
  next: (step: string, state?: unknown): StepOutcome => withState({ outcome: "next" as const, step }, state),
  /** The same step again after `delayMs` (attempt + 1; past max attempts the instance fails). */
  retry: (delayMs: number, reason: string): StepOutcome => ({ outcome: "retry", delayMs, reason }),
  /** Park until a signal with one of `signals` arrives (one in the inbox counts) or the
   * timeout passes; `step` runs either way (`wake` says which). */
  await: (signals: string[], step: string, opts: { timeoutMs?: number; state?: unknown } = {}): StepOutcome =>
    withState(
      { outcome: "await" as const, signals, step, ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}) },
      opts.state,
    ),
  /** `step` runs after `ms`. */
  sleep: (ms: number, step: string, state?: unknown): StepOutcome => withState({ outcome: "sleep" as const, step, forMs: ms }, state),
  /** `step` runs at `at`. */
  sleepUntil: (at: Date | number, step: string, state?: unknown): StepOutcome =>
    withState({ outcome: "sleep" as const, step, untilMs: typeof at === "number" ? at : at.getTime() }, state),
  /** Start `children`; `step` runs once they are joined (all, or the first to end). */
  spawn: (
    children: ChildSpec[],
    step: string,
    opts: { join?: "all" | "any"; onChildFailure?: "fail_parent" | "deliver"; state?: unknown } = {},
  ): StepOutcome => {
    const { state, ...rest } = opts;
    return withState({ outcome: "spawn" as const, children, step, ...rest }, state);
  },
  /** End `done` with `result`. */
  done: (result?: unknown): StepOutcome => ({ outcome: "done", result }),
  /** End `failed`. */
  fail: (reason: string): StepOutcome => ({ outcome: "fail", reason }),
} as const;

/** What claimed steps of a kind load (declared to the server in the hello). */
export interface KindCaps {
  inbox?: boolean;
  children?: boolean;
}

/** A state-machine step handler. */
export type StepHandler<S = any, I = any> = (step: ClaimedStep<S, I>) => StepOutcome | Promise<StepOutcome>;

export interface MachineDefinition<I = any> extends KindCaps {
  name: string;
  /** The default queue of `start` (default: the client's). */
  queue?: string;
  /** Validates the input at start (and in the worker, handed to the handlers parsed). */
  input?: StandardSchemaV1<I>;
  /** One handler per step; the first step is "start" unless `start()` says otherwise. */
  steps: Record<string, StepHandler<any, any>>;
}

/** Instance options of a start. */
export interface StartOptions {
  queue?: string;
  /** An active instance with this key in the queue is returned instead (`duplicate`). */
  correlationKey?: string;
  concurrencyKey?: string;
  concurrencyLimit?: number;
  rateKey?: string;
  /** 0 (least urgent) to 9. */
  priority?: number;
  runAt?: Date | number;
  maxAttempts?: number;
  /** First step (state machines; a code-first workflow always starts at "start"). */
  step?: string;
  state?: unknown;
}

export interface WorkflowStepRecord {
  stepSeq: number;
  step: string;
  attempt: number;
  outcome: string;
  error: string;
  worker: string;
  startedAt: string;
  finishedAt: string;
}

export interface WorkflowInfo {
  id: number;
  kind: string;
  queue: string;
  step: string;
  /** runnable, running, sleeping, awaiting, waiting_children, queued, done, failed, cancelled. */
  status: string;
  state: unknown;
  input: unknown;
  result: unknown;
  error: string;
  attempt: number;
  maxAttempts: number;
  priority: number;
  awaits: string[];
  parentId: number | null;
  childrenPending: number;
  correlationKey: string;
  inboxPending: number;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
  history: WorkflowStepRecord[];
}

export interface WorkflowSummary {
  id: number;
  kind: string;
  queue: string;
  step: string;
  status: string;
  attempt: number;
  parentId: number | null;
  correlationKey: string;
  error: string;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

export const ENDED = new Set(["done", "failed", "cancelled"]);
