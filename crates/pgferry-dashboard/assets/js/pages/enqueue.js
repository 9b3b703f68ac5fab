// Enqueue a job: JSON args and meta checked in the browser first (the API checks again
// and names the field it refuses).

import { h, toast, field } from "../dom.js";
import { get, post, ApiError } from "../api.js";

export async function render(root) {
  const queues = (await get("v1/queues")).queues.map((q) => q.name);
  const list = h("datalist", { id: "queue-names" }, ...queues.map((q) => h("option", { value: q })));
  const i = {
    queue: h("input", { type: "text", list: "queue-names", required: true, value: queues[0] || "" }),
    kind: h("input", { type: "text", required: true }),
    args: h("textarea", { spellcheck: "false" }),
    meta: h("textarea", { spellcheck: "false" }),
    priority: h("input", { type: "number", min: 0, max: 255, step: 1 }),
    delay: h("input", { type: "number", min: 0, step: 1 }),
  };
  i.args.value = "{}";
  i.meta.value = "{}";
  const err = h("p", { class: "error", role: "alert", id: "enqueue-error" });
  const out = h("p", { role: "status" });
  const form = h("form", { class: "card", novalidate: true, "aria-label": "Enqueue a job" },
    list,
    h("div", { class: "filters" }, field("e-queue", "Queue", i.queue), field("e-kind", "Kind", i.kind),
      field("e-priority", "Priority (0–255)", i.priority), field("e-delay", "Delay (ms)", i.delay)),
    field("e-args", "Args (JSON)", i.args),
    field("e-meta", "Meta (JSON object of strings)", i.meta),
    err, h("button", { type: "submit" }, "Enqueue"), out);
  const bad = (input, message) => {
    err.textContent = message;
    input.setAttribute("aria-invalid", "true");
    input.focus();
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = ""; out.textContent = "";
    for (const x of Object.values(i)) x.removeAttribute("aria-invalid");
    const job = { queue: i.queue.value.trim(), kind: i.kind.value.trim() };
    if (!job.queue) return bad(i.queue, "queue: required");
    if (!job.kind) return bad(i.kind, "kind: required");
    try { job.args = JSON.parse(i.args.value || "null"); } catch (e) { return bad(i.args, `args: not valid JSON (${e.message})`); }
    let meta;
    try { meta = JSON.parse(i.meta.value || "{}"); } catch (e) { return bad(i.meta, `meta: not valid JSON (${e.message})`); }
    if (meta === null || typeof meta !== "object" || Array.isArray(meta) || Object.values(meta).some((v) => typeof v !== "string")) {
      return bad(i.meta, "meta: must be an object whose values are strings");
    }
    if (Object.keys(meta).length) job.meta = meta;
    if (i.priority.value !== "") job.priority = Number(i.priority.value);
    if (i.delay.value !== "") job.delay_ms = Number(i.delay.value);
    try {
      const r = await post("v1/jobs", job);
      out.append("Enqueued job ", h("a", { href: `#/job/${r.job_id ?? r.id}`, id: "enqueued-link" }, String(r.job_id ?? r.id)));
      toast("Job enqueued");
    } catch (e) {
      const field = e instanceof ApiError && e.field && i[e.field] ? i[e.field] : i.queue;
      bad(field, e instanceof ApiError ? e.describe() : String(e));
    }
  });
  root.append(h("h1", {}, "Enqueue a job"), form);
  return null;
}
