// The client: enqueue over one persistent Producer stream (acks matched by seq, so any
// number of enqueues pipeline on it), lookups and admin over the Admin service's unary
// RPCs, and the HTTP API as fallback (or as the only transport when given just httpUrl).
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type * as grpc from "@grpc/grpc-js";
import {
  AuthError,
  JobFailedError,
  NotFound,
  PgferryError,
  ProtocolError,
  Unavailable,
  Unimplemented,
  fromServiceError,
  fromWireError,
  isServiceError,
} from "./errors.js";
import { HttpApi } from "./http.js";
import { Schedules } from "./schedules.js";
import { WorkflowAdmin } from "./wf-admin.js";
import { currentTraceHeaders, loadTracing } from "./tracing.js";
import { Backoff, authMetadata, method, openChannel, sleep } from "./transport.js";
import {
  type CancelJobsResult,
  DEFAULT_QUEUE,
  type DeadFilter,
  type EnqueueOptions,
  type EnqueuedJob,
  type JobInfo,
  type JobRequest,
  type ListJobsOptions,
  type Page,
  type QueueInfo,
  type QueueSettings,
  jobFromWire,
  queueFromWire,
  settingsToWire,
  toSpec,
} from "./types.js";
import type { EnqueueAck, HelloAck, ProducerResponse, WireJobInfo, WireJobSpec, WireQueueInfo } from "./wire.js";

export interface ClientOptions {
  /** The server's gRPC address ("http://127.0.0.1:7272"). Without it, everything goes
   * over the HTTP API at `httpUrl`. */
  url?: string;
  /** The server's HTTP address ("http://127.0.0.1:8787"): admin calls fall back to it when
   * the server does not offer the gRPC Admin service. */
  httpUrl?: string;
  apiKey: string;
  /** Free text for the server's logs (default "node@host:pid"). */
  clientName?: string;
  /** Longest wait for one answer (default 30 s). */
  timeoutMs?: number;
  /** How long enqueue keeps retrying to open the Producer stream (default 10 s). */
  connectTimeoutMs?: number;
  /** Queue for enqueues that name none (default "default"). */
  defaultQueue?: string;
  /** How enqueues whose fate is unknown (the stream broke, the server was unavailable) are
   * retried. Every request carries an idempotency key (the caller's, or a random one), so a
   * retry that reaches a server which had committed the first attempt answers its ids and
   * writes nothing. Default: 6 attempts, 50 ms doubling to 2 s; `{ attempts: 1 }`: none. */
  retry?: RetryPolicy;
}

export interface RetryPolicy {
  /** Attempts in all (1: no retry). */
  attempts?: number;
  /** Pause before the first retry; doubled each time up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
}

/** A fresh random idempotency key (128 bits, hex). */
const newKey = (): string => randomBytes(16).toString("hex");

export interface WaitOptions {
  /** Give up after this long (JobFailedError with code "timeout"); default: wait forever. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

const FINAL_STATES = new Set(["completed", "dead", "cancelled", "failed"]);

interface Pending {
  resolve: (ack: EnqueueAck) => void;
  reject: (e: PgferryError) => void;
  timer: NodeJS.Timeout | undefined;
}

const PRODUCER = method("Producer", "Stream");

/** One Producer stream. */
class ProducerStream {
  readonly pending = new Map<number, Pending>();
  dead: PgferryError | null = null;
  constructor(
    readonly call: grpc.ClientDuplexStream<unknown, unknown>,
    readonly helloAck: HelloAck,
  ) {
    call.on("data", (r: ProducerResponse) => {
      if (r.msg !== "ack" || !r.ack) return;
      const p = this.pending.get(Number(r.ack.seq));
      if (!p) return;
      this.pending.delete(Number(r.ack.seq));
      if (p.timer) clearTimeout(p.timer);
      p.resolve(r.ack);
    });
    call.on("error", (e: unknown) => {
      const err = isServiceError(e) ? fromServiceError(e) : new Unavailable(String(e));
      this.fail(err instanceof AuthError ? err : new Unavailable(`producer stream lost: ${err.message}`, { code: err.code }));
    });
    call.on("end", () => this.fail(new Unavailable("producer stream closed by the server")));
  }

  fail(err: PgferryError): void {
    this.dead ??= err;
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      if (p.timer) clearTimeout(p.timer);
      p.reject(this.dead);
    }
  }

