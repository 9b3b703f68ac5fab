// Answers the server could not record for now (a result or outcome acked `unavailable`:
// its database lost a connection or is down) are sent again after a pause: RESEND_MIN_MS,
// doubling per resend to RESEND_MAX_MS while refusals go on, back to the minimum after a
// clean ack. Dropping them left the job or step running until its lease ran out, then ran
// it again (docs/protocol.md). Shared by the job and workflow workers.

export const RESEND_MIN_MS = 100;
export const RESEND_MAX_MS = 5_000;

/** The refused keys of one worker and the timer that hands them back to it. The worker
 * keeps the refused answers unacked (a new stream resends them anyway: `cancel()` then) and
 * moves them to its writer when `fire` gets their keys. */
export class Resends {
  private keys = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private pauseMs = RESEND_MIN_MS;

  constructor(private readonly fire: (keys: Set<string>) => void) {}

  /** `key` was refused as unavailable: resend it with the others at the next timer. */
  refuse(key: string): void {
    this.keys.add(key);
    if (this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      const keys = this.keys;
      this.keys = new Set();
      this.fire(keys);
    }, this.pauseMs);
    this.pauseMs = Math.min(this.pauseMs * 2, RESEND_MAX_MS);
  }

  /** A clean ack: the next refusal waits the shortest pause again. */
  recorded(): void {
    this.pauseMs = RESEND_MIN_MS;
  }

  /** Forgets the refused keys (a reconnect resends every unacked answer; shutdown). */
  cancel(): void {
    this.keys.clear();
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }
}
