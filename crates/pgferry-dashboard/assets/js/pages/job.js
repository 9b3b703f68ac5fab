// One job: args, meta, every attempt with its worker, timings and error; retry or cancel.
// Re-read on every live tick while open, so its state changes show without a reload.

import { h, clear, time, toast, pretty, stateBadge } from "../dom.js";
import { get, post, can, ApiError } from "../api.js";

export async function render(root, { arg }) {
  const id = arg;
  const body = h("div");
  root.append(h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")), body);
  let job = null;
  let shown = "";
  const load = async () => {
    job = await get(`v1/jobs/${encodeURIComponent(id)}`);
    const fp = JSON.stringify(job);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const act = async (verb) => {
    try {
      await post(`v1/jobs/${job.id}/${verb}`);
      toast(`Job ${job.id}: ${verb === "retry" ? "retried" : "cancel requested"}`);
      await load();
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
  };
  const draw = () => {
    const j = job;
    const actions = h("div", { class: "actions" });
    if (can("produce")) {
      if (j.state === "dead") actions.append(h("button", { type: "button", id: "job-retry", onclick: () => act("retry") }, "Retry"));
      if (["pending", "scheduled", "running"].includes(j.state) && !j.cancel_requested) {
        actions.append(h("button", { type: "button", id: "job-cancel", class: "danger", onclick: () => act("cancel") }, "Cancel"));
      }
    }
    clear(body).append(
      h("h1", {}, `Job ${j.id} `, h("span", { id: "job-state" }, stateBadge(j.state))),
      actions,
      h("div", { class: "grid2" },
        h("section", { class: "card" }, h("dl", { class: "kv" },
          h("dt", {}, "Queue"), h("dd", {}, h("a", { href: `#/jobs?queue=${encodeURIComponent(j.queue)}` }, j.queue)),
          h("dt", {}, "Kind"), h("dd", {}, j.kind),
          h("dt", {}, "Priority"), h("dd", {}, String(j.priority)),
          h("dt", {}, "Attempts"), h("dd", {}, `${j.attempts.length} of at most ${j.max_attempts}`),
          h("dt", {}, "Enqueued"), h("dd", {}, time(j.enqueued_at_unix_ms)),
          h("dt", {}, "Run at"), h("dd", {}, time(j.run_at_unix_ms)),
          h("dt", {}, "Cancel requested"), h("dd", {}, j.cancel_requested ? "yes" : "no"))),
        h("section", { class: "card" }, h("h2", {}, "Args"), pretty(j.args), h("h2", {}, "Meta"), pretty(j.meta))),
      h("section", { class: "card" }, h("h2", {}, "Attempts"),
        j.attempts.length ? h("div", { class: "scroll" }, h("table", { id: "attempts" },
          h("thead", {}, h("tr", {}, ...["#", "Outcome", "Worker", "Claimed", "Finished", "Duration", "Error"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, ...j.attempts.map((a) => h("tr", {},
            h("td", {}, String(a.attempt)),
            h("td", {}, stateBadge(a.outcome || "running")),
            h("td", {}, a.worker || "—"),
            h("td", {}, time(a.claimed_at_unix_ms)),
            h("td", {}, time(a.finished_at_unix_ms)),
            h("td", { class: "num" }, a.duration_ms === null || a.duration_ms === undefined ? "—" : `${a.duration_ms} ms`),
            h("td", { class: "errtext" }, a.error || "")))))) : h("p", { class: "muted" }, "Not run yet.")));
  };
  await load();
  return { onLive() { load().catch(() => {}); } };
}
