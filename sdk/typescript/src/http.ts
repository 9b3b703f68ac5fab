// The server's HTTP/JSON API (/v1, docs/http-api.md) with global fetch: the fallback for
// admin calls when a server does not offer the gRPC Admin service, and the whole transport
// for clients given only an HTTP address (serverless functions, edge runtimes).
import { PgferryError, RateLimited, Unavailable, fromWireError } from "./errors.js";
import {
  type CancelJobsResult,
  type DeadFilter,
  type EnqueuedJob,
  type JobInfo,
  type ListJobsOptions,
  type Page,
  type QueueInfo,
  type QueueSettings,
  jobFromHttp,
  queueFromWire,
  settingsToWire,
  toHttpJob,
} from "./types.js";
import type { WireJobSpec } from "./wire.js";

const STATUS_CODES: Record<number, string> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  413: "payload_too_large",
  429: "rate_limited",
  501: "not_implemented",
  503: "unavailable",
};

type Query = Record<string, string | number | undefined>;

export class HttpApi {
  private readonly base: string;
  constructor(
    baseUrl: string,
    private readonly apiKey: string,
    private readonly timeoutMs: number | undefined,
  ) {
    this.base = baseUrl.replace(/\/+$/, "");
  }

  async call<T>(method: string, path: string, body?: unknown, query?: Query, headers?: Record<string, string>): Promise<T> {
    return (await this.callWithHeaders<T>(method, path, body, query, headers)).body;
  }

  async callWithHeaders<T>(
    method: string,
    path: string,
    body?: unknown,
    query?: Query,
    headers?: Record<string, string>,
  ): Promise<{ body: T; headers: Headers }> {
    let url = this.base + path;
    if (query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q.set(k, String(v));
      const s = q.toString();
      if (s) url += `?${s}`;
    }
    const h: Record<string, string> = { authorization: `Bearer ${this.apiKey}`, ...headers };
    if (body !== undefined) h["content-type"] = "application/json";
    let resp: Response;
    try {
      resp = await fetch(url, {
        method,
        headers: h,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        ...(this.timeoutMs ? { signal: AbortSignal.timeout(this.timeoutMs) } : {}),
      });
    } catch (e) {
      throw new Unavailable(`HTTP ${method} ${path} failed: ${(e as Error).message}`, { cause: e });
    }
    let text: string;
    try {
      text = await resp.text();
    } catch (e) {
      throw new Unavailable(`HTTP ${method} ${path}: the answer was cut off: ${(e as Error).message}`, { cause: e });
    }
    if (!resp.ok) throw httpError(resp, text);
    return { body: (text ? JSON.parse(text) : null) as T, headers: resp.headers };
  }

  /** POST /v1/jobs with the Idempotency-Key header; a replay is answered 200 with
   * `Idempotent-Replayed: true`. */
  async enqueue(spec: WireJobSpec, idempotencyKey: string): Promise<EnqueuedJob> {
    const r = await this.callWithHeaders<{ job_id: number; duplicate?: boolean }>(
      "POST",
      "/v1/jobs",
      toHttpJob(spec),
      undefined,
      { "idempotency-key": idempotencyKey },
    );
    const replayed = r.headers.get("idempotent-replayed") === "true";
    return { id: Number(r.body.job_id), duplicate: Boolean(r.body.duplicate), replayed };
  }

  async enqueueBatch(specs: WireJobSpec[], idempotencyKey: string): Promise<EnqueuedJob[]> {
    const r = await this.callWithHeaders<{ job_ids: number[]; duplicates?: boolean[] }>(
      "POST",
      "/v1/jobs/batch",
      { jobs: specs.map(toHttpJob) },
      undefined,
      { "idempotency-key": idempotencyKey },
    );
    const replayed = r.headers.get("idempotent-replayed") === "true";
    return r.body.job_ids.map((id, i) => ({ id: Number(id), duplicate: Boolean(r.body.duplicates?.[i]), replayed }));
  }

  /** GET /v1/jobs/{id}/result?wait_ms=: the job once finished, or as it is when the wait
   * (at most the server's long-poll limit) ends. */
  async waitResult(id: number, waitMs: number): Promise<{ job: JobInfo; finished: boolean }> {
    const r = await this.call<Record<string, unknown>>("GET", `/v1/jobs/${id}/result`, undefined, {
      wait_ms: Math.max(0, Math.min(Math.floor(waitMs), 60_000)),
    });
    return { job: jobFromHttp(r), finished: Boolean(r.finished) };
  }

