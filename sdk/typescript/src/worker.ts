// The worker: one Worker stream per process; credits = free execution slots.
//
// Every Job the server sends has a slot (the server never exceeds the credits granted), so a
// job starts the moment it arrives. The worker asks for batches in its hello
// (docs/protocol.md): jobs come as JobBatch, acks as ResultAckBatch, and the results of every
// handler that finished since the last write go out as one ResultBatch carrying the freed
// slots' credits — one write per event-loop turn instead of three messages per job.
import { hostname } from "node:os";
import { performance } from "node:perf_hooks";
import type * as grpc from "@grpc/grpc-js";
import { JobContext } from "./context.js";
import {
  AuthError,
  Conflict,
  InvalidArgument,
  NotFound,
  ProtocolError,
  Unavailable,
  ValidationError,
  fromServiceError,
  isServiceError,
} from "./errors.js";
import { Heartbeats, attemptKey } from "./heartbeats.js";
import { Resends } from "./resend.js";
import { Cancel, Fail, JobAborted, Snooze } from "./outcomes.js";
import { loadTracing, tracingEnabled, withJobSpan } from "./tracing.js";
import { Backoff, authMetadata, method, openChannel, sleep } from "./transport.js";
import { fromJson } from "./types.js";
import type { AttemptRef, ResultAck, WireJob, WireJobResult, WireOutcome, WorkerHelloAck, WorkerResponse } from "./wire.js";

export type Handler<I = unknown, O = unknown> = (input: I, ctx: JobContext) => O | Promise<O>;

export interface HandlerOptions {
  /** Validates (and may transform) the job's args before the handler sees them; a value it
   * refuses dead-letters the job at once (it can never succeed). Throws ValidationError. */
  parse?: (args: unknown) => unknown | Promise<unknown>;
  /** The attempt fails (retryable, kind "TimeoutError") after this long and ctx.signal is
   * aborted; the slot is freed at once. */
  timeoutMs?: number;
}

export interface Logger {
  warn(msg: string): void;
  info?(msg: string): void;
  debug?(msg: string): void;
}

export interface WorkerOptions {
  /** The server's gRPC address. */
  url: string;
  apiKey: string;
  /** Queues to take jobs from. */
  queues: string[];
  /** Execution slots: jobs running at once (default 10). */
  concurrency?: number;
  /** Stable per process (default "node-<host>-<pid>"). */
  workerId?: string;
  /** After stop() or SIGTERM, how long in-flight jobs may take (default 30 s). Then their
   * signals abort and, a moment later, what is left goes back through lease expiry. */
  gracePeriodMs?: number;
  /** Drain on SIGTERM/SIGINT; a second signal stops at once (default true). */
  handleSignals?: boolean;
  /** Longest pause between reconnect attempts (default 10 s). */
  reconnectCapMs?: number;
  /** Most jobs/results per batch message this worker asks for (default 500; 0: none). */
  maxBatch?: number;
  logger?: Logger;
}

export interface WorkerStats {
  completed: number;
  failed: number;
  snoozed: number;
  cancelled: number;
  acked: number;
  stale: number;
  ackErrors: number;
  /** Results the server could not record for now (its database was unavailable), sent
   * again after a pause: counted per refusal. */
  resultsResent: number;
  reconnects: number;
  abandoned: number;
}

// Errors that end run() instead of a reconnect: another try would get the same answer.
const isFatal = (e: unknown): boolean =>
  e instanceof AuthError || e instanceof InvalidArgument || e instanceof NotFound || e instanceof Conflict;

const STREAM = method("Worker", "Stream");
// How long jobs aborted at the end of the grace period get to report before the worker closes.
const ABORT_GRACE_MS = 2_000;

interface Entry {
  fn: Handler<unknown, unknown>;
  opts: HandlerOptions;
}

