// Workflow instances of one queue, filtered by kind, status and correlation key, newest
// first, keyset pages (`before` = the previous page's `next`). The `/v1` API lists
// instances by queue, so the queue is asked for (and remembered in this browser).

import { h, clear, time, field, select, stateBadge } from "../dom.js";
import { get, qs, ApiError } from "../api.js";

export const STATUSES = ["", "runnable", "running", "sleeping", "awaiting", "waiting_children", "queued", "done", "failed", "cancelled"];
const REMEMBER = "pgferry-wf-queue";

export async function render(root, { params }) {
  const f = {
    queue: params.queue || localStorage.getItem(REMEMBER) || "",
    kind: params.kind || "",
    status: params.status || "",
    correlation_key: params.correlation_key || "",
  };
  const inputs = {
    queue: h("input", { type: "text", value: f.queue, placeholder: "queue name", size: 16, required: true }),
    kind: h("input", { type: "text", value: f.kind, placeholder: "any", size: 14 }),
    status: select(STATUSES.map((s) => [s, s || "any"]), f.status),
    correlation_key: h("input", { type: "search", value: f.correlation_key, placeholder: "exact", size: 18 }),
  };
  const form = h("form", { class: "filters card", role: "search", "aria-label": "Filter workflow instances" },
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
  if (!f.queue) {
    table.append(h("p", { class: "muted" }, "Enter the queue whose workflow instances to list."));
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
    if (!page.instances.length) table.append(h("p", { class: "muted" }, "No instances match."));
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
