// Code-first workflows: an async function of a context and its input. Each claim of an
// instance replays the function from the top against its journal (the instance's state,
// `{"journal": [...]}`, the format of crates/pgferry-core/src/workflow/code/journal.rs, so
// a Rust and a TypeScript worker read each other's instances), lets it run on until it
// suspends, and turns where it stopped into one outcome: a step ended and another is due →
// next; sleep → sleep; waitForSignal → await; spawn/children → spawn; return → done; throw →
// fail. A suspended call returns a promise that never settles: the function is abandoned
// there (nothing the user's code can catch), exactly as Rust drops the future.
import { randomInt } from "node:crypto";
import { validate } from "./task.js";
import type { ChildEnd, ChildSpec, ClaimedStep, SignalRecord, StepOutcome } from "./wf-types.js";

/** The one engine step of a code-first kind. */
export const ENGINE_STEP = "start";
/** How a failed instance's error starts when its code diverged from its journal. */
export const NONDETERMINISM = "non-determinism:";

type Entry =
  | { t: "step"; name: string; ok?: unknown; err?: string }
  | { t: "sleep"; until_ms: number }
  | { t: "signal"; names: string[]; done?: boolean; got?: { signal_id: number; name: string; payload: unknown } | null }
  | { t: "children"; kinds: string[]; any?: boolean; results?: WireChildEnd[] | null }
  | { t: "now"; ms: number }
  | { t: "random"; v: number }
  | { t: "patch"; name: string };

interface WireChildEnd {
  id: number;
  kind: string;
  status: string;
  result: unknown;
  error: string | null;
}

function label(e: Entry): string {
  switch (e.t) {
    case "step":
      return `step ${JSON.stringify(e.name)}`;
    case "signal":
      return `wait_for_signal ${JSON.stringify(e.names)}`;
    case "children":
      return `${e.any ? "first_of" : "children"} ${JSON.stringify(e.kinds)}`;
    case "patch":
      return `patched ${JSON.stringify(e.name)}`;
    default:
      return e.t;
  }
}

type Suspend =
  | { s: "next" }
  | { s: "retry"; delayMs: number; reason: string }
  | { s: "sleep"; untilMs: number }
  | { s: "await"; names: string[]; timeoutMs: number | undefined }
  | { s: "spawn"; children: ChildSpec[]; any: boolean }
  | { s: "diverged"; reason: string };

/** A step that ended with an error after its retries (recorded: a replay throws the same). */
export class StepFailed extends Error {
  override name = "StepFailed";
  constructor(
    readonly step: string,
    readonly detail: string,
  ) {
    super(`step ${JSON.stringify(step)} failed: ${detail}`);
  }
}

/** A child that did not end `done`. */
export class ChildFailed extends Error {
  override name = "ChildFailed";
  constructor(readonly child: ChildEnd) {
    super(`child ${child.id} (${child.kind}) ended ${child.status}: ${child.error ?? ""}`);
  }
}

export interface StepOptions {
  /** Runs after the first on an error (default 3; 0: the first error is the result). */
  retries?: number;
  /** Backoff base (default 1000 ms), doubling per attempt up to maxBackoffMs (300 000). */
  backoffMs?: number;
  maxBackoffMs?: number;
}

const never = (): Promise<never> => new Promise<never>(() => {});

/** The context of one run of a workflow function. */
export class WorkflowContext {
  /** The instance's id. */
  readonly id: number;
  /** Aborts when the instance is cancelled or the worker loses the claim or shuts down. */
  readonly signal: AbortSignal;
  private readonly journal: Entry[];
  private pos = 0;
  private dirty = false;
  private readonly attempt: number;
  /** @internal */ suspension: Suspend | null = null;
  /** @internal */ snapshot: Entry[] | null = null;
  private wake: () => void = () => {};
  /** @internal resolves when the function suspends. */
  readonly suspended: Promise<void>;

