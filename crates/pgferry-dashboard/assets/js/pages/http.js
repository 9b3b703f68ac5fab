// HTTP jobs (docs/http-jobs.md): the jobs of the tenant's `http` queue, each a request the
// server sends and retries. Shows method and URL, state, attempts and the last response
// status; the job page shows every delivery with its response status and body.

import { h, clear, time, field, select, stateBadge } from "../dom.js";
import { get, qs, ApiError } from "../api.js";
import * as live from "../live.js";

const STATES = ["", "pending", "scheduled", "running", "completed", "dead", "cancelled"];

// An attempt's error of an HTTP job is `{"error", "response"}` as JSON text; other errors
// (refused by the SSRF guard, bad args) are plain text.
export function delivery(error) {
  if (!error) return { error: "", response: null };
  try {
    const d = JSON.parse(error);
    if (d && typeof d === "object" && "error" in d) return { error: String(d.error || ""), response: d.response || null };
  } catch { /* plain text */ }
  return { error, response: null };
}

export async function render(root, { params }) {
  const state = params.state || "";
  const stateSel = select(STATES.map((s) => [s, s || "any"]), state);
  const form = h("form", { class: "filters card", role: "search", "aria-label": "Filter HTTP jobs" },
    field("hj-state", "State", stateSel), h("div", {}, h("button", { type: "submit" }, "Apply")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); location.hash = `#/http${qs({ state: stateSel.value })}`; });
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  root.append(h("h1", {}, "HTTP jobs"), form, h("section", { class: "card" },
    h("p", { class: "muted" }, "Jobs on the queue named http: requests the server sends (docs/http-jobs.md). Open one for every delivery's response."),
    status, table, pager));
  const cursors = [null];
  let page = { jobs: [] }, shown = "";
  const load = async () => {
    try {
      page = await get(`v1/jobs${qs({ queue: "http", state, cursor: cursors[cursors.length - 1], limit: 50 })}`);
      status.textContent = "";
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) { page = { jobs: [] }; } else { status.textContent = e instanceof ApiError ? e.describe() : String(e); return; }
    }
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const draw = () => {
    clear(table).append(h("table", { id: "http-table" },
      h("thead", {}, h("tr", {}, ...["Id", "Request", "State", "Attempts", "Last response", "Last error", "Enqueued"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...page.jobs.map((j) => {
        const a = j.args || {};
        const last = j.attempts.length ? j.attempts[j.attempts.length - 1] : null;
        const d = delivery(last && last.error);
        return h("tr", { "data-job": j.id, "data-state": j.state },
          h("td", {}, h("a", { href: `#/job/${j.id}` }, String(j.id))),
          h("td", { class: "mono" }, `${a.method || "GET"} ${a.url || ""}`),
          h("td", {}, stateBadge(j.state)),
          h("td", { class: "num" }, String(j.attempts.length)),
          h("td", { class: "num" }, d.response ? String(d.response.status) : j.state === "completed" ? "ok" : "—"),
          h("td", { class: "errtext" }, d.error),
          h("td", {}, time(j.enqueued_at_unix_ms)));
      }))));
    if (!page.jobs.length) table.append(h("p", { class: "muted" }, "No HTTP jobs match."));
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Newer"),
      h("button", { type: "button", class: "ghost", disabled: !page.has_more, onclick: () => { cursors.push(page.next_cursor); load(); } }, "Older"));
  };
  await load();
  let printed = "";
  return { onLive(snap) { const fp = live.fingerprint(snap, "http"); if (printed && fp !== printed) load(); printed = fp; } };
}
