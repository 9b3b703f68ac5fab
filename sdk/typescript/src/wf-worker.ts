// The workflow worker: one WorkflowWorker stream per worker (proto/pgferry/v1/workflow.proto).
// Credits = free slots; steps arrive in StepBatches; the outcomes of every step that ended
// in one event-loop turn go out as one StepOutcomeBatch with the freed slots' credits (one
// statement on the server). Outcomes not acknowledged are sent again on a new stream after a
// reconnect (the server answers a repeat `stale`). Long steps' leases are extended with
// heartbeats; a StepCancel or a lost lease aborts the step's signal. An outcome the server
// could not record because its database was unavailable (a StepAck with code `unavailable`)
// stays unacknowledged and is sent again after a pause (100 ms doubling to 5 s, reset by a
// clean ack).
import { hostname } from "node:os";
import type * as grpc from "@grpc/grpc-js";
import { AuthError, Conflict, InvalidArgument, NotFound, ProtocolError, Unavailable, fromServiceError, isServiceError } from "./errors.js";
import { Resends } from "./resend.js";
import { Backoff, authMetadata, method, openChannel, sleep } from "./transport.js";
import { fromJson } from "./types.js";
import type { ClaimedStep, KindCaps, StepOutcome } from "./wf-types.js";
import type { Logger } from "./worker.js";

interface WireRef {
  id: number;
  seq: number;
  token: string;
}

interface WireStep {
  ref: WireRef;
  queue: string;
  kind: string;
  step: string;
  state: string;
  input: string;
  attempt: number;
  max_attempts: number;
  wake: string;
  parent_id?: number | null;
  inbox: string;
  children: string;
  lease_until_unix_ms: number;
}

interface WireResponse {
  msg?: "hello_ack" | "steps" | "acks" | "cancel" | "heartbeat_ack" | "drained";
  hello_ack?: { tenant: string; server_version: string; lease_ms: number; max_batch: number };
  steps?: { steps: WireStep[] };
  acks?: { acks: { ref: WireRef; result: string; error?: { code: string; message: string; field: string } | null }[] };
  cancel?: { ref: WireRef };
  heartbeat_ack?: { beats: { ref: WireRef; held: boolean; cancelled: boolean }[] };
}

/** Runs one claimed step: its outcome. A throw is a retry after a backoff. */
export type StepRunner = (step: ClaimedStep) => Promise<StepOutcome>;

export interface WorkflowWorkerOptions {
  url: string;
  apiKey: string;
  queues: string[];
  /** Steps running at once (default 10). */
  concurrency?: number;
  workerId?: string;
  /** Lease of each step (default: the server's, 60 s). Heartbeats extend it. */
  leaseMs?: number;
  /** Drain on SIGTERM/SIGINT (default true). */
  handleSignals?: boolean;
  /** After stop(), how long running steps may take before their signals abort (30 s). */
  gracePeriodMs?: number;
  reconnectCapMs?: number;
  logger?: Logger;
}

export interface WorkflowWorkerStats {
  steps: number;
  applied: number;
  cancelled: number;
  stale: number;
  refused: number;
  /** Outcomes the server could not record for now (its database was unavailable), sent
   * again after a pause: counted per refusal. */
  outcomesResent: number;
  reconnects: number;
}

const STREAM = method("WorkflowWorker", "Stream");
const key = (r: WireRef): string => `${r.id}:${r.seq}`;
const isFatal = (e: unknown): boolean =>
  e instanceof AuthError || e instanceof InvalidArgument || e instanceof NotFound || e instanceof Conflict;

/** The fields of an outcome as the server takes them: `encode` turns a JSON value into
 * what the transport carries (gRPC: JSON text; HTTP: the value itself). */
