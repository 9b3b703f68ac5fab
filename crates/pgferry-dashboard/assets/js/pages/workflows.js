// Workflow instances of one queue, filtered by kind, status and correlation key, newest
// first, keyset pages (`before` = the previous page's `next`). The `/v1` API lists
// instances by queue, so the queue is asked for (and remembered in this browser).

import { h, clear, time, field, select, stateBadge } from "../dom.js";
import { get, post, qs, can, ApiError } from "../api.js";

export const STATUSES = ["", "runnable", "running", "sleeping", "awaiting", "waiting_children", "queued", "done", "failed", "cancelled"];
const REMEMBER = "pgferry-wf-queue";

export async function render(root, { params }) {
  const known = (await get("workflow-queues")).queues;
  const remembered = localStorage.getItem(REMEMBER);
  const f = {
    queue: params.queue || (known.includes(remembered) ? remembered : known[0]) || "",
    kind: params.kind || "",
    status: params.status || "",
    correlation_key: params.correlation_key || "",
  };
  const inputs = {
    queue: h("input", { type: "text", value: f.queue, placeholder: "queue name", size: 16, required: true, list: "wf-queue-names" }),
    kind: h("input", { type: "text", value: f.kind, placeholder: "any", size: 14 }),
    status: select(STATUSES.map((s) => [s, s || "any"]), f.status),
    correlation_key: h("input", { type: "search", value: f.correlation_key, placeholder: "exact", size: 18 }),
  };
  const form = h("form", { class: "filters card", role: "search", "aria-label": "Filter workflow instances" },
    h("datalist", { id: "wf-queue-names" }, ...known.map((q) => h("option", { value: q }))),
    field("wff-queue", "Queue", inputs.queue),
    field("wff-kind", "Kind", inputs.kind),
    field("wff-status", "Status", inputs.status),
    field("wff-key", "Correlation key", inputs.correlation_key),
    h("div", {}, h("button", { type: "submit" }, "Apply")));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = {};
    for (const k of Object.keys(inputs)) if (inputs[k].value.trim()) p[k] = inputs[k].value.trim();
    location.hash = `#/workflows${qs(p)}`;
  });
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  root.append(h("h1", {}, "Workflows"), form, h("section", { class: "card" }, status, table, pager));
  if (can("produce")) root.append(startForm(f.queue));
  if (!f.queue) {
    table.append(h("p", { class: "muted" }, "No workflow instances yet: start one below, or enter a queue."));
    return null;
  }
  localStorage.setItem(REMEMBER, f.queue);

  const cursors = [null];
  let page = { instances: [], has_more: false, next: null };
  let shown = "";
  const load = async () => {
    try {
      page = await get(`v1/workflows${qs({ ...f, before: cursors[cursors.length - 1], limit: 50 })}`);
      status.textContent = "";
    } catch (e) {
      status.textContent = e instanceof ApiError ? e.describe() : String(e);
      return;
    }
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const draw = () => {
    clear(table).append(h("table", { id: "workflows-table" },
      h("thead", {}, h("tr", {}, ...["Id", "Kind", "Status", "Step", "Attempt", "Correlation key", "Parent", "Created", "Finished", "Error"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...page.instances.map((i) => h("tr", { "data-instance": i.id, "data-status": i.status },
        h("td", {}, h("a", { href: `#/workflow/${i.id}` }, String(i.id))),
        h("td", {}, i.kind),
        h("td", {}, stateBadge(i.status)),
        h("td", {}, i.step),
        h("td", { class: "num" }, String(i.attempt)),
        h("td", {}, i.correlation_key || ""),
        h("td", {}, i.parent_id ? h("a", { href: `#/workflow/${i.parent_id}` }, String(i.parent_id)) : ""),
        h("td", {}, time(i.created_at_unix_ms)),
        h("td", {}, time(i.finished_at_unix_ms)),
        h("td", { class: "errtext" }, i.error || ""))))));
    // An active status reads at most a few thousand active instances per request
    // (docs/dashboard.md): a page may be short, even empty, with older ones still to read.
    if (!page.instances.length) {
      table.append(h("p", { class: "muted", id: "workflows-none" }, page.has_more
        ? "No match among the instances read so far: \u201cOlder\u201d reads on."
        : "No instances match."));
    }
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Newer"),
      h("span", { class: "muted" }, `Page ${cursors.length}`),
      h("button", { type: "button", class: "ghost", disabled: !page.has_more, onclick: () => { cursors.push(page.next); load(); } }, "Older"));
  };
  await load();
  // Instances are not in the live counters: re-read the page on each tick while open.
  let tick = 0;
  return { onLive() { if (++tick % 2 === 0) load().catch(() => {}); } };
}

// Start a workflow: JSON input checked in the page first, then by the API (which names the
// field it refuses). A correlation key makes the start idempotent (a second start answers
// the first instance, `duplicate`).
function startForm(queue) {
  const i = {
    queue: h("input", { type: "text", required: true, value: queue, size: 16 }),
    kind: h("input", { type: "text", required: true, size: 16 }),
    correlation_key: h("input", { type: "text", size: 18 }),
    input: h("textarea", { spellcheck: "false" }),
  };
  i.input.value = "{}";
  const err = h("p", { class: "error", role: "alert", id: "start-error" });
  const out = h("p", { role: "status", id: "start-result" });
  const form = h("form", { class: "card", id: "start-form", novalidate: true, "aria-label": "Start a workflow" },
    h("h2", {}, "Start a workflow"),
    h("div", { class: "filters" }, field("st-queue", "Queue", i.queue), field("st-kind", "Kind", i.kind),
      field("st-key", "Correlation key (optional)", i.correlation_key)),
    field("st-input", "Input (JSON)", i.input),
    err, h("button", { type: "submit" }, "Start"), out);
  const bad = (input, message) => { err.textContent = message; input.setAttribute("aria-invalid", "true"); input.focus(); };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = ""; clear(out);
    for (const x of Object.values(i)) x.removeAttribute("aria-invalid");
    const body = { queue: i.queue.value.trim(), kind: i.kind.value.trim() };
    if (!body.queue) return bad(i.queue, "queue: required");
    if (!body.kind) return bad(i.kind, "kind: required");
    try { body.input = JSON.parse(i.input.value || "null"); } catch (e) { return bad(i.input, `input: not valid JSON (${e.message})`); }
    if (i.correlation_key.value.trim()) body.correlation_key = i.correlation_key.value.trim();
    try {
      const r = await post("v1/workflows", body);
      out.append(r.duplicate ? "Already running: instance " : "Started instance ", h("a", { href: `#/workflow/${r.id}`, id: "started-link" }, String(r.id)));
    } catch (e) {
      bad(e instanceof ApiError && e.field && i[e.field] ? i[e.field] : i.kind, e instanceof ApiError ? e.describe() : String(e));
    }
  });
  return form;
}
