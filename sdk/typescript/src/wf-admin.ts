// Starting, signalling, cancelling and awaiting workflow instances: the WorkflowAdmin gRPC
// service, or the HTTP API (/v1/workflows) when the client has only an HTTP address or the
// server does not offer the service.
import type * as grpc from "@grpc/grpc-js";
import { InvalidArgument, PgferryError, Unavailable, Unimplemented, fromServiceError } from "./errors.js";
import { HttpApi } from "./http.js";
import { authMetadata, method, openChannel, sleep } from "./transport.js";
import { fromJson } from "./types.js";
import { NONDETERMINISM } from "./wf-code.js";
import { ENDED, type StartOptions, type WorkflowInfo, type WorkflowSummary } from "./wf-types.js";

/** A workflow instance ended failed (or cancelled) instead of done. */
export class WorkflowFailedError extends PgferryError {
  static override readonly defaultCode: string = "workflow_failed";
  constructor(
    message: string,
    readonly instance: WorkflowInfo,
    code?: string,
  ) {
    super(message, code ? { code } : {});
  }
}
/** The instance is parked failed because its code diverged from its journal: deploy code
 * that matches, then `retry(id)`. */
export class NonDeterminismError extends WorkflowFailedError {
  static override readonly defaultCode: string = "non_determinism";
}

export interface Started {
  id: number;
  /** An active instance had the correlation key: this is its id. */
  duplicate: boolean;
}

export interface SignalSent {
  signalId: number;
  instanceId: number;
  /** The instance awaited this name and is runnable now; false: kept in its inbox. */
  delivered: boolean;
}

export type SignalTarget = number | { queue: string; correlationKey: string };

// A WorkflowRetention (gRPC: the optional field absent when unset; HTTP: null).
const retentionOut = (w: any): number | null => (w.retention_ms == null ? null : Number(w.retention_ms));
const date = (ms: unknown): Date | null => (ms ? new Date(Number(ms)) : null);
const json = (v: unknown, wire: boolean): unknown => (wire ? fromJson(v as string) : (v ?? null));

function info(w: Record<string, any>, wire: boolean): WorkflowInfo {
  return {
    id: Number(w.id),
    kind: w.kind,
    queue: w.queue ?? "",
    step: w.step,
    status: w.status,
    state: json(w.state, wire),
    input: json(w.input, wire),
    result: json(w.result, wire),
    error: w.error ?? "",
    attempt: w.attempt,
    maxAttempts: w.max_attempts,
    priority: w.priority,
    awaits: w.awaits ?? [],
    parentId: w.parent_id == null ? null : Number(w.parent_id),
    childrenPending: w.children_pending ?? 0,
    correlationKey: w.correlation_key ?? "",
    inboxPending: Number(w.inbox_pending ?? 0),
    createdAt: date(w.created_at_unix_ms) as Date,
    updatedAt: date(w.updated_at_unix_ms) as Date,
    finishedAt: date(w.finished_at_unix_ms),
    history: (w.history ?? []).map((h: Record<string, any>) => ({
      stepSeq: h.step_seq,
      step: h.step,
      attempt: h.attempt,
      outcome: h.outcome,
      error: h.error ?? "",
      worker: h.worker ?? "",
      startedAt: String(h.started_at ?? ""),
      finishedAt: String(h.finished_at ?? ""),
    })),
  };
}

function summary(w: Record<string, any>): WorkflowSummary {
  return {
    id: Number(w.id),
    kind: w.kind,
    queue: w.queue ?? "",
    step: w.step,
    status: w.status,
    attempt: w.attempt,
    parentId: w.parent_id == null ? null : Number(w.parent_id),
    correlationKey: w.correlation_key ?? "",
    error: w.error ?? "",
    createdAt: date(w.created_at_unix_ms) as Date,
    updatedAt: date(w.updated_at_unix_ms) as Date,
    finishedAt: date(w.finished_at_unix_ms),
  };
}

export class WorkflowAdmin {
  private channel: grpc.Client | null = null;
  private http: HttpApi | null;

  /** @internal made by Client.workflows */
  constructor(
    private readonly opts: { url: string | undefined; httpUrl: string | undefined; apiKey: string; timeoutMs: number; defaultQueue: string },
  ) {
    this.http = opts.url ? null : new HttpApi(opts.httpUrl as string, opts.apiKey, opts.timeoutMs);
  }

  close(): void {
    this.channel?.close();
    this.channel = null;
  }

  private unary<T>(name: string, req: unknown): Promise<T> {
    const m = method("WorkflowAdmin", name);
    this.channel ??= openChannel(this.opts.url as string);
    const ch = this.channel;
    return new Promise<T>((resolve, reject) => {
      ch.makeUnaryRequest(m.path, m.serialize, m.deserialize, req, authMetadata(this.opts.apiKey), { deadline: Date.now() + this.opts.timeoutMs }, (err, v) =>
        err ? reject(fromServiceError(err)) : resolve(v as T),
      );
    });
  }