export function outcomeFields(o: StepOutcome, encode: (v: unknown) => unknown): Record<string, unknown> {
  const w: Record<string, unknown> = { outcome: o.outcome };
  const st = (s: unknown) => (s === undefined ? {} : { state: encode(s) });
  switch (o.outcome) {
    case "next":
      return { ...w, step: o.step, ...st(o.state) };
    case "retry":
      return { ...w, delay_ms: Math.max(0, Math.round(o.delayMs)), reason: o.reason };
    case "await":
      return { ...w, signals: o.signals, step: o.step, ...(o.timeoutMs !== undefined ? { timeout_ms: Math.round(o.timeoutMs) } : {}), ...st(o.state) };
    case "sleep":
      return {
        ...w,
        step: o.step,
        ...(o.untilMs !== undefined ? { until_unix_ms: Math.round(o.untilMs) } : { for_ms: Math.max(0, Math.round(o.forMs ?? 0)) }),
        ...st(o.state),
      };
    case "spawn":
      return {
        ...w,
        step: o.step,
        join: o.join ?? "all",
        on_child_failure: o.onChildFailure ?? "fail_parent",
        children: o.children.map((c) => ({
          kind: c.kind,
          input: c.input === undefined ? encode(null) : encode(c.input),
          ...(c.step !== undefined ? { step: c.step } : {}),
          ...(c.queue !== undefined ? { queue: c.queue } : {}),
          ...(c.concurrencyKey !== undefined ? { concurrency_key: c.concurrencyKey } : {}),
          ...(c.concurrencyLimit !== undefined ? { concurrency_limit: c.concurrencyLimit } : {}),
          ...(c.rateKey !== undefined ? { rate_key: c.rateKey } : {}),
          ...(c.priority !== undefined ? { priority: c.priority } : {}),
          ...(c.maxAttempts !== undefined ? { max_attempts: c.maxAttempts } : {}),
        })),
        ...st(o.state),
      };
    case "done":
      return { ...w, result: encode(o.result === undefined ? null : o.result) };
    case "fail":
      return { ...w, reason: o.reason };
  }
}

const toWire = (ref: WireRef, o: StepOutcome): Record<string, unknown> => ({ ref, ...outcomeFields(o, (v) => JSON.stringify(v)) });

/** A handler that throws: the same step again after a backoff (1 s doubling to 60 s; past
 * the instance's max attempts the server fails it). */
export function retryAfterThrow(e: unknown, attempt: number): StepOutcome {
  const ceiling = Math.min(60_000, 1_000 * 2 ** Math.min(Math.max(attempt - 1, 0), 16));
  return { outcome: "retry", delayMs: Math.round(ceiling / 2 + (Math.random() * ceiling) / 2), reason: e instanceof Error ? e.message : String(e) };
}

/** Where workflows and machines register their kinds (gRPC and HTTP workers). */
export interface StepRegistry {
  register(kind: string, run: StepRunner, caps?: KindCaps): unknown;
}

function fromWire(s: WireStep, signal: AbortSignal): ClaimedStep {
  const inbox = s.inbox ? (JSON.parse(s.inbox) as { signal_id: number; name: string; payload: unknown }[]) : null;
  const children = s.children
    ? (JSON.parse(s.children) as { id: number; kind: string; status: string; result: unknown; error: string | null }[])
    : null;
  return {
    id: Number(s.ref.id),
    seq: s.ref.seq,
    queue: s.queue,
    kind: s.kind,
    step: s.step,
    state: fromJson(s.state),
    input: fromJson(s.input),
    attempt: s.attempt,
    maxAttempts: s.max_attempts,
    wake: (s.wake || null) as ClaimedStep["wake"],
    parentId: s.parent_id == null ? null : Number(s.parent_id),
    inbox: inbox?.map((g) => ({ signalId: Number(g.signal_id), name: g.name, payload: g.payload })) ?? null,
    children: children?.map((c) => ({ id: Number(c.id), kind: c.kind, status: c.status, result: c.result ?? null, error: c.error ?? null })) ?? null,
    leaseUntil: new Date(s.lease_until_unix_ms),
    signal,
  };
}

