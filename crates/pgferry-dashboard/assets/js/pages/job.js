// One job: args, meta, every attempt with its worker, timings and error; retry or cancel.
// Re-read on every live tick while open, so its state changes show without a reload.

import { h, clear, time, toast, pretty, stateBadge } from "../dom.js";
import { get, post, can, ApiError } from "../api.js";
import { delivery } from "./http.js";

export async function render(root, { arg }) {
  const id = arg;
  const body = h("div");
  root.append(h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")), body);
  let job = null;
  let result = null;
  let shown = "";
  const load = async () => {
    job = await get(`v1/jobs/${encodeURIComponent(id)}`);
    // A completed job's result (an HTTP job's is its final response, docs/http-jobs.md).
    result = job.state === "completed" ? (await get(`v1/jobs/${encodeURIComponent(id)}/result`)).result : null;
    const fp = JSON.stringify([job, result]);
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
          h("dt", {}, "Cancel requested"), h("dd", {}, j.cancel_requested ? "yes" : "no"),
          h("dt", {}, "Trace id"), h("dd", { id: "job-trace", class: "mono" }, traceId(j.meta) || "—"))),
        h("section", { class: "card" }, h("h2", {}, "Args"), pretty(j.args), h("h2", {}, "Meta"), pretty(j.meta),
          j.state === "completed" ? [h("h2", {}, "Result"), h("div", { id: "job-result" }, pretty(result))] : null)),
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
            h("td", { class: "errtext" }, j.queue === "http" ? delivery(a.error).error : a.error || "")))))) : h("p", { class: "muted" }, "Not run yet.")),
      j.queue === "http" ? deliveries(j, result) : null);
  };
  await load();
  return { onLive() { load().catch(() => {}); } };
}

// The trace id of the W3C trace context the job was enqueued under: the server copies the
// request's `traceparent` into the job's meta (docs/http-api.md), version-traceid-
// parentid-flags; only a well-formed one is shown.
export function traceId(meta) {
  const tp = meta && typeof meta.traceparent === "string" ? meta.traceparent.trim() : "";
  const m = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(tp);
  return m ? m[1] : null;
}

// An HTTP job's deliveries: each attempt's response (status, time, body), then the final
// response of a completed job (its result).
function deliveries(j, result) {
  const a = j.args || {};
  const rows = j.attempts.map((t) => ({ n: t.attempt, outcome: t.outcome || "running", ...delivery(t.error) }));
  if (result) rows.push({ n: j.attempts.length, outcome: "completed", error: "", response: result });
  const body = (r) => (r ? `${r.body || ""}${r.truncated ? " …(truncated)" : ""}` : "");
  return h("section", { class: "card" }, h("h2", {}, "Deliveries"),
    h("p", { class: "mono" }, `${a.method || "GET"} ${a.url || ""}`),
    h("div", { class: "scroll" }, h("table", { id: "deliveries" },
      h("thead", {}, h("tr", {}, ...["#", "Outcome", "Status", "Time", "Response body", "Error"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...rows.map((r) => h("tr", { "data-status": r.response ? r.response.status : "" },
        h("td", {}, String(r.n)), h("td", {}, stateBadge(r.outcome)),
        h("td", { class: "num" }, r.response ? String(r.response.status) : "—"),
        h("td", { class: "num" }, r.response && r.response.duration_ms !== undefined ? `${r.response.duration_ms} ms` : "—"),
        h("td", {}, r.response ? h("pre", {}, body(r.response)) : ""),
        h("td", { class: "errtext" }, r.error)))))));
}