  /** @internal */
  constructor(step: ClaimedStep, journal: Entry[]) {
    this.id = step.id;
    this.signal = step.signal;
    this.attempt = step.attempt;
    this.journal = journal;
    this.suspended = new Promise((r) => (this.wake = r));
    // A resume fills in the pending last entry: the signal consumed (or none: a timeout),
    // or the children's ends. Written by this claim's outcome.
    const last = journal[journal.length - 1];
    if (last?.t === "signal" && !last.done && (step.wake === "signal" || step.wake === "timeout")) {
      last.done = true;
      const got = (step.inbox ?? []).find((s) => last.names.includes(s.name));
      last.got = got ? { signal_id: got.signalId, name: got.name, payload: got.payload } : null;
      this.dirty = true;
    } else if (last?.t === "children" && !last.results && step.wake === "children") {
      last.results = (step.children ?? []).map((c) => ({ id: c.id, kind: c.kind, status: c.status, result: c.result, error: c.error }));
      this.dirty = true;
    }
  }

  private suspend(s: Suspend): Promise<never> {
    if (!this.suspension) {
      this.suspension = s;
      this.snapshot = this.journal.map((e) => ({ ...e }));
      this.wake();
    }
    return never();
  }

  private diverge(position: number, recorded: string, found: string): Promise<never> {
    return this.suspend({
      s: "diverged",
      reason: `${NONDETERMINISM} non-determinism at journal position ${position}: recorded ${recorded}, the code now calls ${found}`,
    });
  }

  /** The next position: its entry if it matches, "new", or null (halted). */
  private slot(found: string, same: (e: Entry) => boolean): Entry | "new" | null {
    if (this.suspension) return null;
    const e = this.journal[this.pos];
    if (e === undefined) return "new";
    if (same(e)) {
      this.pos++;
      return e;
    }
    void this.diverge(this.pos, label(e), found);
    return null;
  }

  private push(e: Entry): void {
    if (this.suspension) return; // abandoned: nothing it does is written
    this.journal.push(e);
    this.pos++;
  }

  /** @internal the first recorded position the function did not reach (it returned early). */
  unconsumed(): string | null {
    const e = this.journal[this.pos];
    return e ? `${NONDETERMINISM} non-determinism at journal position ${this.pos}: recorded ${label(e)}, the code now calls the workflow's end` : null;
  }

  /** @internal */
  get hasUnwritten(): boolean {
    return this.dirty;
  }

  /** @internal */
  get entries(): Entry[] {
    return this.journal;
  }

  /** Run `fn` once and journal its result (JSON); a replay returns the recorded result
   * without running it. An error with retries left retries the instance after a backoff;
   * the last error is recorded and thrown as StepFailed (on replay too). */
  async step<T>(name: string, fn: () => T | Promise<T>, opts: StepOptions = {}): Promise<Awaited<T>> {
    const e = this.slot(`step ${JSON.stringify(name)}`, (r) => r.t === "step" && r.name === name);
    if (e === null) return never();
    if (e !== "new") {
      const r = e as Extract<Entry, { t: "step" }>;
      if (r.err !== undefined && r.err !== null) throw new StepFailed(name, r.err);
      return (r.ok ?? null) as Awaited<T>;
    }
    // One new step per claim: what ran before is written before this one runs.
    if (this.dirty) return this.suspend({ s: "next" });
    this.dirty = true;
    let value: Awaited<T>;
    try {
      value = (await fn()) as Awaited<T>;
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      const retries = opts.retries ?? 3;
      if (this.attempt <= retries) {
        const base = opts.backoffMs ?? 1_000;
        const ceiling = Math.min(opts.maxBackoffMs ?? 300_000, base * 2 ** Math.min(this.attempt - 1, 30));
        const delayMs = Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
        return this.suspend({ s: "retry", delayMs, reason: `step ${JSON.stringify(name)}: ${message}` });
      }
      this.push({ t: "step", name, err: message });
      throw new StepFailed(name, message);
    }
    // JSON round trip: a replay gets what the journal holds, so the live run gets it too.
    const text = value === undefined ? "null" : JSON.stringify(value);
    const ok = text === undefined ? null : JSON.parse(text);
    this.push({ t: "step", name, ok });
    return ok as Awaited<T>;
  }

  /** Sleep durably: the instance parks (no slot, no connection) until `ms` passed. */
  async sleep(ms: number): Promise<void> {
    return this.sleepUntil(Date.now() + ms);
  }

  async sleepUntil(at: Date | number): Promise<void> {
    const e = this.slot("sleep", (r) => r.t === "sleep");
    if (e === null) return never();
    if (e !== "new") return;
    const untilMs = typeof at === "number" ? at : at.getTime();
    this.push({ t: "sleep", until_ms: untilMs });
    return this.suspend({ s: "sleep", untilMs });
  }

