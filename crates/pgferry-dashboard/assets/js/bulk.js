// Bulk operations run by the server (docs/dashboard.md, "Bulk operations"): start one and
// follow its progress until it ends.

import { get, post } from "./api.js";
import { toast } from "./dom.js";

export const OP_VERB = { "dead.retry": "retried", "dead.purge": "purged", "jobs.cancel": "cancelled" };

// Starts a bulk operation and follows it; `el` shows its progress.
export async function run(body, el, reload) {
  const { op_id } = await post("bulk", body);
  return follow(op_id, el, reload);
}

// Polls one bulk operation until it ends, showing its progress; then refreshes the page.
export async function follow(opId, el, reload) {
  for (;;) {
    const op = await get(`bulk/${opId}`);
    el.textContent = `Bulk operation ${op.op_id}: ${op.status}, ${op.done} ${OP_VERB[op.action]} in ${op.batches} batches`;
    if (op.status !== "running") {
      toast(op.status === "done" ? `${op.done} jobs ${OP_VERB[op.action]}` : `Bulk operation ${op.status}${op.error ? `: ${op.error}` : ""}`, op.status === "failed");
      return op;
    }
    await reload();
    await new Promise((r) => setTimeout(r, 500));
  }
}

