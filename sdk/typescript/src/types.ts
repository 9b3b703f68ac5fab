// Value types of the public API and their conversion to and from the protocol.
import type { WireJobInfo, WireJobSpec, WireQueueInfo, WireQueueSettings } from "./wire.js";

export const DEFAULT_QUEUE = "default";

/** JSON values: what job arguments and results are made of. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Options of one enqueue (everything but the kind and the arguments). */
export interface EnqueueOptions {
  /** Queue name (default: the client's default queue, "default"). */
  queue?: string;
  /** 0 (most urgent, the default) to 3. */
  priority?: number;
  /** Run no earlier than this instant (a Date or Unix milliseconds). Exclusive with delayMs. */
  runAt?: Date | number;
  /** Run no earlier than now + delayMs. Exclusive with runAt. */
  delayMs?: number;
  /** While a job with this key holds it, another enqueue with the key returns that job
   * (`duplicate: true`) and writes nothing. */
  uniqueKey?: string;
  /** Overrides the queue's default (1..1000). */
  maxAttempts?: number;
  /** Headers carried to the worker unchanged (`traceparent` is added inside a span). */
  meta?: Record<string, string>;
  /** 1 to 255 visible ASCII characters, scoped to the tenant: any number of requests with
   * the key (from this process or another, within the server's retention, 24 h by default)
   * write the job once; the later ones answer the first one's id with `replayed: true`.
   * Without it the client makes a random key per request, so its own retries after an
   * ambiguous failure are safe. */
  idempotencyKey?: string;
}

/** One job of `enqueueMany`. */
export interface JobRequest extends Omit<EnqueueOptions, "idempotencyKey"> {
  kind: string;
  args?: unknown;
}

/** The answer to an enqueue: the job id, and whether a unique job with the same key already
 * existed (then `id` is that job's and nothing new was enqueued). */
export interface EnqueuedJob {
  id: number;
  duplicate: boolean;
  /** Answered from the request's idempotency key: an earlier request with the key wrote
   * the job and this one wrote nothing. */
  replayed: boolean;
}

export type JobState =
  | "pending"
  | "scheduled"
  | "running"
  | "completed"
  | "failed"
  | "dead"
  | "cancelled";

export interface AttemptInfo {
  attempt: number;
  /** completed | failed | dead | cancelled | rescued | snoozed | running */
  outcome: string;
  error: string;
  errorKind: string;
  claimedAt: Date | null;
  finishedAt: Date | null;
  durationMs: number;
  worker: string;
}

/** A job as the server reports it. */
export interface JobInfo {
  id: number;
  queue: string;
  kind: string;
  state: JobState | string;
  args: unknown;
  meta: Record<string, string>;
  priority: number;
  maxAttempts: number;
  enqueuedAt: Date | null;
  runAt: Date | null;
  attempts: AttemptInfo[];
  /** The handler's return value (JSON), undefined when it returned nothing. */
  result: unknown;
  uniqueKey: string | null;
}

export interface Page<T> {
  items: T[];
  /** Pass as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

export type Durability = "sync" | "async";

export interface QueueSettings {
  concurrency?: number;
  maxAttempts?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  leaseMs?: number;
  retentionMs?: number;
  agingMs?: number;
  /** "async" answers before the commit is on disk: a Postgres crash can lose the last
   * fraction of a second of acknowledged work. Default "sync". */
  durability?: Durability;
}

export interface QueueCounts {
  pending: number;
  scheduled: number;
  running: number;
  completed: number;
  failed: number;
  dead: number;
  cancelled: number;
  enqueued: number;
}

export interface QueueInfo {
  name: string;
  paused: boolean;
  settings: QueueSettings;
  counts: QueueCounts;
  durability: Durability;
}

export interface DeadFilter {
  queue?: string;
  kind?: string;
  /** Substring of the last error message. */
  errorContains?: string;
  /** Only these ids. */
  ids?: number[];
}

export interface ListJobsOptions {
  queue?: string;
  state?: JobState | "";
  kind?: string;
  sinceUnixMs?: number;
  cursor?: string;
  limit?: number;
}

export interface CancelJobsResult {
  scheduled: number;
  pending: number;
  running: number;
  hasMore: boolean;
}

// -- conversions ------------------------------------------------------------------------

export function toJson(value: unknown, what: string): string {
  if (value === undefined || value === null) return "null";
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`pgferry: ${what} is not JSON-serializable`);
  return text;
}

export function fromJson(text: string | undefined | null): unknown {
  return text && text !== "null" ? JSON.parse(text) : null;
}

const ms = (v: number | undefined | null): Date | null => (v ? new Date(v) : null);

/** Build the protocol JobSpec; throws TypeError/RangeError for input that can never be
 * valid (the server validates everything else and answers InvalidArgument). */
export function toSpec(req: JobRequest, queue: string, trace: Record<string, string> | null): WireJobSpec {
  if (req.runAt !== undefined && req.delayMs !== undefined) {
    throw new TypeError("pgferry: pass runAt or delayMs, not both");
  }
  const spec: WireJobSpec = { queue, kind: req.kind, args: toJson(req.args, "args") };
  let meta = req.meta;
  if (trace && !(meta && "traceparent" in meta)) meta = { ...trace, ...meta };
  if (meta && Object.keys(meta).length > 0) spec.meta = meta;
  if (req.priority) spec.priority = req.priority;
  if (req.maxAttempts !== undefined) spec.max_attempts = req.maxAttempts;
  if (req.runAt !== undefined) {
    const t = req.runAt instanceof Date ? req.runAt.getTime() : req.runAt;
    if (!Number.isFinite(t)) throw new RangeError("pgferry: runAt is not a valid time");
    spec.run_at_unix_ms = Math.round(t);
  }
  if (req.delayMs !== undefined) {
    if (!(req.delayMs >= 0)) throw new RangeError("pgferry: delayMs must be >= 0");
    spec.delay_ms = Math.round(req.delayMs);
  }
  if (req.uniqueKey !== undefined) spec.unique_key = req.uniqueKey;
  return spec;
}

