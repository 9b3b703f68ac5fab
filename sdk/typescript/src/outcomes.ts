// Handler outcomes other than success and plain failure. Throw them from a handler:
// `throw new Snooze(30_000)`. Any other error is a retryable failure: the server schedules
// the next attempt with the queue's backoff and dead-letters the job when attempts run out.

/** Base of the control-flow outcomes; not an error of the handler. */
export class Outcome extends Error {}

/** Run the job again after `delayMs` without using up an attempt. */
export class Snooze extends Outcome {
  constructor(readonly delayMs: number) {
    if (!(delayMs >= 0)) throw new RangeError("Snooze(delayMs) needs delayMs >= 0");
    super(`snooze ${delayMs} ms`);
    this.name = "Snooze";
  }
}

/** Stop and cancel the job: no further attempts. */
export class Cancel extends Outcome {
  constructor(message = "cancelled by handler") {
    super(message);
    this.name = "Cancel";
  }
}

export interface FailOptions {
  /** Dead-letter now regardless of remaining attempts. */
  permanent?: boolean;
  /** Overrides the queue's backoff for the next attempt. */
  retryInMs?: number;
  /** Error class stored with the attempt (default "Fail"). */
  kind?: string;
}

/** Fail this attempt with an explicit message (and optionally no retry, or a retry delay). */
export class Fail extends Outcome {
  readonly permanent: boolean;
  readonly retryInMs: number | undefined;
  readonly kind: string;
  constructor(message = "failed", opts: FailOptions = {}) {
    super(message);
    this.name = "Fail";
    this.permanent = opts.permanent ?? false;
    this.retryInMs = opts.retryInMs;
    this.kind = opts.kind ?? "Fail";
  }
}

/** Why a job's AbortSignal fired (`ctx.signal.reason`). */
export class JobAborted extends Error {
  constructor(
    readonly reason: "cancelled" | "lease_lost" | "timeout" | "shutdown",
    message: string,
  ) {
    super(message);
    this.name = reason === "timeout" ? "TimeoutError" : "AbortError";
  }
}