  async getJob(id: number): Promise<JobInfo> {
    return jobFromHttp(await this.call("GET", `/v1/jobs/${id}`));
  }
  async cancel(id: number): Promise<JobInfo> {
    return jobFromHttp(await this.call("POST", `/v1/jobs/${id}/cancel`));
  }
  async retry(id: number): Promise<JobInfo> {
    return jobFromHttp(await this.call("POST", `/v1/jobs/${id}/retry`));
  }
  async listJobs(o: ListJobsOptions): Promise<Page<JobInfo>> {
    const r = await this.call<{ jobs: Record<string, unknown>[]; has_more: boolean; next_cursor?: string }>(
      "GET",
      "/v1/jobs",
      undefined,
      { queue: o.queue, state: o.state, kind: o.kind, since_unix_ms: o.sinceUnixMs, cursor: o.cursor, limit: o.limit },
    );
    return { items: r.jobs.map(jobFromHttp), nextCursor: r.has_more ? (r.next_cursor ?? null) : null };
  }
  async listDead(f: DeadFilter, cursor?: string, limit?: number): Promise<Page<JobInfo>> {
    const r = await this.call<{ jobs: Record<string, unknown>[]; has_more: boolean; next_cursor?: string }>(
      "GET",
      "/v1/dead",
      undefined,
      { queue: f.queue, kind: f.kind, error_contains: f.errorContains, cursor, limit },
    );
    return { items: r.jobs.map(jobFromHttp), nextCursor: r.has_more ? (r.next_cursor ?? null) : null };
  }
  async deadOp(op: "retry" | "purge", f: DeadFilter): Promise<number> {
    const body: Record<string, unknown> = {};
    if (f.queue) body.queue = f.queue;
    if (f.kind) body.kind = f.kind;
    if (f.errorContains) body.error_contains = f.errorContains;
    if (f.ids?.length) body.ids = f.ids;
    return Number((await this.call<{ count: number }>("POST", `/v1/dead/${op}`, body)).count);
  }
  async listQueues(): Promise<QueueInfo[]> {
    const r = await this.call<{ queues: Record<string, unknown>[] }>("GET", "/v1/queues");
    return r.queues.map(queueFromWire);
  }
  async updateQueue(name: string, settings: QueueSettings): Promise<QueueInfo> {
    return queueFromWire(await this.call("PATCH", `/v1/queues/${encodeURIComponent(name)}`, settingsToWire(settings)));
  }
  async queueAction(name: string, action: "pause" | "resume"): Promise<QueueInfo> {
    return queueFromWire(await this.call("POST", `/v1/queues/${encodeURIComponent(name)}/${action}`));
  }
  async cancelJobs(queue: string, o: { kind?: string; states?: string[]; limit?: number }): Promise<CancelJobsResult> {
    const body: Record<string, unknown> = {};
    if (o.kind) body.kind = o.kind;
    if (o.states?.length) body.states = o.states;
    if (o.limit) body.limit = o.limit;
    const r = await this.call<{ cancelled?: Record<string, number>; has_more?: boolean }>(
      "POST",
      `/v1/queues/${encodeURIComponent(queue)}/cancel`,
      body,
    );
    const c = r.cancelled ?? {};
    return {
      scheduled: Number(c.scheduled ?? 0),
      pending: Number(c.pending ?? 0),
      running: Number(c.running ?? 0),
      hasMore: Boolean(r.has_more),
    };
  }
}

function httpError(resp: Response, text: string): PgferryError {
  let code = STATUS_CODES[resp.status] ?? "internal";
  let message = `HTTP ${resp.status}`;
  let field = "";
  try {
    const err = (JSON.parse(text) as { error?: { code?: string; message?: string; field?: string } }).error;
    if (err) {
      code = err.code ?? code;
      message = err.message ?? message;
      field = err.field ?? "";
    }
  } catch {
    // Not our JSON error body (a proxy's page): keep the status mapping.
  }
  const e = fromWireError(code, message, field);
  if (e instanceof RateLimited) {
    const ra = Number(resp.headers.get("retry-after"));
    if (Number.isFinite(ra) && ra > 0) e.retryAfterMs = ra * 1000;
  }
  return e;
}