  private async call<T>(name: string, req: unknown, grpcOut: (w: any) => T, viaHttp: (h: HttpApi) => Promise<T>): Promise<T> {
    if (this.http) return viaHttp(this.http);
    try {
      return grpcOut(await this.unary(name, req));
    } catch (e) {
      if (!(e instanceof Unimplemented) || !this.opts.httpUrl) throw e;
      this.http = new HttpApi(this.opts.httpUrl, this.opts.apiKey, this.opts.timeoutMs);
      return viaHttp(this.http);
    }
  }

  /** Start an instance of `kind`. */
  start(kind: string, input: unknown, o: StartOptions = {}): Promise<Started> {
    const queue = o.queue ?? this.opts.defaultQueue;
    const runAt = o.runAt === undefined ? undefined : typeof o.runAt === "number" ? o.runAt : o.runAt.getTime();
    const common = {
      ...(o.step !== undefined ? { step: o.step } : {}),
      ...(o.correlationKey !== undefined ? { correlation_key: o.correlationKey } : {}),
      ...(o.concurrencyKey !== undefined ? { concurrency_key: o.concurrencyKey } : {}),
      ...(o.concurrencyLimit !== undefined ? { concurrency_limit: o.concurrencyLimit } : {}),
      ...(o.rateKey !== undefined ? { rate_key: o.rateKey } : {}),
      ...(o.maxAttempts !== undefined ? { max_attempts: o.maxAttempts } : {}),
      ...(runAt !== undefined ? { run_at_unix_ms: runAt } : {}),
    };
    const value = input === undefined ? {} : input;
    return this.call(
      "Start",
      { kind, queue, input: JSON.stringify(value), priority: o.priority ?? 0, ...common, ...(o.state !== undefined ? { state: JSON.stringify(o.state) } : {}) },
      (w) => ({ id: Number(w.id), duplicate: Boolean(w.duplicate) }),
      async (h) => {
        const r = await h.call<any>("POST", "/v1/workflows", {
          kind,
          queue,
          input: value,
          ...common,
          ...(o.priority !== undefined ? { priority: o.priority } : {}),
          ...(o.state !== undefined ? { state: o.state } : {}),
        });
        return { id: Number(r.id), duplicate: Boolean(r.duplicate) };
      },
    );
  }

  /** Send a signal to an instance (by id, or by queue and correlation key). A signal that
   * arrives before the instance waits for it is kept in its inbox. */
  signal(target: SignalTarget, name: string, payload?: unknown): Promise<SignalSent> {
    const p = payload === undefined ? null : payload;
    const t = typeof target === "number" ? { id: target } : { correlation: { queue: target.queue, key: target.correlationKey } };
    const out = (w: any): SignalSent => ({ signalId: Number(w.signal_id), instanceId: Number(w.instance_id), delivered: Boolean(w.delivered) });
    return this.call("Signal", { ...t, name, payload: JSON.stringify(p) }, out, async (h) =>
      out(
        typeof target === "number"
          ? await h.call("POST", `/v1/workflows/${target}/signal`, { name, payload: p })
          : await h.call("POST", "/v1/workflows/signal", { name, payload: p, queue: target.queue, correlation_key: target.correlationKey }),
      ),
    );
  }

  /** Cancel an instance and its descendants; no step of theirs runs after this. */
  cancel(id: number, reason = ""): Promise<WorkflowInfo> {
    return this.call(
      "Cancel",
      { id, reason },
      (w) => info(w.instance, true),
      async (h) => {
        const r = await h.call<any>("POST", `/v1/workflows/${id}/cancel`, undefined, { reason });
        return info(r.instance ?? r, false);
      },
    );
  }

  /** Run a failed instance again from its failed step (after a fixed deploy). */
  retry(id: number): Promise<{ id: number; step: string }> {
    return this.call("Retry", { id }, (w) => ({ id: Number(w.id), step: w.step }), async (h) => {
      const r = await h.call<any>("POST", `/v1/workflows/${id}/retry`);
      return { id: Number(r.id ?? id), step: r.step };
    });
  }

  /** The instance with its state and step history. NotFound for unknown (and other tenants') ids. */
  get(id: number): Promise<WorkflowInfo> {
    return this.call("Get", { id }, (w) => info(w, true), async (h) => info(await h.call<any>("GET", `/v1/workflows/${id}`), false));
  }