export class Worker {
  readonly queues: string[];
  readonly concurrency: number;
  readonly workerId: string;
  readonly stats: WorkerStats = {
    completed: 0,
    failed: 0,
    snoozed: 0,
    cancelled: 0,
    acked: 0,
    stale: 0,
    ackErrors: 0,
    resultsResent: 0,
    reconnects: 0,
    abandoned: 0,
  };
  private readonly opts: Required<Omit<WorkerOptions, "workerId" | "logger" | "concurrency">>;
  private readonly log: Logger;
  private readonly handlers = new Map<string, Entry>();
  private readonly backoff: Backoff;
  // Jobs started and not finished.
  private readonly running = new Map<string, JobContext>();
  // Results waiting for the writer, and those written but not yet acked.
  private results: WireJobResult[] = [];
  private unacked = new Map<string, WireJobResult>();
  // Results the server refused as unavailable (not recorded, its database was down): they
  // stay in unacked (a new stream resends them anyway) and go out again when the resend
  // timer fires. Without this a result lost to a database blip left its job running until
  // the lease ran out, then ran it again.
  private readonly resends = new Resends((keys) => this.resendRefused(keys));
  private credits = 0; // freed slots not yet granted on this stream
  private batch = 0; // items per batch granted on this stream; 0: single messages
  private hb = new Heartbeats();
  private unstarted: AttemptRef[] = [];
  private call: grpc.ClientDuplexStream<unknown, unknown> | null = null;
  // A session is under way (from opening the stream until it ended), hello or not.
  private sessionOpen = false;
  private kickScheduled = false;
  private draining = false;
  private drainSent = false;
  private drainsUnanswered = 0;
  private drainDeadline = 0;
  private forced = false;
  private stopped = new AbortController();
  private tracing = false;
  private readyWaiters: (() => void)[] = [];
  private isReady = false;
  private runningRun = false;
  helloAck: WorkerHelloAck | null = null;

  constructor(opts: WorkerOptions) {
    if (!opts.url) throw new TypeError("pgferry: Worker needs the server's gRPC url");
    if (!opts.apiKey) throw new TypeError("pgferry: Worker needs apiKey");
    if (!opts.queues?.length) throw new TypeError("pgferry: Worker needs at least one queue");
    const concurrency = opts.concurrency ?? 10;
    if (!(concurrency >= 1)) throw new RangeError("pgferry: concurrency must be >= 1");
    this.queues = [...opts.queues];
    this.concurrency = concurrency;
    this.workerId = opts.workerId ?? `node-${hostname()}-${process.pid}`;
    this.opts = {
      url: opts.url,
      apiKey: opts.apiKey,
      queues: this.queues,
      gracePeriodMs: opts.gracePeriodMs ?? 30_000,
      handleSignals: opts.handleSignals ?? true,
      reconnectCapMs: opts.reconnectCapMs ?? 10_000,
      maxBatch: opts.maxBatch ?? 500,
    };
    this.log = opts.logger ?? { warn: (m) => console.warn(m) };
    this.backoff = new Backoff(100, this.opts.reconnectCapMs);
  }

  // -- registration ------------------------------------------------------------------

  /** Run `fn` for jobs of `kind`: it gets the job's JSON args and the context. Its return
   * value (JSON) is kept as the job's result. Throw Snooze/Cancel/Fail for those outcomes;
   * any other error is a retryable failure. */
  handle<I = unknown, O = unknown>(kind: string, fn: Handler<I, O>, opts: HandlerOptions = {}): this {
    if (this.handlers.has(kind)) throw new Error(`pgferry: a handler for "${kind}" is already registered`);
    this.handlers.set(kind, { fn: fn as Handler<unknown, unknown>, opts });
    return this;
  }

  get kinds(): string[] {
    return [...this.handlers.keys()].sort();
  }

  get inFlight(): number {
    return this.running.size;
  }

  /** Resolves once the stream is open (hello acknowledged, credits granted). */
  ready(): Promise<void> {
    if (this.isReady) return Promise.resolve();
    return new Promise((resolve) => this.readyWaiters.push(resolve));
  }

  // -- running -----------------------------------------------------------------------

