// The worker's heartbeat bookkeeping. At most one Heartbeat message in flight per stream,
// carrying every attempt whose handler asked since the last one: the server answers each
// message with one HeartbeatAck, and with one in flight an ack always belongs to the batch
// that was sent.
import type { JobContext } from "./context.js";
import { Unavailable } from "./errors.js";
import { JobAborted } from "./outcomes.js";
import type { AttemptRef, HeartbeatAck } from "./wire.js";

interface Waiting {
  ref: AttemptRef;
  waiters: { resolve: (held: boolean) => void; reject: (e: Error) => void }[];
}

export const attemptKey = (id: number, attempt: number): string => `${id}:${attempt}`;

export class Heartbeats {
  private pending = new Map<string, Waiting>();
  private inflight = new Map<string, Waiting>();

  request(ctx: JobContext): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const key = attemptKey(ctx.id, ctx.attempt);
      let w = this.pending.get(key);
      if (!w) {
        w = { ref: ctx.ref, waiters: [] };
        this.pending.set(key, w);
      }
      w.waiters.push({ resolve, reject });
    });
  }

  /** The Heartbeat to send now: null while one is in flight or none was asked for. */
  nextMessage(): { heartbeat: { refs: AttemptRef[] } } | null {
    if (this.inflight.size > 0 || this.pending.size === 0) return null;
    this.inflight = this.pending;
    this.pending = new Map();
    return { heartbeat: { refs: [...this.inflight.values()].map((w) => w.ref) } };
  }

  /** Answers the batch in flight; attempts the server says this worker lost are aborted. */
  onAck(ack: HeartbeatAck, running: Map<string, JobContext>): void {
    const lost = new Set((ack.lost ?? []).map((r) => attemptKey(Number(r.id), r.attempt)));
    for (const key of lost) {
      running.get(key)?.abort(new JobAborted("lease_lost", "this worker no longer holds the job (rescued, cancelled or finished)"));
    }
    const batch = this.inflight;
    this.inflight = new Map();
    for (const [key, w] of batch) {
      const ctx = running.get(key);
      const held = !lost.has(key);
      if (ctx && held && ack.lease_until_unix_ms) ctx.leaseUntilMs = Number(ack.lease_until_unix_ms);
      for (const waiter of w.waiters) waiter.resolve(held);
    }
  }

  /** The stream is gone: every heartbeat waiting for an answer rejects with Unavailable. */
  failAll(): void {
    const batches = [this.inflight, this.pending];
    this.inflight = new Map();
    this.pending = new Map();
    const err = new Unavailable("worker stream lost before the heartbeat ack");
    for (const b of batches) for (const w of b.values()) for (const waiter of w.waiters) waiter.reject(err);
  }
}
