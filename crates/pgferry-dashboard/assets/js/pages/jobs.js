// Jobs: filter by queue, state, kind, enqueue time, args/meta text and error text; keyset
// pages (a cursor per page, never an offset); retry or cancel a selection. Without text the
// page reads /v1/jobs; with args/meta or error text it reads the dashboard's own search
// (/ui/api/jobs/search), which tests the text on the rows one listing call reads anyway:
// a bounded window per request, so a page may be short or empty with "Search older".

import { h, clear, time, toast, field, select, stateBadge } from "../dom.js";
import { get, post, qs, can, ApiError } from "../api.js";
import * as live from "../live.js";
import { follow, OP_VERB } from "../bulk.js";

const STATES = ["", "pending", "scheduled", "running", "completed", "dead", "cancelled"];

export async function render(root, { params }) {
  const queues = (await get("v1/queues")).queues.map((q) => q.name);
  const f = {
    queue: params.queue || queues[0] || "",
    state: params.error ? "dead" : params.state || "",
    kind: params.kind || "",
    since: params.since || "",
    error: params.error || "",
    text: params.text || "",
  };
  const inputs = {
    queue: select(queues, f.queue),
    state: select(STATES.map((s) => [s, s || "any"]), f.state),
    kind: h("input", { type: "text", value: f.kind, placeholder: "any", size: 14 }),
    since: h("input", { type: "datetime-local", value: f.since }),
    error: h("input", { type: "search", value: f.error, placeholder: "substring", size: 22 }),
    text: h("input", { type: "search", value: f.text, placeholder: "substring", size: 22 }),
  };
  const form = h("form", { class: "filters card", role: "search", "aria-label": "Filter jobs" },
    field("f-queue", "Queue", inputs.queue),
    field("f-state", "State", inputs.state),
    field("f-kind", "Kind", inputs.kind),
    field("f-since", "Enqueued since (UTC)", inputs.since),
    field("f-text", "Args or meta contain", inputs.text),
    field("f-error", "Error contains", inputs.error),
    h("div", {}, h("button", { type: "submit" }, "Apply")));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = {};
    for (const k of Object.keys(inputs)) if (inputs[k].value) p[k] = inputs[k].value.trim();
    location.hash = `#/jobs${qs(p)}`;
  });
  const note = h("p", { class: "muted" });
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  const bulk = h("div", { class: "actions" });
  const ops = h("div", { class: "scroll", id: "bulk-ops" });
  root.append(h("h1", {}, "Jobs"), form, h("section", { class: "card" }, note, bulk, status, table, pager));
  if (!f.queue) { note.textContent = "No queues yet: enqueue a job first."; return null; }

  const cursors = [null]; // cursor of each page seen; last = current page
  let jobs = [], next = null, shown = "";
  const selected = new Set();
  const byText = Boolean(f.error || f.text);
  note.textContent = byText
    ? (f.error ? "Error text is searched in dead-lettered jobs' last errors, newest first. " : "") +
      "Text is matched (any case) on the jobs one request examines, newest first: up to a few thousand per request, never the whole history. A page may come back short or empty; \u201cSearch older\u201d goes on below it."
    : "Newest first. Pages are keyset pages: a live view, so jobs moving between states may appear on two pages.";

  const load = async () => {
    const cursor = cursors[cursors.length - 1];
    let page;
    try {
      const since = f.since ? Date.parse(`${f.since}Z`) : null;
      const filter = { queue: f.queue, state: f.state, kind: f.kind, since_unix_ms: since, cursor, limit: 50 };
      page = byText
        ? await get(`jobs/search${qs({ ...filter, contains: f.text, error_contains: f.error })}`)
        : await get(`v1/jobs${qs(filter)}`);
      status.textContent = "";
    } catch (e) {
      status.textContent = e instanceof ApiError ? e.describe() : String(e);
      return;
    }
    // Redraw only on change: a table rebuilt under the pointer loses clicks and focus.
    const seen = JSON.stringify([page.jobs, page.next_cursor]);
    if (seen === shown) return;
    shown = seen;
    jobs = page.jobs; next = page.has_more ? page.next_cursor : null;
    draw();
  };

  // The checked jobs as ONE durable bulk operation (one request; the server runs it in
  // batches, acting only on those still dead or still waiting/running, and another server
  // takes it over if this one dies): progress shows below the buttons.
  const act = async (verb) => {
    const ids = [...selected];
    const body = { action: verb === "retry" ? "dead.retry" : "jobs.cancel", queue: f.queue, ids };
    try {
      const { op_id } = await post("bulk", body);
      selected.clear();
      draw();
      await follow(op_id, progress, load);
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
    await load();
  };

  // Everything matching the filter (admin), as a durable bulk operation the server runs in
  // batches (dead jobs by queue, kind and error text; waiting and running jobs by queue,
  // kind and state): it goes on if this page closes, and its progress shows here and in
  // "Bulk operations" below. Not offered with an enqueue-time filter, which the engine's
  // filtered operations do not take.
  let armed = false;
  const progress = h("p", { role: "status", id: "bulk-progress" });
  const allMatching = async () => {
    const body = { action: f.state === "dead" ? "dead.retry" : "jobs.cancel", queue: f.queue };
    if (f.kind) body.kind = f.kind;
    if (f.state === "dead") { if (f.error) body.error_contains = f.error; } else if (f.state) body.states = [f.state];
    try {
      const { op_id } = await post("bulk", body);
      await follow(op_id, progress, load);
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
    await load();
  };
  const matchingVerb = f.state === "dead" ? "retry" : ["", "pending", "scheduled", "running"].includes(f.state) && !f.since ? "cancel" : null;

  const draw = () => {
    const produce = can("produce");
    clear(bulk);
    if (produce) {
      bulk.append(
        h("span", { class: "muted", id: "selection-count" }, `${selected.size} selected`),
        h("button", { type: "button", id: "bulk-retry", disabled: selected.size === 0, onclick: () => act("retry") }, "Retry selected"),
        h("button", { type: "button", id: "bulk-cancel", class: "ghost", disabled: selected.size === 0, onclick: () => act("cancel") }, "Cancel selected"));
    }
    if (can("admin") && matchingVerb && jobs.length) {
      const label = matchingVerb === "retry" ? "Retry all matching" : armed ? "Confirm: cancel all matching" : "Cancel all matching";
      bulk.append(h("button", { type: "button", id: "all-matching", class: matchingVerb === "retry" ? "ghost" : "danger", onclick: () => {
        if (matchingVerb === "cancel" && !armed) { armed = true; draw(); return; }
        armed = false; allMatching();
      } }, label));
    }
    bulk.append(progress);
    const all = h("input", { type: "checkbox", "aria-label": "Select all jobs on this page", checked: jobs.length > 0 && jobs.every((j) => selected.has(j.id)) });
    all.addEventListener("change", () => { for (const j of jobs) all.checked ? selected.add(j.id) : selected.delete(j.id); draw(); });
    clear(table).append(h("table", { id: "jobs-table" },
      h("thead", {}, h("tr", {}, produce ? h("th", { scope: "col" }, all) : null,
        ...["Id", "Kind", "State", "Attempts", "Enqueued", "Last error"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...jobs.map((j) => {
        const last = j.attempts.length ? j.attempts[j.attempts.length - 1] : null;
        const box = h("input", { type: "checkbox", "aria-label": `Select job ${j.id}`, checked: selected.has(j.id) });
        box.addEventListener("change", () => { box.checked ? selected.add(j.id) : selected.delete(j.id); draw(); });
        return h("tr", { "data-job": j.id, "data-state": j.state },
          produce ? h("td", {}, box) : null,
          h("td", {}, h("a", { href: `#/job/${j.id}` }, String(j.id))),
          h("td", {}, j.kind),
          h("td", {}, stateBadge(j.state)),
          h("td", { class: "num" }, `${j.attempts.length ? j.attempts[j.attempts.length - 1].attempt : 0}/${j.max_attempts}`),
          h("td", {}, time(j.enqueued_at_unix_ms)),
          h("td", { class: "errtext" }, last && last.error ? last.error : ""));
      })),
    ));
    if (!jobs.length) {
      table.append(h("p", { class: "muted", id: "no-match" }, next
        ? "No match among the jobs examined so far: search older to go on."
        : "No jobs match."));
    }
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Newer"),
      h("span", { class: "muted" }, `Page ${cursors.length}`),
      h("button", { type: "button", class: "ghost", id: "older", disabled: !next, onclick: () => { cursors.push(next); load(); } }, byText ? "Search older" : "Older"));
  };

  await load();
  if (can("admin")) {
    root.append(h("section", { class: "card", "aria-labelledby": "ops-h" }, h("h2", { id: "ops-h" }, "Bulk operations"), ops));
    await drawOps(ops);
  }
  let printed = "";
  return {
    onLive(snap) {
      const fp = live.fingerprint(snap, f.queue);
      if (printed && fp !== printed) load();
      printed = fp;
      if (can("admin")) drawOps(ops).catch(() => {});
    },
  };
}

// The tenant's newest bulk operations, with a stop button for those still running.
async function drawOps(el) {
  const { ops } = await get("bulk");
  const describe = (f) => Object.entries(f).filter(([, v]) => v !== null && v !== "").map(([k, v]) => `${k}=${Array.isArray(v) ? v.join(",") : v}`).join(" ");
  clear(el).append(ops.length ? h("table", {},
    h("thead", {}, h("tr", {}, ...["Id", "Action", "Filter", "Status", "Jobs", "Batches", "Started", "Ended", ""].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, ...ops.map((o) => h("tr", { "data-op": o.op_id },
      h("td", {}, String(o.op_id)), h("td", {}, o.action), h("td", { class: "mono" }, describe(o.filter)),
      h("td", {}, stateBadge(o.status)), h("td", { class: "num" }, String(o.done)), h("td", { class: "num" }, String(o.batches)),
      h("td", {}, time(o.created_at_unix_ms)), h("td", {}, time(o.finished_at_unix_ms)),
      h("td", {}, o.status === "running" ? h("button", { type: "button", class: "ghost", "data-action": "stop-op", onclick: async () => {
        try { await post(`bulk/${o.op_id}/cancel`); await drawOps(el); } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
      } }, "Stop") : ""))))) : h("p", { class: "muted" }, "None yet: \"all matching\" actions run here, on the server, with their progress."));
}