  send(seq: number, req: unknown, timeoutMs: number | undefined): Promise<EnqueueAck> {
    if (this.dead) return Promise.reject(this.dead);
    return new Promise<EnqueueAck>((resolve, reject) => {
      const timer = timeoutMs
        ? setTimeout(() => {
            if (this.pending.delete(seq)) {
              reject(new Unavailable(`no enqueue ack within ${timeoutMs} ms (outcome unknown)`));
            }
          }, timeoutMs)
        : undefined;
      this.pending.set(seq, { resolve, reject, timer });
      this.call.write(req);
    });
  }

  close(): void {
    this.fail(new Unavailable("client closed"));
    this.call.cancel();
  }
}

export class Client {
  readonly url: string | undefined;
  readonly httpUrl: string | undefined;
  readonly clientName: string;
  readonly defaultQueue: string;
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  private readonly apiKey: string;
  private channel: grpc.Client | null = null;
  private stream: ProducerStream | null = null;
  private connecting: Promise<ProducerStream> | null = null;
  private http: HttpApi | null = null;
  private httpOnly: boolean;
  private seq = 0;
  private closed = false;
  // Whether the server has the result long-poll route: unknown until the first wait.
  private longPoll: boolean | undefined;
  private readonly retryPolicy: Required<RetryPolicy>;

  constructor(opts: ClientOptions) {
    if (!opts.url && !opts.httpUrl) throw new TypeError("pgferry: Client needs url (gRPC) or httpUrl (HTTP)");
    if (!opts.apiKey) throw new TypeError("pgferry: Client needs apiKey");
    this.url = opts.url;
    this.httpUrl = opts.httpUrl;
    this.apiKey = opts.apiKey;
    this.clientName = opts.clientName ?? `node@${hostname()}:${process.pid}`;
    this.defaultQueue = opts.defaultQueue ?? DEFAULT_QUEUE;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
    this.httpOnly = !opts.url;
    this.retryPolicy = {
      attempts: Math.max(1, opts.retry?.attempts ?? 6),
      backoffMs: opts.retry?.backoffMs ?? 50,
      maxBackoffMs: opts.retry?.maxBackoffMs ?? 2_000,
    };
    if (this.httpOnly) this.http = new HttpApi(opts.httpUrl as string, this.apiKey, this.timeoutMs);
  }

  /** The transport enqueues use: "grpc" or "http". */
  get transport(): "grpc" | "http" {
    return this.httpOnly ? "http" : "grpc";
  }

  /** Largest encoded args the server accepts (known after the first gRPC enqueue). */
  get maxPayloadBytes(): number | undefined {
    return this.stream?.helloAck.max_payload_bytes;
  }

  private wfAdmin: WorkflowAdmin | null = null;

  /** Workflow instances: start, signal, cancel, retry, get, list, result. */
  get workflows(): WorkflowAdmin {
    this.wfAdmin ??= new WorkflowAdmin({
      url: this.url,
      httpUrl: this.httpUrl,
      apiKey: this.apiKey,
      timeoutMs: this.timeoutMs,
      defaultQueue: this.defaultQueue,
    });
    return this.wfAdmin;
  }

  private sched: Schedules | null = null;