  /** Wait durably for a signal with one of `names` (one already in the inbox counts); null
   * when `timeoutMs` passed first. */
  async waitForSignal<P = unknown>(names: string | string[], opts: { timeoutMs?: number } = {}): Promise<SignalRecord<P> | null> {
    const list = typeof names === "string" ? [names] : [...names];
    const key = JSON.stringify(list);
    const e = this.slot(`wait_for_signal ${key}`, (r) => r.t === "signal" && JSON.stringify(r.names) === key);
    if (e === null) return never();
    if (e === "new") {
      this.push({ t: "signal", names: list, done: false });
      return this.suspend({ s: "await", names: list, timeoutMs: opts.timeoutMs });
    }
    const r = e as Extract<Entry, { t: "signal" }>;
    if (!r.done) return this.suspend({ s: "await", names: list, timeoutMs: opts.timeoutMs });
    return r.got ? { signalId: r.got.signal_id, name: r.got.name, payload: r.got.payload as P } : null;
  }

  /** Start `children` together and wait durably until all ended (`join: "all"`) or the
   * first ended (`"any"`: the others are cancelled). Their ends in the order given; a
   * failed child does not fail this workflow. */
  async spawn(children: ChildSpec[], opts: { join?: "all" | "any" } = {}): Promise<ChildEnd[]> {
    if (children.length === 0) return [];
    const any = opts.join === "any";
    const kinds = children.map((c) => c.kind);
    const key = JSON.stringify(kinds);
    const call = `${any ? "first_of" : "children"} ${key}`;
    const e = this.slot(call, (r) => r.t === "children" && JSON.stringify(r.kinds) === key && Boolean(r.any) === any);
    if (e === null) return never();
    if (e === "new") {
      this.push({ t: "children", kinds, ...(any ? { any } : {}), results: null });
      return this.suspend({ s: "spawn", children, any });
    }
    const r = e as Extract<Entry, { t: "children" }>;
    if (!r.results) return this.diverge(this.pos - 1, call, "children whose join was not delivered");
    // Children are inserted in the order given, so ids order them.
    return [...r.results]
      .sort((a, b) => a.id - b.id)
      .map((c) => ({ id: c.id, kind: c.kind, status: c.status, result: c.result ?? null, error: c.error ?? null }));
  }

  /** Run one child workflow and wait for its result (ChildFailed if it did not end done). */
  async child<I, O>(wf: WorkflowRef<I, O>, input: I, opts: Omit<ChildSpec, "kind" | "input"> = {}): Promise<O> {
    const [end] = await this.spawn([{ ...opts, kind: wf.name, input }]);
    if (!end || end.status !== "done") throw new ChildFailed(end ?? { id: 0, kind: wf.name, status: "missing", result: null, error: "no child result" });
    return end.result as O;
  }

  /** One child per input, all at once; each settles like Promise.allSettled. */
  async fanOut<I, O>(wf: WorkflowRef<I, O>, inputs: I[]): Promise<PromiseSettledResult<O>[]> {
    const ends = await this.spawn(inputs.map((input) => ({ kind: wf.name, input })));
    return ends.map((c) =>
      c.status === "done" ? { status: "fulfilled" as const, value: c.result as O } : { status: "rejected" as const, reason: new ChildFailed(c) },
    );
  }

  /** One child per input; the result of the first to end (the others are cancelled). */
  async firstOf<I, O>(wf: WorkflowRef<I, O>, inputs: I[]): Promise<O> {
    const ends = await this.spawn(inputs.map((input) => ({ kind: wf.name, input })), { join: "any" });
    const first = ends.find((c) => c.status === "done") ?? ends.find((c) => c.status !== "cancelled") ?? ends[0];
    if (!first) throw new ChildFailed({ id: 0, kind: wf.name, status: "missing", result: null, error: "no child was started" });
    if (first.status !== "done") throw new ChildFailed(first);
    return first.result as O;
  }

  /** The current time, recorded: a replay returns the same instant. */
  async now(): Promise<Date> {
    const e = this.slot("now", (r) => r.t === "now");
    if (e === null) return never();
    if (e !== "new") return new Date((e as Extract<Entry, { t: "now" }>).ms);
    const ms = Date.now();
    this.push({ t: "now", ms });
    return new Date(ms);
  }

