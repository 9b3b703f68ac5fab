// A workflow worker over the HTTP API (/v1/workflow-steps/*, docs/workflows.md "Remote
// workers"), for places without HTTP/2 streams (serverless functions, edge runtimes,
// proxies that only pass HTTP/1). It claims up to its free slots per request, posts each
// outcome on its own (the token says which claim it answers, so any server may take it and
// a resend is answered `stale`), and extends running steps' leases with heartbeats; a
// heartbeat answering `held: false` aborts the step's signal. An idle worker polls with a
// backoff (20 ms doubling to `pollMs`); a claim refused by the key's rate limit (429) waits
// the server's Retry-After first. An outcome the server could not record (503 `unavailable`:
// its database is down; 429 `rate_limited`: not processed) or that may not have arrived is
// posted again after a pause (100 ms doubling to 5 s, and no sooner than a 429's
// Retry-After) until it is recorded, or a drain's time is up.
import { hostname } from "node:os";
import { AuthError, InvalidArgument, PermissionDenied, RateLimited, Unavailable } from "./errors.js";
import { HttpApi } from "./http.js";
import { RESEND_MAX_MS, RESEND_MIN_MS } from "./resend.js";
import { sleep } from "./transport.js";
import type { ClaimedStep, KindCaps, StepOutcome } from "./wf-types.js";
import { type StepRegistry, type StepRunner, outcomeFields, retryAfterThrow } from "./wf-worker.js";
import type { Logger } from "./worker.js";

export interface HttpWorkflowWorkerOptions {
  httpUrl: string;
  apiKey: string;
  queues: string[];
  /** Steps running at once (default 10). */
  concurrency?: number;
  workerId?: string;
  /** Lease of each claimed step (default 60 s); heartbeats every third of it extend it. */
  leaseMs?: number;
  /** Longest pause between claims while there is nothing to do (default 1 s). */
  pollMs?: number;
  /** Drain on SIGTERM/SIGINT (default true). */
  handleSignals?: boolean;
  /** After stop(), how long running steps may take before their signals abort (30 s). */
  gracePeriodMs?: number;
  timeoutMs?: number;
  logger?: Logger;
}

interface HttpStep {
  token: string;
  id: number;
  seq: number;
  kind: string;
  step: string;
  state: unknown;
  input: unknown;
  attempt: number;
  max_attempts: number;
  wake: string | null;
  parent_id: number | null;
  inbox: { signal_id: number; name: string; payload: unknown }[] | null;
  children: { id: number; kind: string; status: string; result: unknown; error: string | null }[] | null;
  queue: string;
  lease_until_unix_ms: number;
}

export interface HttpWorkflowWorkerStats {
  steps: number;
  applied: number;
  cancelled: number;
  stale: number;
  lost: number;
  /** Outcomes posted again because the server could not record them for now (its database
   * was unavailable, or the key's rate limit refused them) or could not be reached: counted
   * per resend. */
  outcomesResent: number;
}

const isFatal = (e: unknown): boolean => e instanceof AuthError || e instanceof PermissionDenied || e instanceof InvalidArgument;

export class HttpWorkflowWorker implements StepRegistry {
  readonly queues: string[];
  readonly concurrency: number;
  readonly workerId: string;
  readonly stats: HttpWorkflowWorkerStats = { steps: 0, applied: 0, cancelled: 0, stale: 0, lost: 0, outcomesResent: 0 };
  private readonly api: HttpApi;
  private readonly kinds = new Map<string, { run: StepRunner; caps: KindCaps }>();
  // By token: the step's abort, and its claim for matching heartbeat answers.
  private readonly running = new Map<string, { abort: AbortController; claim: string }>();
  private readonly posting = new Set<Promise<void>>();
  private readonly stopped = new AbortController();
  // Aborted when a drain's time is up: outcomes still not recorded are given up then.
  private readonly giveUp = new AbortController();
  private slotFreed: () => void = () => {};
  private readyWaiters: (() => void)[] = [];
  private isReady = false;

