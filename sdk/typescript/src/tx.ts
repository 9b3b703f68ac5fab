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
  let res;
  try {
    res = await db.query(ENQUEUE, [
      job.tenant,
      job.queue,
      job.kind,
      JSON.stringify(job.args ?? {}),
      job.meta === undefined ? null : JSON.stringify(job.meta),
      job.priority ?? 0,
      job.maxAttempts ?? null,
      runAt,
    ]);
  } catch (e) {
    // The functions' own checks: SQLSTATE 22023 / P0002 with "field: reason".
    const err = e as { code?: string; message?: string };
    if ((err.code === "22023" || err.code === "P0002") && typeof err.message === "string") {
      const field = err.message.split(":", 1)[0] ?? "";
      throw new InvalidArgument(err.message, { field });
    }
    throw e;
  }
  const id = res.rows[0]?.id;
  return Number(id);
}