  /** Schedules (cron, intervals) over the HTTP API (needs httpUrl). */
  get schedules(): Schedules {
    this.sched ??= new Schedules(this.httpUrl, this.apiKey, this.timeoutMs);
    return this.sched;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wfAdmin?.close();
    this.stream?.close();
    this.stream = null;
    this.channel?.close();
    this.channel = null;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private chan(): grpc.Client {
    if (this.closed) throw new PgferryError("client is closed", { code: "closed" });
    this.channel ??= openChannel(this.url as string);
    return this.channel;
  }

  // -- enqueue -----------------------------------------------------------------------

  /** Enqueue one job; resolves once it is committed. `args` is any JSON value. */
  async enqueue(kind: string, args?: unknown, opts: EnqueueOptions = {}): Promise<EnqueuedJob> {
    await loadTracing();
    const { idempotencyKey, ...rest } = opts;
    const spec = toSpec({ ...rest, kind, args }, opts.queue ?? this.defaultQueue, currentTraceHeaders());
    const key = idempotencyKey ?? newKey();
    const http = this.http;
    if (this.httpOnly && http) return this.withRetries(() => http.enqueue(spec, key));
    return this.withRetries(async () => {
      const seq = ++this.seq;
      const ack = await this.send(seq, { enqueue: { seq, job: spec, idempotency_key: key } });
      if (ack.job_ids.length !== 1) throw new ProtocolError(`enqueue ack has ${ack.job_ids.length} ids for 1 job`);
      return { id: Number(ack.job_ids[0]), duplicate: Boolean(ack.duplicates[0]), replayed: Boolean(ack.replayed) };
    });
  }

  /** Enqueue several jobs atomically (one EnqueueBatch): all are committed or none. */
  async enqueueMany(jobs: Iterable<JobRequest>, opts: { idempotencyKey?: string } = {}): Promise<EnqueuedJob[]> {
    await loadTracing();
    const trace = currentTraceHeaders();
    const specs: WireJobSpec[] = [];
    for (const j of jobs) specs.push(toSpec(j, j.queue ?? this.defaultQueue, trace));
    if (specs.length === 0) return [];
    const key = opts.idempotencyKey ?? newKey();
    const http = this.http;
    if (this.httpOnly && http) return this.withRetries(() => http.enqueueBatch(specs, key));
    return this.withRetries(async () => {
      const seq = ++this.seq;
      const ack = await this.send(seq, { batch: { seq, jobs: specs, idempotency_key: key } });
      if (ack.job_ids.length !== specs.length) {
        throw new ProtocolError(`enqueue ack has ${ack.job_ids.length} ids for ${specs.length} jobs`);
      }
      const replayed = Boolean(ack.replayed);
      return ack.job_ids.map((id, i) => ({ id: Number(id), duplicate: Boolean(ack.duplicates[i]), replayed }));
    });
  }

  /** Retry a request whose fate is unknown (Unavailable) with the same idempotency key. */
  private async withRetries<T>(attempt: () => Promise<T>): Promise<T> {
    let backoff = this.retryPolicy.backoffMs;
    for (let n = 1; ; n++) {
      try {
        return await attempt();
      } catch (e) {
        if (!(e instanceof Unavailable) || n >= this.retryPolicy.attempts || this.closed) throw e;
        await sleep(backoff);
        backoff = Math.min(backoff * 2, this.retryPolicy.maxBackoffMs);
      }
    }
  }

  private async send(seq: number, req: unknown): Promise<EnqueueAck> {
    const stream = await this.producer();
    const ack = await stream.send(seq, req, this.timeoutMs);
    if (ack.error && (ack.error.code || ack.error.message)) {
      throw fromWireError(ack.error.code, ack.error.message, ack.error.field);
    }
    return ack;
  }

  private producer(): Promise<ProducerStream> {
    const s = this.stream;
    if (s && !s.dead) return Promise.resolve(s);
    this.connecting ??= this.openProducer().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private async openProducer(): Promise<ProducerStream> {
    this.stream?.close();
    this.stream = null;
    const deadline = Date.now() + this.connectTimeoutMs;
    const backoff = new Backoff(50, 2_000);
    for (;;) {
      try {
        this.stream = await this.hello();
        return this.stream;
      } catch (e) {
        if (!(e instanceof Unavailable)) throw e;
        const delay = backoff.next();
        if (Date.now() + delay > deadline) throw e;
        await sleep(delay);
      }
    }
  }

  private hello(): Promise<ProducerStream> {
    const call = this.chan().makeBidiStreamRequest(
      PRODUCER.path,
      PRODUCER.serialize,
      PRODUCER.deserialize,
      authMetadata(this.apiKey),
    );
    return new Promise<ProducerStream>((resolve, reject) => {
      const timer = setTimeout(() => {
        cleanup();
        call.cancel();
        reject(new Unavailable(`no hello_ack within ${this.connectTimeoutMs} ms`));
      }, this.connectTimeoutMs);
      const onData = (r: ProducerResponse) => {
        cleanup();
        if (r.msg !== "hello_ack" || !r.hello_ack) {
          call.cancel();
          reject(new ProtocolError("producer stream: expected hello_ack"));
          return;
        }
        resolve(new ProducerStream(call, r.hello_ack));
      };
      const onError = (e: unknown) => {
        cleanup();
        reject(isServiceError(e) ? fromServiceError(e) : new Unavailable(String(e)));
      };
      const onEnd = () => {
        cleanup();
        reject(new Unavailable("producer stream closed before hello_ack"));
      };
      const cleanup = () => {
        clearTimeout(timer);
        // A cancelled call still emits its status as an "error": keep one listener so it
        // never goes unhandled (an unhandled "error" event would end the process).
        call.on("error", () => {});
        call.off("data", onData);
        call.off("error", onError);
        call.off("end", onEnd);
      };
      call.on("data", onData);
      call.on("error", onError);
      call.on("end", onEnd);
      call.write({ hello: { api_key: this.apiKey, client_name: this.clientName } });
    });
  }

  // -- admin -------------------------------------------------------------------------

  private unary<T>(name: string, req: unknown): Promise<T> {
    const m = method("Admin", name);
    return new Promise<T>((resolve, reject) => {
      this.chan().makeUnaryRequest(
        m.path,
        m.serialize,
        m.deserialize,
        req,
        authMetadata(this.apiKey),
        { deadline: Date.now() + this.timeoutMs },
        (err, value) => (err ? reject(fromServiceError(err)) : resolve(value as T)),
      );
    });
  }

  /** A gRPC Admin call, or the HTTP API's answer when gRPC is not (or no longer) used. */
  private async admin<W, T>(name: string, req: unknown, convert: (w: W) => T, viaHttp: (h: HttpApi) => Promise<T>): Promise<T> {
    if (this.http) return viaHttp(this.http);
    try {
      return convert(await this.unary<W>(name, req));
    } catch (e) {
      if (!(e instanceof Unimplemented)) throw e;
      if (!this.httpUrl) {
        throw new Unimplemented(
          `the server does not offer Admin.${name} over gRPC; pass httpUrl (its HTTP address) to use the HTTP API`,
        );
      }
      this.http = new HttpApi(this.httpUrl, this.apiKey, this.timeoutMs);
      return viaHttp(this.http);
    }
  }

  /** The job's state, attempts and result. NotFound for unknown ids (and other tenants'). */
  getJob(id: number | EnqueuedJob): Promise<JobInfo> {
    const jid = typeof id === "number" ? id : id.id;
    return this.admin("GetJob", { id: jid }, jobFromWire, (h) => h.getJob(jid));
  }

  /** Cancel a job: a pending one never runs; a running one's worker is told (ctx.signal). */
  cancel(id: number | EnqueuedJob): Promise<JobInfo> {
    const jid = typeof id === "number" ? id : id.id;
    return this.admin("CancelJob", { id: jid }, jobFromWire, (h) => h.cancel(jid));
  }

  /** Run a dead-lettered job again (same id). */
  retry(id: number | EnqueuedJob): Promise<JobInfo> {
    const jid = typeof id === "number" ? id : id.id;
    return this.admin("RetryJob", { id: jid }, jobFromWire, (h) => h.retry(jid));
  }

  /** One page of a queue's jobs. */
  listJobs(o: ListJobsOptions = {}): Promise<Page<JobInfo>> {
    const req: Record<string, unknown> = {
      queue: o.queue ?? "",
      state: o.state ?? "",
      kind: o.kind ?? "",
      cursor: o.cursor ?? "",
      limit: o.limit ?? 100,
    };
    if (o.sinceUnixMs !== undefined) req.since_unix_ms = o.sinceUnixMs;
    return this.admin(
      "ListJobs",
      req,
      (r: { jobs: WireJobInfo[]; has_more: boolean; next_cursor: string }) => ({
        items: r.jobs.map(jobFromWire),
        nextCursor: r.has_more ? r.next_cursor : null,
      }),
      (h) => h.listJobs(o),
    );
  }

  /** One page of the dead-letter queue, newest first. */
  listDead(filter: DeadFilter = {}, page: { cursor?: string; limit?: number } = {}): Promise<Page<JobInfo>> {
    return this.admin(
      "ListDead",
      { filter: deadFilter(filter), cursor: page.cursor ?? "", limit: page.limit ?? 100 },
      (r: { jobs: WireJobInfo[]; has_more: boolean; next_cursor: string }) => ({
        items: r.jobs.map(jobFromWire),
        nextCursor: r.has_more ? r.next_cursor : null,
      }),
      (h) => h.listDead(filter, page.cursor, page.limit),
    );
  }

  /** Re-enqueue dead-lettered jobs matching the filter; resolves to how many. */
  retryDead(filter: DeadFilter = {}): Promise<number> {
    return this.admin("RetryDead", deadFilter(filter), (r: { count: number }) => Number(r.count), (h) =>
      h.deadOp("retry", filter),
    );
  }

  /** Delete dead-lettered jobs matching the filter; resolves to how many. */
  purgeDead(filter: DeadFilter = {}): Promise<number> {
    return this.admin("PurgeDead", deadFilter(filter), (r: { count: number }) => Number(r.count), (h) =>
      h.deadOp("purge", filter),
    );
  }

  listQueues(): Promise<QueueInfo[]> {
    return this.admin("ListQueues", {}, (r: { queues: WireQueueInfo[] }) => r.queues.map(queueFromWire), (h) =>
      h.listQueues(),
    );
  }

  /** Create a queue or change its settings (unset ones keep their value). */
  updateQueue(name: string, settings: QueueSettings): Promise<QueueInfo> {
    return this.admin("UpdateQueue", { name, settings: settingsToWire(settings) }, queueFromWire, (h) =>
      h.updateQueue(name, settings),
    );
  }

  pauseQueue(name: string): Promise<QueueInfo> {
    return this.admin("PauseQueue", { name }, queueFromWire, (h) => h.queueAction(name, "pause"));
  }

  resumeQueue(name: string): Promise<QueueInfo> {
    return this.admin("ResumeQueue", { name }, queueFromWire, (h) => h.queueAction(name, "resume"));
  }

  /** Cancel a queue's pending, scheduled and running jobs (optionally of one kind / in
   * some states), at most `limit` per call; `hasMore`: call again. */
  cancelJobs(queue: string, o: { kind?: string; states?: ("pending" | "scheduled" | "running")[]; limit?: number } = {}): Promise<CancelJobsResult> {
    return this.admin(
      "CancelJobs",
      { queue, kind: o.kind ?? "", states: o.states ?? [], limit: o.limit ?? 0 },
      (r: { scheduled: number; pending: number; running: number; has_more: boolean }) => ({
        scheduled: Number(r.scheduled),
        pending: Number(r.pending),
        running: Number(r.running),
        hasMore: r.has_more,
      }),
      (h) => h.cancelJobs(queue, o),
    );
  }

  // -- results -----------------------------------------------------------------------

  /** Wait until the job is completed, dead-lettered or cancelled; resolves to its final
   * JobInfo. With an HTTP address it long-polls `GET /v1/jobs/{id}/result?wait_ms=` (the
   * server answers when the job finishes); otherwise, or against a server without that
   * route, it polls GetJob with backoff (20 ms doubling to 1 s). */
  async waitForJob(id: number | EnqueuedJob, opts: WaitOptions = {}): Promise<JobInfo> {
    const jid = typeof id === "number" ? id : id.id;
    const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
    const http = this.http ?? (this.httpUrl ? new HttpApi(this.httpUrl, this.apiKey, undefined) : null);
    if (http && this.longPoll !== false) {
      try {
        for (;;) {
          opts.signal?.throwIfAborted();
          const left = deadline - Date.now();
          const { job, finished } = await http.waitResult(jid, Math.min(Math.max(left, 0), 30_000));
          this.longPoll = true;
          if (finished) return job;
          if (deadline - Date.now() <= 0) {
            throw new JobFailedError(`job ${jid} still ${job.state} after ${opts.timeoutMs} ms`, job, "timeout");
          }
        }
      } catch (e) {
        // 404: an unknown job, or a server without the route. GetJob tells them apart (it
        // throws NotFound for an unknown job); a server without the route polls from now on.
        if (!(e instanceof NotFound) || this.longPoll === true) throw e;
        await this.getJob(jid);
        this.longPoll = false;
      }
    }
    let delay = 20;
    for (;;) {
      const info = await this.getJob(jid);
      if (FINAL_STATES.has(info.state)) return info;
      opts.signal?.throwIfAborted();
      const left = deadline - Date.now();
      if (left <= 0) throw new JobFailedError(`job ${jid} still ${info.state} after ${opts.timeoutMs} ms`, info, "timeout");
      await sleep(Math.min(delay, left), opts.signal);
      delay = Math.min(delay * 2, 1_000);
    }
  }

  /** The job's result once it completed (the handler's return value); JobFailedError when
   * it was dead-lettered or cancelled instead. */
  async result<T = unknown>(id: number | EnqueuedJob, opts: WaitOptions = {}): Promise<T> {
    const info = await this.waitForJob(id, opts);
    if (info.state === "completed") return info.result as T;
    const last = info.attempts[info.attempts.length - 1];
    const why = last?.error ? `: ${last.error}` : "";
    throw new JobFailedError(`job ${info.id} ended ${info.state}${why}`, info, info.state === "cancelled" ? "cancelled" : "job_failed");
  }
}

function deadFilter(f: DeadFilter): Record<string, unknown> {
  return { queue: f.queue ?? "", kind: f.kind ?? "", error_contains: f.errorContains ?? "", ids: f.ids ?? [] };
}
