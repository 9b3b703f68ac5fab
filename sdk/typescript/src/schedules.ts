// Schedules (docs/schedules.md) over the HTTP API: the server has no gRPC service for them.
// `ensure` makes a declaration in code idempotent: create; when the name exists, compare
// and leave it (same spec) or replace it (delete + create: the server has no update).
import { Conflict, PgferryError } from "./errors.js";
import { HttpApi } from "./http.js";

export interface ScheduleOptions {
  /** IANA time zone the cron expression is read in (default "UTC"). */
  timezone?: string;
  /** Each job waits a random 0..jitterMs. */
  jitterMs?: number;
  paused?: boolean;
  /** Fires missed while no leader ran: skip, run_once (default), run_all. */
  missed?: "skip" | "run_once" | "run_all";
  catchupWindowMs?: number;
  catchupMax?: number;
  /** The previous fire's job still pending or running: allow (default), skip, buffer_one, cancel_previous. */
  overlap?: "allow" | "skip" | "buffer_one" | "cancel_previous";
  graceMs?: number;
  startAt?: Date;
  endAt?: Date;
}

export interface ScheduleSpec extends ScheduleOptions {
  name: string;
  /** A cron expression (5 or 6 fields, or @daily …), or intervalMs instead. */
  cron?: string;
  intervalMs?: number;
  target:
    | { type: "job"; queue: string; kind: string; args?: unknown; priority?: number; maxAttempts?: number }
    | { type: "workflow"; queue: string; kind: string; input?: unknown };
}

export interface ScheduleInfo {
  name: string;
  cron: string | null;
  intervalMs: number | null;
  timezone: string;
  paused: boolean;
  target: Record<string, unknown>;
  nextFireAt: string | null;
  lastFireAt: string | null;
  raw: Record<string, unknown>;
}

export interface Ensured {
  schedule: ScheduleInfo;
  /** created: new; unchanged: the same spec existed; replaced: a different one was replaced. */
  action: "created" | "unchanged" | "replaced";
}

function body(s: ScheduleSpec): Record<string, unknown> {
  const t = s.target;
  const target =
    t.type === "job"
      ? {
          type: "job",
          queue: t.queue,
          kind: t.kind,
          args: t.args === undefined ? null : t.args,
          ...(t.priority !== undefined ? { priority: t.priority } : {}),
          ...(t.maxAttempts !== undefined ? { max_attempts: t.maxAttempts } : {}),
        }
      : { type: "workflow", queue: t.queue, kind: t.kind, input: t.input === undefined ? {} : t.input };
  const b: Record<string, unknown> = { name: s.name, target };
  const put = (k: string, v: unknown) => {
    if (v !== undefined) b[k] = v instanceof Date ? v.toISOString() : v;
  };
  put("cron", s.cron);
  put("interval_ms", s.intervalMs);
  put("timezone", s.timezone);
  put("jitter_ms", s.jitterMs);
  put("paused", s.paused);
  put("missed", s.missed);
  put("catchup_window_ms", s.catchupWindowMs);
  put("catchup_max", s.catchupMax);
  put("overlap", s.overlap);
  put("grace_ms", s.graceMs);
  put("start_at", s.startAt);
  put("end_at", s.endAt);
  return b;
}

function info(r: Record<string, any>): ScheduleInfo {
  return {
    name: r.name,
    cron: r.cron ?? null,
    intervalMs: r.interval_ms ?? null,
    timezone: r.timezone,
    paused: Boolean(r.paused),
    target: r.target ?? {},
    nextFireAt: r.next_fire_at ?? null,
    lastFireAt: r.last_fire_at ?? null,
    raw: r,
  };
}

/** JSON with sorted keys: the server stores args as jsonb, which reorders them. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.keys(v as object)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v ?? null);
}

/** Whether the stored schedule says what `wanted` (a create body) says: every field given. */
function same(stored: Record<string, unknown>, wanted: Record<string, unknown>): boolean {
  for (const [k, v] of Object.entries(wanted)) {
    if (k === "target") {
      const st = (stored.target ?? {}) as Record<string, unknown>;
      for (const [tk, tv] of Object.entries(v as Record<string, unknown>)) {
        if (canonical(st[tk]) !== canonical(tv)) return false;
      }
    } else if (k === "start_at" || k === "end_at") {
      if (Date.parse(String(stored[k])) !== Date.parse(String(v))) return false;
    } else if (canonical(stored[k]) !== canonical(v)) return false;
  }
  return true;
}

export class Schedules {
  private readonly http: HttpApi | null;
  /** @internal made by Client.schedules */
  constructor(httpUrl: string | undefined, apiKey: string, timeoutMs: number) {
    this.http = httpUrl ? new HttpApi(httpUrl, apiKey, timeoutMs) : null;
  }

  private api(): HttpApi {
    if (!this.http) {
      throw new PgferryError("schedules are served over the HTTP API only: give the client httpUrl", { code: "not_implemented", field: "httpUrl" });
    }
    return this.http;
  }

  async create(spec: ScheduleSpec): Promise<ScheduleInfo> {
    return info(await this.api().call("POST", "/v1/schedules", body(spec)));
  }

  async get(name: string): Promise<ScheduleInfo> {
    return info(await this.api().call("GET", `/v1/schedules/${encodeURIComponent(name)}`));
  }

  async delete(name: string): Promise<void> {
    await this.api().call("DELETE", `/v1/schedules/${encodeURIComponent(name)}`);
  }

  /** Create the schedule, or leave an identical one, or replace a different one. Safe to
   * call at every start of every process. */
  async ensure(spec: ScheduleSpec): Promise<Ensured> {
    const wanted = body(spec);
    try {
      return { schedule: await this.create(spec), action: "created" };
    } catch (e) {
      if (!(e instanceof Conflict)) throw e;
    }
    const existing = await this.get(spec.name);
    if (same(existing.raw, wanted)) return { schedule: existing, action: "unchanged" };
    await this.delete(spec.name);
    return { schedule: await this.create(spec), action: "replaced" };
  }
}