  /** Serve until stop() (or SIGTERM) and drained. Rejects on errors a reconnect cannot
   * fix (bad key, scope or hello). */
  async run(): Promise<void> {
    if (this.runningRun) throw new Error("pgferry: this worker is already running");
    this.runningRun = true;
    const onSignal = () => this.onSignal();
    if (this.opts.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    await loadTracing();
    this.tracing = tracingEnabled();
    const channel = openChannel(this.opts.url);
    try {
      for (;;) {
        // stop() while reconnecting with nothing left to report: done, no new stream.
        if (this.draining && this.finished()) return;
        let err: unknown;
        try {
          await this.session(channel);
        } catch (e) {
          if (isFatal(e)) throw e;
          err = e;
        } finally {
          this.call = null;
          this.hb.failAll();
        }
        if (this.draining && (this.finished() || this.forced || performance.now() >= this.drainDeadline)) {
          this.abandon();
          return;
        }
        const delay = this.backoff.next();
        this.stats.reconnects++;
        this.log.warn(`pgferry worker: stream ended (${err instanceof Error ? err.message : "closed"}); reconnecting in ${Math.round(delay)} ms`);
        // stop() cuts a backoff pause short; while draining the pauses stay short but real,
        // so a server that is down does not turn this loop into a spin.
        await (this.draining ? sleep(Math.min(delay, 250)) : sleep(delay, this.stopped.signal));
      }
    } finally {
      this.resends.cancel();
      if (this.opts.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      channel.close();
      this.runningRun = false;
    }
  }

  /** Start a graceful drain: no new jobs, jobs received but not started go back at once,
   * in-flight ones get the grace period. run() resolves when it is done. */
  stop(): void {
    if (this.draining) return;
    this.log.info?.(`pgferry worker ${this.workerId}: draining (${this.running.size} in flight)`);
    this.draining = true;
    this.drainDeadline = performance.now() + this.opts.gracePeriodMs;
    this.stopped.abort();
    this.kick();
    void this.drainWatch();
  }

  private onSignal(): void {
    if (this.draining) {
      this.log.warn("pgferry worker: second signal, stopping now");
      this.drainDeadline = 0;
      return;
    }
    this.stop();
  }

  /** Drain is complete: nothing running, every result acked, the Drain answered. */
  private finished(): boolean {
    return (
      this.running.size === 0 &&
      this.results.length === 0 &&
      this.unacked.size === 0 &&
      this.unstarted.length === 0 &&
      (this.call === null ? !this.sessionOpen : this.drainSent && this.drainsUnanswered === 0)
    );
  }

  /** While draining: close the stream once everything is acked; at the end of the grace
   * period abort the jobs still running, give them a moment to report, then close anyway. */
  private async drainWatch(): Promise<void> {
    let aborted = false;
    let abortedAt = 0;
    while (!this.finished()) {
      const now = performance.now();
      if (!aborted && now >= this.drainDeadline) {
        aborted = true;
        abortedAt = now;
        for (const ctx of this.running.values()) ctx.abort(new JobAborted("shutdown", "the worker is shutting down"));
      }
      if (aborted && (now - abortedAt >= ABORT_GRACE_MS || this.drainDeadline === 0)) break;
      await sleep(20);
    }
    const call = this.call;
    if (!this.finished()) {
      this.forced = true;
      call?.cancel();
      return;
    }
    if (call) {
      call.end();
      // The server ends the stream after our half-close; if it does not, cut it.
      const t = setTimeout(() => call.cancel(), 3_000);
      call.once("close", () => clearTimeout(t));
    }
  }

  /** Grace is over: forget what is still running. Its leases expire and the server retries
   * those jobs; nothing is lost, the attempt just waits for its lease. */
  private abandon(): void {
    if (this.running.size > 0) {
      this.log.warn(`pgferry worker: grace period over; ${this.running.size} job(s) left to lease expiry`);
    }
    for (const ctx of this.running.values()) ctx.abort(new JobAborted("shutdown", "the worker is shutting down"));
    this.stats.abandoned += this.running.size;
    this.running.clear();
    this.results = [];
    this.unacked.clear();
    this.resends.cancel();
    this.unstarted = [];
  }

  /** One stream's life: hello, credits (or Drain when stopping), then messages until the
   * stream ends. Rejects on transport errors so run() can reconnect. */
  private session(channel: grpc.Client): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const call = channel.makeBidiStreamRequest(STREAM.path, STREAM.serialize, STREAM.deserialize, authMetadata(this.opts.apiKey));
      let settled = false;
      let hello = false;
      this.sessionOpen = true;
      const settle = (e?: unknown) => {
        if (settled) return;
        settled = true;
        this.sessionOpen = false;
        if (this.call === call) this.call = null;
        if (e === undefined) resolve();
        else reject(e);
      };
      call.on("data", (r: WorkerResponse) => {
        if (!hello) {
          if (r.msg !== "hello_ack" || !r.hello_ack) {
            call.cancel();
            settle(new ProtocolError("worker stream: expected hello_ack"));
            return;
          }
          hello = true;
          this.onHello(call, r.hello_ack);
          return;
        }
        this.onMessage(r);
      });
      call.on("error", (e: unknown) => settle(isServiceError(e) ? fromServiceError(e) : new Unavailable(String(e))));
      call.on("end", () => settle(this.draining ? undefined : new Unavailable("worker stream closed by the server")));
      call.write({
        hello: {
          api_key: this.opts.apiKey,
          worker_id: this.workerId,
          queues: this.queues,
          kinds: this.kinds,
          max_batch: this.opts.maxBatch,
        },
      });
    });
  }

  private onHello(call: grpc.ClientDuplexStream<unknown, unknown>, ack: WorkerHelloAck): void {
    this.helloAck = ack;
    // Never more than asked for, whatever the server says.
    this.batch = Math.min(ack.max_batch ?? 0, this.opts.maxBatch);
    this.call = call;
    this.backoff.reset();
    // Results sent on a lost stream may not have been recorded: send them again (the
    // server keeps the first outcome of an attempt, so a repeat is answered stale).
    // Refused results are among the unacked ones: no separate resend of them.
    this.results = [...this.unacked.values(), ...this.results];
    this.unacked.clear();
    this.resends.cancel();
    this.drainSent = false;
    this.drainsUnanswered = 0;
    this.credits = this.draining ? 0 : this.concurrency - this.running.size;
    this.kick();
    if (!this.isReady) {
      this.isReady = true;
      for (const w of this.readyWaiters.splice(0)) w();
    }
  }

  private onMessage(r: WorkerResponse): void {
    switch (r.msg) {
      case "jobs":
        for (const job of r.jobs?.jobs ?? []) this.onJob(job);
        break;
      case "job":
        if (r.job) this.onJob(r.job);
        break;
      case "result_acks":
        for (const a of r.result_acks?.acks ?? []) this.onResultAck(a);
        break;
      case "result_ack":
        if (r.result_ack) this.onResultAck(r.result_ack);
        break;
      case "cancel":
        if (r.cancel) {
          const ctx = this.running.get(attemptKey(Number(r.cancel.ref.id), r.cancel.ref.attempt));
          ctx?.abort(new JobAborted("cancelled", "cancelled by the server"));
        }
        break;
      case "heartbeat_ack":
        if (r.heartbeat_ack) this.hb.onAck(r.heartbeat_ack, this.running);
        break;
      case "drained":
        this.drainsUnanswered = Math.max(0, this.drainsUnanswered - 1);
        break;
      default:
        break;
    }
  }

  private onResultAck(a: ResultAck): void {
    const key = attemptKey(Number(a.ref.id), a.ref.attempt);
    if (a.error?.code === "unavailable") {
      // Not recorded, and nothing else recorded either: send it again shortly.
      if (this.unacked.has(key)) this.refuse(key, a);
      return;
    }
    if (!this.unacked.delete(key)) return;
    this.stats.acked++;
    if (a.stale) this.stats.stale++;
    if (a.error && (a.error.code || a.error.message)) {
      this.stats.ackErrors++;
      this.log.warn(`pgferry worker: result of job ${a.ref.id} refused: ${a.error.code}: ${a.error.message}`);
      return;
    }
    this.resends.recorded();
  }

  /** The server could not record this result for now (its database is unavailable): keep
   * it unacked and send it again after a pause that doubles per resend while the outage
   * lasts (a successful ack resets it). */
  private refuse(key: string, a: ResultAck): void {
    this.stats.resultsResent++;
    // Debug, not warn: an outage refuses every result, repeatedly.
    this.log.debug?.(`pgferry worker: result of job ${a.ref.id} not recorded yet (${a.error?.message ?? ""}); resending`);
    this.resends.refuse(key);
  }

  /** Sends the refused results (those still unacked) again through flush(), the way every
   * finished result goes: in a ResultBatch with the owed credits when batching, else one
   * message each. Out of unacked until written, so a reconnect in between sends each of
   * them once. */
  private resendRefused(keys: Set<string>): void {
    for (const key of keys) {
      const r = this.unacked.get(key);
      if (r === undefined) continue;
      this.unacked.delete(key);
      this.results.push(r);
    }
    if (this.results.length > 0) this.kick();
  }

  // -- writing -----------------------------------------------------------------------

  /** Write what is waiting once per event-loop turn: every result finished in this turn
   * goes out in one message. */
  private kick(): void {
    if (this.kickScheduled) return;
    this.kickScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.kickScheduled = false;
    const call = this.call;
    if (!call) return;
    // A Drain, and another for every job that arrives after it: the server may have sent
    // jobs against credits it held before it read the first Drain. Left unsent, such a job
    // would wait for its lease and keep the drain from ever finishing.
    if (this.draining && (!this.drainSent || this.unstarted.length > 0)) {
      this.drainSent = true;
      this.drainsUnanswered++;
      call.write({ drain: { release: this.unstarted } });
      this.unstarted = [];
    }
    const beat = this.hb.nextMessage();
    if (beat) call.write(beat);
    const results = this.results;
    if (results.length > 0) {
      this.results = [];
      for (const r of results) this.unacked.set(attemptKey(Number(r.ref.id), r.ref.attempt), r);
      if (this.batch > 0) {
        for (let i = 0; i < results.length; i += this.batch) {
          const chunk = results.slice(i, i + this.batch);
          const last = i + this.batch >= results.length;
          call.write({ results: { results: chunk, credit: last ? this.credits : 0 } });
        }
        this.credits = 0;
      } else {
        for (const r of results) call.write({ result: r });
      }
    }
    if (this.credits > 0) {
      call.write({ credit: { n: this.credits } });
      this.credits = 0;
    }
  }

  // -- execution ---------------------------------------------------------------------

  private onJob(job: WireJob): void {
    if (this.draining) {
      // Arrived after the drain began: hand it back unstarted (attempt not used up).
      this.unstarted.push(job.ref);
      this.kick();
      return;
    }
    const ctx = new JobContext(job, this.workerId, (c) => this.beat(c));
    this.running.set(attemptKey(ctx.id, ctx.attempt), ctx);
    void this.execute(ctx, job.args);
  }

  private beat(ctx: JobContext): Promise<boolean> {
    if (!this.running.has(attemptKey(ctx.id, ctx.attempt))) return Promise.resolve(false);
    if (!this.call) return Promise.reject(new Unavailable("no worker stream (reconnecting)"));
    const p = this.hb.request(ctx);
    this.kick();
    return p;
  }

  private async execute(ctx: JobContext, argsJson: string): Promise<void> {
    const started = performance.now();
    let outcome: WireOutcome;
    try {
      const entry = this.handlers.get(ctx.kind);
      if (!entry) throw new Fail(`no handler registered for kind "${ctx.kind}"`, { kind: "UnknownKind" });
      let input = fromJson(argsJson);
      if (entry.opts.parse) input = await entry.opts.parse(input);
      const run = this.tracing
        ? () => withJobSpan(ctx.kind, ctx.queue, ctx.id, ctx.attempt, ctx.meta, async () => entry.fn(input, ctx))
        : () => entry.fn(input, ctx);
      const value = entry.opts.timeoutMs ? await withTimeout(run(), entry.opts.timeoutMs, ctx) : await run();
      outcome = { ok: { result: value === undefined ? "" : JSON.stringify(value) } };
      this.stats.completed++;
    } catch (e) {
      outcome = this.outcomeOf(e, ctx);
    }
    const key = attemptKey(ctx.id, ctx.attempt);
    // Abandoned at shutdown (or timed out and already reported): nothing to send.
    if (this.running.get(key) !== ctx) return;
    this.running.delete(key);
    this.results.push({ ref: ctx.ref, duration_ms: Math.round(performance.now() - started), ...outcome });
    if (!this.draining) this.credits++;
    this.kick();
  }

  private outcomeOf(e: unknown, ctx: JobContext): WireOutcome {
    if (e instanceof Snooze) {
      this.stats.snoozed++;
      return { snooze: { delay_ms: Math.round(e.delayMs) } };
    }
    if (e instanceof Cancel) {
      this.stats.cancelled++;
      return { cancelled: { message: e.message } };
    }
    if (e instanceof Fail) {
      this.stats.failed++;
      return {
        error: {
          message: e.message,
          kind: e.kind,
          retryable: !e.permanent,
          ...(e.retryInMs !== undefined ? { retry_delay_ms: Math.round(e.retryInMs) } : {}),
        },
      };
    }
    if (e instanceof ValidationError) {
      // The args can never pass the schema: no retry can help.
      this.stats.failed++;
      return { error: { message: e.message, kind: "ValidationError", retryable: false } };
    }
    const aborted = ctx.aborted;
    if (aborted?.reason === "cancelled") {
      this.stats.cancelled++;
      return { cancelled: { message: aborted.message } };
    }
    if (aborted?.reason === "shutdown") {
      // Stopped by our shutdown, not by its own fault: run again at once, attempt kept.
      this.stats.snoozed++;
      return { snooze: { delay_ms: 0 } };
    }
    this.stats.failed++;
    const err = e instanceof Error ? e : new Error(String(e));
    const kind = err.name && err.name !== "Error" ? err.name : (err.constructor?.name ?? "Error");
    return { error: { message: err.message || String(e), kind, retryable: true } };
  }
}

function withTimeout<T>(p: T | Promise<T>, ms: number, ctx: JobContext): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => {
      const reason = new JobAborted("timeout", `timed out after ${ms} ms`);
      ctx.abort(reason);
      reject(reason);
    }, ms);
    Promise.resolve(p).then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