  /** A random integer in [0, 2^48), recorded: a replay returns the same number. */
  async random(): Promise<number> {
    const e = this.slot("random", (r) => r.t === "random");
    if (e === null) return never();
    if (e !== "new") return (e as Extract<Entry, { t: "random" }>).v;
    const v = randomInt(0, 2 ** 48 - 1);
    this.push({ t: "random", v });
    return v;
  }

  /** A version marker: true on a run that reaches it first (recorded) or whose journal has
   * it here; false on a run recorded before the change (which follows the old path). */
  async patched(name: string): Promise<boolean> {
    if (this.suspension) return never();
    const e = this.journal[this.pos];
    if (e?.t === "patch" && e.name === name) {
      this.pos++;
      return true;
    }
    if (e !== undefined) return false;
    this.push({ t: "patch", name });
    return true;
  }
}

/** Anything with a kind name that children can be started as. */
export interface WorkflowRef<I, O> {
  readonly name: string;
  /** @internal type carrier */
  readonly __types?: { input: I; output: O };
}

export type WorkflowFn<P, O> = (ctx: WorkflowContext, input: P) => Promise<O>;

/** One claim of a code-first instance: replay the journal, run on, one outcome. */
export async function driveClaim<P, O>(
  fn: WorkflowFn<P, O>,
  schema: import("./standard-schema.js").StandardSchemaV1 | undefined,
  step: ClaimedStep,
): Promise<StepOutcome> {
  const st = step.state as { journal?: unknown } | null;
  const raw = st && typeof st === "object" ? st.journal : undefined;
  if (raw !== undefined && raw !== null && !Array.isArray(raw)) {
    return { outcome: "fail", reason: `${NONDETERMINISM} unreadable journal: not an array` };
  }
  let input: P;
  try {
    input = (schema ? await validate(schema, step.input, `workflow "${step.kind}": invalid input`) : step.input) as P;
  } catch (e) {
    return { outcome: "fail", reason: (e as Error).message };
  }
  const ctx = new WorkflowContext(step, (raw ?? []) as Entry[]);
  type Ended = { ok: true; value: unknown } | { ok: false; error: unknown };
  const ran: Promise<Ended> = (async () => fn(ctx, input))().then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  const ending = await Promise.race([ran, ctx.suspended.then(() => null)]);
  const state = (j: Entry[]) => ({ journal: j });
  const fail = (reason: string): StepOutcome =>
    // A fail writes no state: what this claim added to the journal (a step's result, a
    // consumed signal, joined children) is written first with `next`, and the replay of the
    // next claim fails the same way with nothing unwritten.
    ctx.hasUnwritten ? { outcome: "next", step: ENGINE_STEP, state: state(ctx.entries) } : { outcome: "fail", reason };
  // A suspension wins over a return: the return may rest on a halted call.
  const s = ctx.suspension;
  if (s) {
    const j = ctx.snapshot ?? ctx.entries;
    switch (s.s) {
      case "next":
        return { outcome: "next", step: ENGINE_STEP, state: state(j) };
      case "retry":
        return { outcome: "retry", delayMs: s.delayMs, reason: s.reason };
      case "sleep":
        return { outcome: "sleep", step: ENGINE_STEP, untilMs: Math.max(0, Math.round(s.untilMs)), state: state(j) };
      case "await":
        return {
          outcome: "await",
          signals: s.names,
          step: ENGINE_STEP,
          ...(s.timeoutMs !== undefined ? { timeoutMs: s.timeoutMs } : {}),
          state: state(j),
        };
      case "spawn":
        return {
          outcome: "spawn",
          children: s.children,
          step: ENGINE_STEP,
          join: s.any ? "any" : "all",
          onChildFailure: "deliver",
          state: state(j),
        };
      case "diverged":
        return fail(s.reason);
    }
  }
  if (!ending) return { outcome: "fail", reason: "the workflow function stopped without an outcome (a bug in pgferry)" };
  if (!ending.ok) {
    const e = ending.error;
    return fail(e instanceof Error ? e.message || e.name : String(e));
  }
  const early = ctx.unconsumed();
  if (early) return fail(early);
  return { outcome: "done", result: ending.value === undefined ? null : ending.value };
}
