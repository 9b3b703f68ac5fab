// Typed errors. Every error the SDK throws is a PgferryError with a stable `code` (the
// server's machine-readable code when it sent one) and, where known, the offending `field`
// in the caller's terms (e.g. "jobs[3].queue", "input.to").
import { status as Status, type ServiceError } from "@grpc/grpc-js";
import type { JobInfo } from "./types.js";

export class PgferryError extends Error {
  static readonly defaultCode: string = "internal";
  readonly code: string;
  readonly field: string;
  constructor(message: string, opts: { code?: string; field?: string; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code || (new.target as typeof PgferryError).defaultCode;
    this.field = opts.field ?? "";
  }
  override toString(): string {
    return `${this.name} [${this.code}]: ${this.message}${this.field ? ` (field ${this.field})` : ""}`;
  }
}

/** The API key is missing, malformed, unknown or revoked. */
export class AuthError extends PgferryError {
  static override readonly defaultCode: string = "unauthenticated";
}
/** The API key is valid but lacks the scope for this call. */
export class PermissionDenied extends AuthError {
  static override readonly defaultCode: string = "permission_denied";
}
export class NotFound extends PgferryError {
  static override readonly defaultCode: string = "not_found";
}
export class InvalidArgument extends PgferryError {
  static override readonly defaultCode: string = "invalid_argument";
}
export class PayloadTooLarge extends InvalidArgument {
  static override readonly defaultCode: string = "payload_too_large";
}
export class Conflict extends PgferryError {
  static override readonly defaultCode: string = "conflict";
}
/** Too many requests for this key; `retryAfterMs` when the server said. */
export class RateLimited extends PgferryError {
  static override readonly defaultCode: string = "rate_limited";
  retryAfterMs: number | undefined;
  constructor(message: string, opts: { code?: string; field?: string; retryAfterMs?: number } = {}) {
    super(message, opts);
    this.retryAfterMs = opts.retryAfterMs;
  }
}
/** The server could not be reached, or the connection dropped before an answer. For an
 * enqueue the outcome is unknown (the jobs may have been committed): use a unique key or an
 * idempotency key to make a retry safe. */
export class Unavailable extends PgferryError {
  static override readonly defaultCode: string = "unavailable";
}
/** The server does not offer this call or option (yet). */
export class Unimplemented extends PgferryError {
  static override readonly defaultCode: string = "not_implemented";
}
/** The server answered something this SDK does not understand. */
export class ProtocolError extends PgferryError {
  static override readonly defaultCode: string = "protocol_error";
}
/** A task's input (or a worker's copy of it) does not match the task's schema. `issues`
 * are the Standard Schema issues; `field` names the first one's path (e.g. "input.to"). */
export class ValidationError extends InvalidArgument {
  static override readonly defaultCode: string = "validation_failed";
  readonly issues: ReadonlyArray<{ message: string; path?: ReadonlyArray<PropertyKey | { key: PropertyKey }> }>;
  constructor(message: string, issues: ValidationError["issues"], field: string) {
    super(message, { field });
    this.issues = issues;
  }
}
/** Waiting for a job's result ended without one: the job was dead-lettered or cancelled
 * (`job` says how it ended), or the wait timed out (code "timeout", `job` its last state). */
export class JobFailedError extends PgferryError {
  static override readonly defaultCode: string = "job_failed";
  readonly job: JobInfo;
  constructor(message: string, job: JobInfo, code?: string) {
    super(message, code === undefined ? {} : { code });
    this.job = job;
  }
}

type ErrorClass = new (message: string, opts?: { code?: string; field?: string }) => PgferryError;

const BY_CODE: Record<string, ErrorClass> = {
  unauthenticated: AuthError,
  unauthorized: AuthError,
  permission_denied: PermissionDenied,
  forbidden: PermissionDenied,
  not_found: NotFound,
  invalid_argument: InvalidArgument,
  invalid_name: InvalidArgument,
  malformed_json: InvalidArgument,
  payload_too_large: PayloadTooLarge,
  batch_too_large: PayloadTooLarge,
  conflict: Conflict,
  rate_limited: RateLimited,
  unavailable: Unavailable,
  not_implemented: Unimplemented,
};

const BY_STATUS: Partial<Record<number, ErrorClass>> = {
  [Status.UNAUTHENTICATED]: AuthError,
  [Status.PERMISSION_DENIED]: PermissionDenied,
  [Status.NOT_FOUND]: NotFound,
  [Status.INVALID_ARGUMENT]: InvalidArgument,
  [Status.OUT_OF_RANGE]: InvalidArgument,
  [Status.ALREADY_EXISTS]: Conflict,
  [Status.FAILED_PRECONDITION]: Conflict,
  [Status.ABORTED]: Conflict,
  [Status.RESOURCE_EXHAUSTED]: RateLimited,
  [Status.UNAVAILABLE]: Unavailable,
  [Status.DEADLINE_EXCEEDED]: Unavailable,
  [Status.CANCELLED]: Unavailable,
  [Status.UNIMPLEMENTED]: Unimplemented,
};

/** The class for a server error code; unknown codes map by family, else PgferryError. */
export function classForCode(code: string): ErrorClass {
  const exact = BY_CODE[code];
  if (exact) return exact;
  if (/^(invalid|malformed|missing)/.test(code)) return InvalidArgument;
  if (code.endsWith("not_found")) return NotFound;
  if (code.endsWith("too_large")) return PayloadTooLarge;
  return PgferryError;
}

/** The typed error for a pgferry.v1.Error (or an HTTP error body). */
export function fromWireError(code: string, message: string, field = ""): PgferryError {
  const cls = classForCode(code);
  return new cls(message || code, { code: code || undefined, field } as { code?: string; field?: string });
}

// The Admin service's status messages: `code: message (field)` (docs/protocol.md).
const STATUS_MESSAGE = /^([a-z_]+): ([\s\S]*?)(?: \(([A-Za-z0-9_.[\]]+)\))?$/;

/** Translate a gRPC status into a typed error. */
export function fromServiceError(err: ServiceError): PgferryError {
  const md = err.metadata;
  let message = err.details || err.message;
  let code = "";
  let field = "";
  const m = STATUS_MESSAGE.exec(message);
  if (m && classForCode(m[1] ?? "") !== PgferryError) {
    code = m[1] ?? "";
    message = m[2] ?? message;
    field = m[3] ?? "";
  }
  const cls = code ? classForCode(code) : (BY_STATUS[err.code] ?? PgferryError);
  if (cls === RateLimited) {
    const ra = md?.get("retry-after")[0];
    const secs = ra === undefined ? NaN : Number(ra.toString());
    return new RateLimited(message, {
      ...(code ? { code } : {}),
      field,
      ...(Number.isFinite(secs) ? { retryAfterMs: secs * 1000 } : {}),
    });
  }
  return new cls(message, { ...(code ? { code } : {}), field });
}

export function isServiceError(e: unknown): e is ServiceError {
  return e instanceof Error && typeof (e as Partial<ServiceError>).code === "number" && "metadata" in e;
}
