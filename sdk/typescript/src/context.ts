// What a handler sees: the job's identity, an AbortSignal that fires on cancel, lease loss,
// timeout and shutdown, and a heartbeat to extend the lease of long work.
import { JobAborted } from "./outcomes.js";
import type { AttemptRef, WireJob } from "./wire.js";

export class JobContext {
  readonly id: number;
  readonly attempt: number;
  readonly queue: string;
  readonly kind: string;
  readonly maxAttempts: number;
  readonly priority: number;
  /** When the job was enqueued (Unix ms, with the fraction when the server sends it). */
  readonly enqueuedAtMs: number;
  /** When the lease ends (Unix ms); heartbeats move it. */
  leaseUntilMs: number;
  readonly workerId: string;
  /** @internal */
  readonly ref: AttemptRef;
  private readonly wireMeta: Record<string, string>;
  // The controller is made on first use of `signal`: most handlers never read it.
  private controller: AbortController | undefined;
  private abortReason: JobAborted | undefined;
  private readonly beat: (ctx: JobContext) => Promise<boolean>;

  /** @internal */
  constructor(job: WireJob, workerId: string, beat: (ctx: JobContext) => Promise<boolean>) {
    this.ref = job.ref;
    this.id = Number(job.ref.id);
    this.attempt = job.ref.attempt;
    this.queue = job.queue;
    this.kind = job.kind;
    this.maxAttempts = job.max_attempts;
    this.priority = job.priority;
    const us = Number(job.enqueued_at_unix_us ?? 0);
    this.enqueuedAtMs = us > 0 ? us / 1000 : Number(job.enqueued_at_unix_ms);
    this.leaseUntilMs = Number(job.lease_until_unix_ms);
    this.workerId = workerId;
    this.wireMeta = job.meta ?? {};
    this.beat = beat;
  }

  /** The job's headers as enqueued (`traceparent` when enqueued inside a span). */
  get meta(): Readonly<Record<string, string>> {
    return this.wireMeta;
  }

  get isLastAttempt(): boolean {
    return this.maxAttempts > 0 && this.attempt >= this.maxAttempts;
  }

  /** Aborted when the job is cancelled, its lease is lost, its task's timeout passes, or the
   * worker's shutdown grace period ends. `signal.reason` is a JobAborted saying which. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortReason) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  /** Why the job was aborted, or undefined while it is not. */
  get aborted(): JobAborted | undefined {
    return this.abortReason;
  }

  /** Throws the abort reason when the job was aborted (a cheap check for loops). */
  throwIfAborted(): void {
    if (this.abortReason) throw this.abortReason;
  }

  /** Extend the lease. True when the server confirmed it; false when this worker no longer
   * holds the job (rescued, cancelled or finished: stop working on it; the signal is then
   * aborted). Rejects with Unavailable when the worker has no connection. */
  heartbeat(): Promise<boolean> {
    return this.beat(this);
  }

  /** @internal */
  abort(reason: JobAborted): void {
    if (this.abortReason) return;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }
}