  constructor(private readonly opts: HttpWorkflowWorkerOptions) {
    if (!opts.httpUrl) throw new TypeError("pgferry: HttpWorkflowWorker needs the server's httpUrl");
    if (!opts.apiKey) throw new TypeError("pgferry: HttpWorkflowWorker needs apiKey");
    if (!opts.queues?.length) throw new TypeError("pgferry: HttpWorkflowWorker needs at least one queue");
    this.queues = [...opts.queues];
    this.concurrency = opts.concurrency ?? 10;
    if (!(this.concurrency >= 1)) throw new RangeError("pgferry: concurrency must be >= 1");
    this.workerId = opts.workerId ?? `node-${hostname()}-${process.pid}`;
    this.api = new HttpApi(opts.httpUrl, opts.apiKey, opts.timeoutMs ?? 30_000);
  }

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

  /** Stop claiming; running steps get the grace period, then their signals abort. */
  stop(): void {
    this.stopped.abort();
    this.slotFreed();
  }

  /** Claim and run until stop() (or SIGTERM) and every outcome is posted. */
  async run(): Promise<void> {
    const handle = this.opts.handleSignals ?? true;
    const onSignal = () => this.stop();
    if (handle) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const leaseMs = this.opts.leaseMs ?? 60_000;
    const beat = setInterval(() => void this.heartbeat(leaseMs), Math.max(50, Math.floor(leaseMs / 3)));
    beat.unref();
    try {
      const kinds = [...this.kinds].map(([kind, { caps }]) => ({ kind, inbox: Boolean(caps.inbox), children: Boolean(caps.children) }));
      // A 429 (the key's rate limit, e.g. many workers starting at once) is not fatal: wait
      // the server's Retry-After and register again.
      for (let pause = RESEND_MIN_MS; ; pause = Math.min(pause * 2, RESEND_MAX_MS)) {
        try {
          await this.api.call("POST", "/v1/workflow-steps/kinds", { kinds });
          break;
        } catch (e) {
          if (!(e instanceof RateLimited) || this.stopped.signal.aborted) throw e;
          this.opts.logger?.warn(`pgferry http workflow worker: registering kinds failed: ${e.message}; retrying`);
          await sleep(Math.max(e.retryAfterMs ?? 0, pause), this.stopped.signal);
        }
      }
      this.isReady = true;
      for (const w of this.readyWaiters.splice(0)) w();
      const maxPoll = this.opts.pollMs ?? 1_000;
      let idle = 20;
      let q = 0;
      while (!this.stopped.signal.aborted) {
        const free = this.concurrency - this.running.size;
        if (free <= 0) {
          await new Promise<void>((r) => (this.slotFreed = r));
          continue;
        }
        let got = 0;
        // Set by a 429: claim again no sooner than the server's Retry-After.
        let limitedMs = 0;
        for (let i = 0; i < this.queues.length && got < free && !this.stopped.signal.aborted; i++) {
          const queue = this.queues[q++ % this.queues.length] as string;
          let steps: HttpStep[];
          try {
            const r = await this.api.call<{ steps: HttpStep[] }>("POST", "/v1/workflow-steps/claim", {
              queue,
              max: free - got,
              worker: this.workerId,
              lease_ms: leaseMs,
            });
            steps = r.steps;
          } catch (e) {
            if (isFatal(e)) throw e;
            if (e instanceof RateLimited) limitedMs = e.retryAfterMs ?? idle;
            this.opts.logger?.warn(`pgferry http workflow worker: claim failed: ${(e as Error).message}`);
            break;
          }
          got += steps.length;
          for (const s of steps) this.start(s);
        }
        if (got > 0 && limitedMs === 0) {
          idle = 20;
          continue;
        }
        await sleep(Math.max(idle, limitedMs), this.stopped.signal);
        idle = Math.min(idle * 2, maxPoll);
      }
      await this.drain();
    } finally {
      clearInterval(beat);
      if (handle) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
  }

  private async drain(): Promise<void> {
    const deadline = Date.now() + (this.opts.gracePeriodMs ?? 30_000);
    while (this.running.size > 0 && Date.now() < deadline) await sleep(20);
    for (const r of this.running.values()) r.abort.abort(new Error("the worker is shutting down"));
    const until = Date.now() + 2_000;
    while (this.running.size > 0 && Date.now() < until) await sleep(20);
    // Outcomes still being posted again (the server's database is unavailable) get what is
    // left of the grace period, at least as long as aborted steps got.
    const last = Math.max(deadline, until);
    while (this.posting.size > 0 && Date.now() < last) await sleep(20);
    this.giveUp.abort();
    await Promise.allSettled([...this.posting]);
  }

  private start(s: HttpStep): void {
    const abort = new AbortController();
    this.running.set(s.token, { abort, claim: `${s.id}:${s.seq}` });
    this.stats.steps++;
    const claimed: ClaimedStep = {
      id: Number(s.id),
      seq: s.seq,
      queue: s.queue,
      kind: s.kind,
      step: s.step,
      state: s.state ?? null,
      input: s.input ?? null,
      attempt: s.attempt,
      maxAttempts: s.max_attempts,
      wake: (s.wake || null) as ClaimedStep["wake"],
      parentId: s.parent_id ?? null,
      inbox: s.inbox?.map((g) => ({ signalId: Number(g.signal_id), name: g.name, payload: g.payload })) ?? null,
      children: s.children?.map((c) => ({ id: Number(c.id), kind: c.kind, status: c.status, result: c.result ?? null, error: c.error ?? null })) ?? null,
      leaseUntil: new Date(s.lease_until_unix_ms),
      signal: abort.signal,
    };
    const p = this.execute(s, claimed).finally(() => this.posting.delete(p));
    this.posting.add(p);
  }

  private async execute(s: HttpStep, claimed: ClaimedStep): Promise<void> {
    let outcome: StepOutcome;
    try {
      const entry = this.kinds.get(s.kind);
      if (!entry) throw new Error(`no workflow registered for kind "${s.kind}" on this worker`);
      outcome = await entry.run(claimed);
    } catch (e) {
      outcome = retryAfterThrow(e, s.attempt);
    }
    this.running.delete(s.token);
    this.slotFreed();
    const body = { token: s.token, ...outcomeFields(outcome, (v) => v) };
    // The token makes a resend safe (answered stale): post again what was not recorded (a
    // 503 unavailable: the server's database is down; a 429: the key's rate limit refused it
    // unprocessed) or may not have arrived, for as long as that lasts. Giving up left the
    // step claimed until its lease ran out, then ran it again.
    for (let pause = RESEND_MIN_MS; ; pause = Math.min(pause * 2, RESEND_MAX_MS)) {
      try {
        const r = await this.api.call<{ result: string }>("POST", "/v1/workflow-steps/outcome", body);
        if (r.result === "applied") this.stats.applied++;
        else if (r.result === "cancelled") this.stats.cancelled++;
        else if (r.result === "stale") this.stats.stale++;
        return;
      } catch (e) {
        if (!(e instanceof Unavailable || e instanceof RateLimited) || this.giveUp.signal.aborted) {
          this.stats.lost++;
          this.opts.logger?.warn(`pgferry http workflow worker: outcome for instance ${s.id} not recorded: ${(e as Error).message}`);
          return;
        }
        this.stats.outcomesResent++;
        // Debug, not warn: an outage refuses every outcome, repeatedly.
        this.opts.logger?.debug?.(`pgferry http workflow worker: outcome for instance ${s.id} not recorded yet (${(e as Error).message}); resending`);
        await sleep(e instanceof RateLimited ? Math.max(e.retryAfterMs ?? 0, pause) : pause, this.giveUp.signal);
      }
    }
  }

  private async heartbeat(leaseMs: number): Promise<void> {
    const held = [...this.running.values()];
    if (held.length === 0) return;
    try {
      const r = await this.api.call<{ steps: { id: number; seq: number; held: boolean; cancelled: boolean }[] }>("POST", "/v1/workflow-steps/heartbeat", {
        tokens: [...this.running.keys()],
        lease_ms: leaseMs,
      });
      const byClaim = new Map(held.map((h) => [h.claim, h.abort]));
      for (const b of r.steps) {
        if (!b.held) byClaim.get(`${b.id}:${b.seq}`)?.abort(new Error(b.cancelled ? "the workflow instance was cancelled" : "the step's lease was lost"));
      }
    } catch (e) {
      this.opts.logger?.warn(`pgferry http workflow worker: heartbeat failed: ${(e as Error).message}`);
    }
  }
}
