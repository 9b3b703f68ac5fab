// Transactional enqueue: a job written by the application's own database connection, inside
// its own transaction, through the SQL functions `pgferry.enqueue` and `pgferry.tenant_queue`
// (docs/typescript.md#transactional-enqueue). The job exists exactly when that transaction
// commits. Any driver works whose client has `query(text, values)` resolving to `{ rows }`:
// node-postgres (`pg` Client, PoolClient), and through their raw-query escape hatches
// postgres.js, Drizzle and Kysely. No driver is a dependency of this package.

import { InvalidArgument } from "./errors.js";
import type { Json } from "./types.js";

/** The one method used of a driver's client (node-postgres' shape). */
export interface SqlClient {
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** What `enqueueTx` writes. The queue is the tenant's (the name the API knows). */
export interface TxJob {
  /** The tenant that owns the queue (its name, as `pgferry tenant create` made it). */
  tenant: string;
  queue: string;
  kind: string;
  args?: Json;
  /** Headers carried to the worker unchanged. */
  meta?: Record<string, string>;
  /** 0 (most urgent, the default) to 3. */
  priority?: number;
  /** Overrides the queue's default (1..1000). */
  maxAttempts?: number;
  /** Run no earlier than this instant (a Date or Unix milliseconds). */
  runAt?: Date | number;
}

const ENQUEUE =
  "SELECT pgferry.enqueue(pgferry.tenant_queue($1, $2), $3, $4::jsonb, $5::jsonb, $6, $7, $8) AS id";

/**
 * Enqueues one job on `db` — a connection inside the caller's transaction — and returns its
 * id. Nothing is sent to a pgferry server: the job becomes claimable when the caller
 * commits, and never exists if it rolls back. Bad input rejects with `InvalidArgument`
 * naming the field (checked here and again by the database function).
 */
export async function enqueueTx(db: SqlClient, job: TxJob): Promise<number> {
  if (job.priority !== undefined && !(Number.isInteger(job.priority) && job.priority >= 0 && job.priority <= 3)) {
    throw new InvalidArgument("priority: must be an integer 0..3", { field: "priority" });
  }
  if (job.maxAttempts !== undefined && !(Number.isInteger(job.maxAttempts) && job.maxAttempts >= 1 && job.maxAttempts <= 1000)) {
    throw new InvalidArgument("maxAttempts: must be an integer 1..1000", { field: "maxAttempts" });
  }
  const runAt = job.runAt === undefined ? null : new Date(job.runAt);
  if (runAt !== null && Number.isNaN(runAt.getTime())) {
    throw new InvalidArgument("runAt: not a valid time", { field: "runAt" });
  }
  const res = await fieldErrors(() =>
    db.query(ENQUEUE, [
      job.tenant,
      job.queue,
      job.kind,
      JSON.stringify(job.args ?? {}),
      job.meta === undefined ? null : JSON.stringify(job.meta),
      job.priority ?? 0,
      job.maxAttempts ?? null,
      runAt,
    ]),
  );
  const id = res.rows[0]?.id;
  return Number(id);
}

/** What `startWorkflowTx` starts. The queue and keys are the tenant's (as the API knows them). */
export interface TxWorkflowStart {
  tenant: string;
  kind: string;
  queue: string;
  input?: Json;
  /** An active instance with this key in the queue is returned instead (`duplicate`). */
  correlationKey?: string;
  concurrencyKey?: string;
  concurrencyLimit?: number;
  rateKey?: string;
  /** 0 (least urgent) to 9. */
  priority?: number;
  runAt?: Date | number;
  maxAttempts?: number;
}

const WF_START =
  "SELECT id, duplicate FROM pgferry.tenant_wf_start($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11)";

/**
 * Starts a workflow instance on `db`, a connection inside the caller's transaction, through
 * the SQL function `pgferry.tenant_wf_start` (the API's checks and tenant namespace, in the
 * database): it exists, and its first step becomes claimable, only if that transaction
 * commits. Resolves to its id and whether an active instance with the correlation key was
 * returned instead.
 */
export async function startWorkflowTx(db: SqlClient, s: TxWorkflowStart): Promise<{ id: number; duplicate: boolean }> {
  const runAt = s.runAt === undefined ? null : new Date(s.runAt);
  if (runAt !== null && Number.isNaN(runAt.getTime())) {
    throw new InvalidArgument("runAt: not a valid time", { field: "runAt" });
  }
  const res = await fieldErrors(() =>
    db.query(WF_START, [
      s.tenant,
      s.kind,
      s.queue,
      JSON.stringify(s.input ?? {}),
      s.correlationKey ?? null,
      s.concurrencyKey ?? null,
      s.concurrencyLimit ?? null,
      s.rateKey ?? null,
      s.priority ?? 0,
      runAt,
      s.maxAttempts ?? null,
    ]),
  );
  const row = res.rows[0] ?? {};
  return { id: Number(row.id), duplicate: row.duplicate === true };
}

/** Runs a query, turning the SQL functions' own checks (SQLSTATE 22023 / P0002 with
 * "field: reason") into `InvalidArgument` naming the field. */
async function fieldErrors<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (e) {
    const err = e as { code?: string; message?: string };
    if ((err.code === "22023" || err.code === "P0002") && typeof err.message === "string") {
      const field = err.message.split(":", 1)[0] ?? "";
      throw new InvalidArgument(err.message, { field });
    }
    throw e;
  }
}