export class WorkflowWorker implements StepRegistry {
  readonly queues: string[];
  readonly concurrency: number;
  readonly workerId: string;
  readonly stats: WorkflowWorkerStats = { steps: 0, applied: 0, cancelled: 0, stale: 0, refused: 0, outcomesResent: 0, reconnects: 0 };
  private readonly kinds = new Map<string, { run: StepRunner; caps: KindCaps }>();
  private readonly running = new Map<string, { ref: WireRef; abort: AbortController }>();
  private outcomes: Record<string, unknown>[] = [];
  private readonly unacked = new Map<string, Record<string, unknown>>();
  // Outcomes the server refused as unavailable (not recorded, its database was down): they
  // stay in unacked (a new stream resends them anyway) and go out again when the resend
  // timer fires. Without this an outcome lost to a database blip left its step claimed
  // until the lease ran out, then the step ran again.
  private readonly resends = new Resends((keys) => this.resendRefused(keys));
  private credits = 0;
  private batch = 64;
  private call: grpc.ClientDuplexStream<unknown, unknown> | null = null;
  private kickScheduled = false;
  private draining = false;
  private drainSent = false;
  private drainAnswered = false;
  private readonly stopped = new AbortController();
  private readonly backoff: Backoff;
  private readonly log: Logger;
  private readyWaiters: (() => void)[] = [];
  private isReady = false;
  private leaseMs = 60_000;
  private beatTimer: NodeJS.Timeout | null = null;

  constructor(private readonly opts: WorkflowWorkerOptions) {
    if (!opts.url) throw new TypeError("pgferry: WorkflowWorker needs the server's gRPC url");
    if (!opts.apiKey) throw new TypeError("pgferry: WorkflowWorker needs apiKey");
    if (!opts.queues?.length) throw new TypeError("pgferry: WorkflowWorker needs at least one queue");
    this.queues = [...opts.queues];
    this.concurrency = opts.concurrency ?? 10;
    if (!(this.concurrency >= 1)) throw new RangeError("pgferry: concurrency must be >= 1");
    this.workerId = opts.workerId ?? `node-${hostname()}-${process.pid}`;
    this.backoff = new Backoff(100, opts.reconnectCapMs ?? 10_000);
    this.log = opts.logger ?? { warn: (m) => console.warn(m) };
  }

  /** Run `run` for every step of instances of `kind`. */
  register(kind: string, run: StepRunner, caps: KindCaps = {}): this {
    if (this.kinds.has(kind)) throw new Error(`pgferry: kind "${kind}" is already registered on this worker`);
    this.kinds.set(kind, { run, caps });
    return this;
  }

  get inFlight(): number {
    return this.running.size;
  }

  ready(): Promise<void> {
    if (this.isReady) return Promise.resolve();
    return new Promise((r) => this.readyWaiters.push(r));
  }

  /** Serve until stop() (or SIGTERM) and drained. */
  async run(): Promise<void> {
    const handle = this.opts.handleSignals ?? true;
    const onSignal = () => this.stop();
    if (handle) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const channel = openChannel(this.opts.url);
    try {
      for (;;) {
        let err: unknown;
        try {
          await this.session(channel);
        } catch (e) {
          if (isFatal(e)) throw e;
          err = e;
        } finally {
          this.call = null;
        }
        if (this.draining && this.finished()) return;
        if (this.draining && this.stopped.signal.aborted && this.forced) return;
        const delay = this.backoff.next();
        this.stats.reconnects++;
        this.log.warn(`pgferry workflow worker: stream ended (${err instanceof Error ? err.message : "closed"}); reconnecting in ${Math.round(delay)} ms`);
        await sleep(this.draining ? Math.min(delay, 250) : delay);
      }
    } finally {
      if (handle) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      if (this.beatTimer) clearInterval(this.beatTimer);
      this.resends.cancel();
      channel.close();
    }
  }

  private forced = false;

  /** Stop taking steps; running ones get the grace period, then their signals abort. */
  stop(): void {
    if (this.draining) return;
    this.draining = true;
    this.stopped.abort();
    this.kick();
    void this.drainWatch();
  }