  /** Instances of a queue, newest first (`before`: the previous page's `next`). */
  list(
    queue: string,
    f: { kind?: string; status?: string; correlationKey?: string; before?: number; limit?: number } = {},
  ): Promise<{ instances: WorkflowSummary[]; hasMore: boolean; next: number | null }> {
    const q = { queue, kind: f.kind ?? "", status: f.status ?? "", correlation_key: f.correlationKey ?? "", before: f.before ?? 0, limit: f.limit ?? 0 };
    const out = (w: any) => ({ instances: (w.instances ?? []).map(summary), hasMore: Boolean(w.has_more), next: w.next == null ? null : Number(w.next) });
    return this.call("List", q, out, async (h) =>
      out(await h.call<any>("GET", "/v1/workflows", undefined, { ...q, before: f.before, limit: f.limit })),
    );
  }

  /** How long `queue` (default: the client's default queue) keeps its ended instances, in
   * milliseconds; null: the server's default applies (the queue has no setting of its own). */
  getRetention(queue?: string): Promise<number | null> {
    const q = queue ?? this.opts.defaultQueue;
    return this.call("GetRetention", { queue: q }, retentionOut, async (h) =>
      retentionOut(await h.call<any>("GET", `/v1/queues/${encodeURIComponent(q)}/workflow-retention`)),
    );
  }

  /** Keep `queue`'s ended instances `retentionMs` milliseconds (0 to ten years) after they
   * ended; null clears the queue's own setting, so the server's default applies. Returns the
   * setting as stored. Needs an admin key; audited. */
  setRetention(retentionMs: number | null, o: { queue?: string } = {}): Promise<number | null> {
    if (retentionMs !== null && !(Number.isSafeInteger(retentionMs) && retentionMs >= 0)) {
      // uint64 on the wire: a negative or fractional number would not encode as given.
      return Promise.reject(new InvalidArgument("retentionMs: must be an integer of milliseconds, 0 to ten years, or null", { field: "retentionMs" }));
    }
    const q = o.queue ?? this.opts.defaultQueue;
    return this.call("SetRetention", { queue: q, ...(retentionMs === null ? {} : { retention_ms: retentionMs }) }, retentionOut, async (h) =>
      retentionOut(await h.call<any>("PUT", `/v1/queues/${encodeURIComponent(q)}/workflow-retention`, { retention_ms: retentionMs })),
    );
  }

  /** Wait until the instance ended: its result when done; WorkflowFailedError (or
   * NonDeterminismError) when failed or cancelled. Polls with backoff (20 ms to 500 ms);
   * an unreachable server (Unavailable) is waited out until the timeout. */
  async result<T = unknown>(id: number, o: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<T> {
    const deadline = o.timeoutMs === undefined ? Infinity : Date.now() + o.timeoutMs;
    let pause = 20;
    for (;;) {
      let i: WorkflowInfo;
      try {
        i = await this.get(id);
      } catch (e) {
        // A server restarting (or a dropped connection) is no answer: keep waiting.
        if (!(e instanceof Unavailable) || Date.now() + pause > deadline || o.signal?.aborted) throw e;
        await sleep(pause, o.signal);
        pause = Math.min(pause * 2, 500);
        continue;
      }
      if (ENDED.has(i.status)) {
        if (i.status === "done") return i.result as T;
        const msg = `workflow ${id} (${i.kind}) ended ${i.status}${i.error ? `: ${i.error}` : ""}`;
        if (i.error.startsWith(NONDETERMINISM)) throw new NonDeterminismError(msg, i);
        throw new WorkflowFailedError(msg, i, i.status === "cancelled" ? "cancelled" : undefined);
      }
      if (o.signal?.aborted) throw new PgferryError(`waiting for workflow ${id} was aborted`, { code: "aborted" });
      if (Date.now() + pause > deadline) {
        throw new WorkflowFailedError(`workflow ${id} still ${i.status} after ${o.timeoutMs} ms`, i, "timeout");
      }
      await sleep(pause, o.signal);
      pause = Math.min(pause * 2, 500);
    }
  }
}

/** A started instance, typed by its workflow's result. */
export class WorkflowHandle<O> {
  constructor(
    private readonly admin: WorkflowAdmin,
    readonly id: number,
    readonly duplicate: boolean,
  ) {}
  result(o: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<O> {
    return this.admin.result<O>(this.id, o);
  }
  signal(name: string, payload?: unknown): Promise<SignalSent> {
    return this.admin.signal(this.id, name, payload);
  }
  cancel(reason = ""): Promise<WorkflowInfo> {
    return this.admin.cancel(this.id, reason);
  }
  retry(): Promise<{ id: number; step: string }> {
    return this.admin.retry(this.id);
  }
  describe(): Promise<WorkflowInfo> {
    return this.admin.get(this.id);
  }
}