/** The HTTP API's job body for the same request. */
export function toHttpJob(spec: WireJobSpec): Record<string, unknown> {
  const body: Record<string, unknown> = { queue: spec.queue, kind: spec.kind, args: JSON.parse(spec.args) };
  if (spec.meta) body.meta = spec.meta;
  if (spec.priority) body.priority = spec.priority;
  if (spec.max_attempts !== undefined) body.max_attempts = spec.max_attempts;
  if (spec.run_at_unix_ms !== undefined) body.run_at_unix_ms = spec.run_at_unix_ms;
  if (spec.delay_ms !== undefined) body.delay_ms = spec.delay_ms;
  if (spec.unique_key !== undefined) body.unique_key = spec.unique_key;
  return body;
}

export function jobFromWire(j: WireJobInfo): JobInfo {
  return {
    id: Number(j.id),
    queue: j.queue,
    kind: j.kind,
    state: j.state,
    args: fromJson(j.args),
    meta: { ...j.meta },
    priority: j.priority,
    maxAttempts: j.max_attempts,
    enqueuedAt: ms(j.enqueued_at_unix_ms),
    runAt: j.run_at_unix_ms !== undefined && j.run_at_unix_ms !== null ? ms(j.run_at_unix_ms) : null,
    attempts: (j.attempts ?? []).map((a) => ({
      attempt: a.attempt,
      outcome: a.outcome,
      error: a.error,
      errorKind: a.error_kind,
      claimedAt: ms(a.claimed_at_unix_ms),
      finishedAt: ms(a.finished_at_unix_ms),
      durationMs: a.duration_ms,
      worker: a.worker,
    })),
    result: j.result ? fromJson(j.result) : undefined,
    uniqueKey: j.unique_key ?? null,
  };
}

/** A job from the HTTP API's JSON (same fields as the protocol, args/result as JSON). */
export function jobFromHttp(d: Record<string, unknown>): JobInfo {
  const attempts = (d.attempts as Record<string, unknown>[] | undefined) ?? [];
  const num = (v: unknown) => (typeof v === "number" ? v : Number(v ?? 0));
  return {
    id: num(d.id),
    queue: String(d.queue ?? ""),
    kind: String(d.kind ?? ""),
    state: String(d.state ?? ""),
    args: d.args ?? null,
    meta: { ...((d.meta as Record<string, string>) ?? {}) },
    priority: num(d.priority),
    maxAttempts: num(d.max_attempts),
    enqueuedAt: ms(num(d.enqueued_at_unix_ms)),
    runAt: d.run_at_unix_ms ? ms(num(d.run_at_unix_ms)) : null,
    attempts: attempts.map((a) => ({
      attempt: num(a.attempt),
      outcome: String(a.outcome ?? ""),
      error: String(a.error ?? ""),
      errorKind: String(a.error_kind ?? ""),
      claimedAt: ms(num(a.claimed_at_unix_ms)),
      finishedAt: ms(num(a.finished_at_unix_ms)),
      durationMs: num(a.duration_ms),
      worker: String(a.worker ?? ""),
    })),
    result: d.result === null ? undefined : d.result,
    uniqueKey: (d.unique_key as string | null | undefined) ?? null,
  };
}

const SETTINGS: [keyof Omit<QueueSettings, "durability">, keyof WireQueueSettings][] = [
  ["concurrency", "concurrency"],
  ["maxAttempts", "max_attempts"],
  ["backoffBaseMs", "backoff_base_ms"],
  ["backoffCapMs", "backoff_cap_ms"],
  ["leaseMs", "lease_ms"],
  ["retentionMs", "retention_ms"],
  ["agingMs", "aging_ms"],
];

export function settingsToWire(s: QueueSettings): WireQueueSettings {
  const out: Record<string, unknown> = {};
  for (const [k, w] of SETTINGS) if (s[k] !== undefined) out[w] = s[k];
  if (s.durability !== undefined) out.durability = s.durability;
  for (const k of Object.keys(s)) {
    if (k !== "durability" && !SETTINGS.some(([n]) => n === k)) {
      throw new TypeError(`pgferry: unknown queue setting "${k}"`);
    }
  }
  return out as WireQueueSettings;
}

const COUNTS: (keyof QueueCounts)[] = [
  "pending",
  "scheduled",
  "running",
  "completed",
  "failed",
  "dead",
  "cancelled",
  "enqueued",
];

/** A queue from the protocol or from the HTTP API's JSON (the same snake_case fields). */
export function queueFromWire(q: WireQueueInfo | Record<string, unknown>): QueueInfo {
  const w = q as WireQueueInfo;
  const raw = (w.settings ?? {}) as Record<string, unknown>;
  const settings: QueueSettings = {};
  for (const [k, name] of SETTINGS) {
    const v = raw[name];
    if (v !== undefined && v !== null) settings[k] = Number(v);
  }
  const durability: Durability = (raw.durability ?? w.durability) === "async" ? "async" : "sync";
  settings.durability = durability;
  const c = (w.counts ?? {}) as Record<string, unknown>;
  const counts = Object.fromEntries(COUNTS.map((k) => [k, Number(c[k] ?? 0)])) as unknown as QueueCounts;
  return { name: w.name, paused: Boolean(w.paused), settings, counts, durability };
}