  private finished(): boolean {
    return this.running.size === 0 && this.outcomes.length === 0 && this.unacked.size === 0 && (this.call === null || (this.drainSent && this.drainAnswered));
  }

  private async drainWatch(): Promise<void> {
    const deadline = Date.now() + (this.opts.gracePeriodMs ?? 30_000);
    let aborted = false;
    while (!this.finished()) {
      if (!aborted && Date.now() >= deadline) {
        aborted = true;
        for (const r of this.running.values()) r.abort.abort(new Error("the worker is shutting down"));
      }
      if (aborted && Date.now() >= deadline + 2_000) {
        this.forced = true;
        this.call?.cancel();
        return;
      }
      await sleep(20);
    }
    const call = this.call;
    if (call) {
      call.end();
      const t = setTimeout(() => call.cancel(), 3_000);
      call.once("close", () => clearTimeout(t));
    }
  }

  private session(channel: grpc.Client): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const call = channel.makeBidiStreamRequest(STREAM.path, STREAM.serialize, STREAM.deserialize, authMetadata(this.opts.apiKey));
      let settled = false;
      let hello = false;
      const settle = (e?: unknown) => {
        if (settled) return;
        settled = true;
        if (this.call === call) this.call = null;
        if (e === undefined) resolve();
        else reject(e);
      };
      call.on("data", (r: WireResponse) => {
        if (!hello) {
          if (r.msg !== "hello_ack" || !r.hello_ack) {
            call.cancel();
            settle(new ProtocolError("workflow worker stream: expected hello_ack"));
            return;
          }
          hello = true;
          this.onHello(call, r.hello_ack);
          return;
        }
        this.onMessage(r);
      });
      call.on("error", (e: unknown) => settle(isServiceError(e) ? fromServiceError(e) : new Unavailable(String(e))));
      call.on("end", () => settle(this.draining ? undefined : new Unavailable("workflow worker stream closed by the server")));
      call.write({
        hello: {
          api_key: this.opts.apiKey,
          worker_id: this.workerId,
          queues: this.queues,
          lease_ms: this.opts.leaseMs ?? 0,
          max_batch: 64,
          kinds: [...this.kinds].map(([kind, { caps }]) => ({ kind, inbox: Boolean(caps.inbox), children: Boolean(caps.children) })),
        },
      });
    });
  }

  private onHello(call: grpc.ClientDuplexStream<unknown, unknown>, ack: NonNullable<WireResponse["hello_ack"]>): void {
    this.call = call;
    this.batch = Math.max(1, Math.min(ack.max_batch || 64, 64));
    this.leaseMs = Number(ack.lease_ms) || this.leaseMs;
    this.backoff.reset();
    // Outcomes sent on a lost stream may not have been recorded: send them again. Refused
    // outcomes are among the unacked ones: no separate resend of them.
    this.outcomes = [...this.unacked.values(), ...this.outcomes];
    this.unacked.clear();
    this.resends.cancel();
    this.drainSent = false;
    this.drainAnswered = false;
    this.credits = this.draining ? 0 : this.concurrency - this.running.size;
    if (!this.beatTimer) {
      // Leases of running steps are extended well before they lapse.
      this.beatTimer = setInterval(() => this.heartbeat(), Math.max(50, Math.floor(this.leaseMs / 3)));
      this.beatTimer.unref();
    }
    this.kick();
    if (!this.isReady) {
      this.isReady = true;
      for (const w of this.readyWaiters.splice(0)) w();
    }
  }

  private heartbeat(): void {
    if (!this.call || this.running.size === 0) return;
    this.call.write({ heartbeat: { refs: [...this.running.values()].map((r) => r.ref) } });
  }

  private onMessage(r: WireResponse): void {
    switch (r.msg) {
      case "steps":
        for (const s of r.steps?.steps ?? []) this.onStep(s);
        break;
      case "acks":
        for (const a of r.acks?.acks ?? []) this.onAck(a);
        break;
      case "cancel":
        if (r.cancel) this.running.get(key(r.cancel.ref))?.abort.abort(new Error("the workflow instance was cancelled"));
        break;
      case "heartbeat_ack":
        for (const b of r.heartbeat_ack?.beats ?? []) {
          if (!b.held) this.running.get(key(b.ref))?.abort.abort(new Error(b.cancelled ? "the workflow instance was cancelled" : "the step's lease was lost"));
        }
        break;
      case "drained":
        this.drainAnswered = true;
        break;
      default:
        break;
    }
  }

  private onAck(a: NonNullable<WireResponse["acks"]>["acks"][number]): void {
    const k = key(a.ref);
    if (a.error?.code === "unavailable") {
      // Not recorded, and nothing else recorded either: send it again shortly.
      if (this.unacked.has(k)) this.refuse(k, a.ref.id, a.error.message);
      return;
    }
    if (!this.unacked.delete(k)) return;
    if (a.error && (a.error.code || a.error.message)) {
      this.stats.refused++;
      this.log.warn(`pgferry workflow worker: outcome for instance ${a.ref.id} refused: ${a.error.code}: ${a.error.message} (${a.error.field})`);
      return;
    }
    this.resends.recorded();
    if (a.result === "STEP_APPLIED") this.stats.applied++;
    else if (a.result === "STEP_CANCELLED") this.stats.cancelled++;
    else if (a.result === "STEP_STALE") this.stats.stale++;
  }

  /** The server could not record this outcome for now (its database is unavailable): keep
   * it unacked and send it again after a pause that doubles per resend while the outage
   * lasts (a clean ack resets it). */
  private refuse(k: string, id: number, message: string): void {
    this.stats.outcomesResent++;
    // Debug, not warn: an outage refuses every outcome, repeatedly.
    this.log.debug?.(`pgferry workflow worker: outcome for instance ${id} not recorded yet (${message}); resending`);
    this.resends.refuse(k);
  }

  /** Hands the refused outcomes (those still unacked) to flush() again, which batches them
   * with the owed credits as every outcome. Out of unacked until written, so a reconnect in
   * between sends each of them once. */
  private resendRefused(keys: Set<string>): void {
    for (const k of keys) {
      const o = this.unacked.get(k);
      if (o === undefined) continue;
      this.unacked.delete(k);
      this.outcomes.push(o);
    }
    if (this.outcomes.length > 0) this.kick();
  }

  private onStep(s: WireStep): void {
    const ref = { id: Number(s.ref.id), seq: s.ref.seq, token: s.ref.token };
    const abort = new AbortController();
    this.running.set(key(ref), { ref, abort });
    this.stats.steps++;
    void this.execute(ref, s, abort);
  }

  private async execute(ref: WireRef, s: WireStep, abort: AbortController): Promise<void> {
    let outcome: StepOutcome;
    try {
      const entry = this.kinds.get(s.kind);
      if (!entry) throw new Error(`no workflow registered for kind "${s.kind}" on this worker`);
      outcome = await entry.run(fromWire(s, abort.signal));
    } catch (e) {
      outcome = retryAfterThrow(e, s.attempt);
    }
    this.running.delete(key(ref));
    this.outcomes.push(toWire(ref, outcome));
    if (!this.draining) this.credits++;
    this.kick();
  }

  private kick(): void {
    if (this.kickScheduled) return;
    this.kickScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.kickScheduled = false;
    const call = this.call;
    if (!call) return;
    if (this.draining && !this.drainSent) {
      this.drainSent = true;
      call.write({ drain: {} });
    }
    const out = this.outcomes;
    if (out.length > 0) {
      this.outcomes = [];
      for (let i = 0; i < out.length; i += this.batch) {
        const chunk = out.slice(i, i + this.batch);
        for (const o of chunk) this.unacked.set(key(o.ref as WireRef), o);
        const last = i + this.batch >= out.length;
        call.write({ outcomes: { outcomes: chunk, credit: last ? this.credits : 0 } });
      }
      this.credits = 0;
    }
    if (this.credits > 0) {
      call.write({ credit: { n: this.credits } });
      this.credits = 0;
    }
  }
}
