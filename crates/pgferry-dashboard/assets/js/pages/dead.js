// Dead letters, grouped by error: retry or purge one job, a group, or everything matching
// the filter. Groups are formed from the newest dead jobs loaded (up to 1000 per load);
// group and "all matching" actions go to the server as filters, so they cover every
// matching dead job, loaded or not.

import { h, clear, time, toast, field, select } from "../dom.js";
import { get, post, qs, can, ApiError } from "../api.js";
import * as live from "../live.js";
import { run as runBulk } from "../bulk.js";

const LOAD = 1000;

export async function render(root, { params }) {
  const queues = (await get("v1/queues")).queues.map((q) => q.name);
  const f = { queue: params.queue || "", kind: params.kind || "", error: params.error || "" };
  const inputs = {
    queue: select([["", "all queues"], ...queues.map((q) => [q, q])], f.queue),
    kind: h("input", { type: "text", value: f.kind, placeholder: "any", size: 14 }),
    error: h("input", { type: "search", value: f.error, placeholder: "substring", size: 24 }),
  };
  const form = h("form", { class: "filters card", role: "search", "aria-label": "Filter dead letters" },
    field("d-queue", "Queue", inputs.queue), field("d-kind", "Kind", inputs.kind), field("d-error", "Error contains", inputs.error),
    h("div", {}, h("button", { type: "submit" }, "Apply")));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = `#/dead${qs({ queue: inputs.queue.value, kind: inputs.kind.value.trim(), error: inputs.error.value.trim() })}`;
  });
  const bar = h("div", { class: "actions" });
  const groupsBox = h("div", { class: "scroll" });
  const listBox = h("div", { class: "scroll" });
  root.append(h("h1", {}, "Dead letters"), form,
    h("section", { class: "card" }, bar, h("h2", {}, "Grouped by error"), groupsBox),
    h("section", { class: "card" }, h("h2", {}, "Newest dead jobs"), listBox));

  const base = () => {
    const b = {};
    if (f.queue) b.queue = f.queue;
    if (f.kind) b.kind = f.kind;
    if (f.error) b.error_contains = f.error;
    return b;
  };
  let jobs = [], more = false, armed = false, shown = "";

  // One job: the API's call. A group or everything matching: a bulk operation the server
  // runs (durable, with progress; across every queue of the tenant when none is chosen).
  const progress = h("p", { role: "status", id: "bulk-progress" });
  const all = async (verb, filter, what) => {
    try {
      if (filter.ids) {
        const r = await post(`v1/dead/${verb}`, filter);
        toast(`${verb === "retry" ? "Retried" : "Purged"} ${r.count} ${what}`);
      } else {
        await runBulk({ action: `dead.${verb}`, ...filter }, progress, load);
      }
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
    await load();
  };

  const load = async () => {
    const page = await get(`v1/dead${qs({ queue: f.queue, kind: f.kind, error_contains: f.error, limit: LOAD })}`);
    // Redraw only on change: a table rebuilt under the pointer loses clicks and focus.
    const seen = JSON.stringify([page.jobs.map((j) => j.id), page.has_more]);
    if (seen === shown) return;
    shown = seen;
    jobs = page.jobs; more = page.has_more;
    draw();
  };

  const draw = () => {
    const admin = can("admin");
    clear(bar).append(h("span", { class: "muted", id: "dead-count" }, `${jobs.length}${more ? "+" : ""} dead job${jobs.length === 1 ? "" : "s"} match`));
    if (admin && jobs.length) {
      bar.append(
        h("button", { type: "button", id: "retry-all", onclick: () => all("retry", base(), "dead jobs") }, "Retry all matching"),
        h("button", { type: "button", id: "purge-all", class: "danger", onclick: () => {
          if (!armed) { armed = true; draw(); return; }
          armed = false; all("purge", base(), "dead jobs");
        } }, armed ? "Confirm: purge all matching" : "Purge all matching"));
    }
    bar.append(progress);
    const groups = new Map();
    for (const j of jobs) {
      const e = (j.attempts[0] && j.attempts[0].error) || "(no error text)";
      const g = groups.get(e) || { error: e, count: 0, kinds: new Set(), queues: new Set(), newest: 0 };
      g.count++; g.kinds.add(j.kind); g.queues.add(j.queue);
      g.newest = Math.max(g.newest, j.attempts[0] ? j.attempts[0].finished_at_unix_ms : 0);
      groups.set(e, g);
    }
    const sorted = [...groups.values()].sort((a, b) => b.count - a.count);
    clear(groupsBox).append(sorted.length ? h("table", { id: "dead-groups" },
      h("thead", {}, h("tr", {}, ...["Error", "Jobs", "Kinds", "Queues", "Newest", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...sorted.map((g) => h("tr", {},
        h("td", { class: "errtext" }, g.error),
        h("td", { class: "num" }, `${g.count}${more ? "+" : ""}`),
        h("td", {}, [...g.kinds].join(", ")),
        h("td", {}, [...g.queues].join(", ")),
        h("td", {}, time(g.newest)),
        h("td", {}, admin && g.error !== "(no error text)" ? h("div", { class: "actions" },
          h("button", { type: "button", class: "ghost", "data-action": "retry-group", onclick: () => all("retry", { ...base(), error_contains: g.error }, "in the group") }, "Retry group"),
          h("button", { type: "button", class: "ghost", "data-action": "purge-group", onclick: () => all("purge", { ...base(), error_contains: g.error }, "in the group") }, "Purge group")) : null))))) : h("p", { class: "muted" }, "No dead jobs match."));
    const shown = jobs.slice(0, 100);
    clear(listBox).append(h("table", { id: "dead-table" },
      h("thead", {}, h("tr", {}, ...["Id", "Queue", "Kind", "Attempts", "Died", "Error", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...shown.map((j) => h("tr", { "data-job": j.id },
        h("td", {}, h("a", { href: `#/job/${j.id}` }, String(j.id))),
        h("td", {}, j.queue), h("td", {}, j.kind),
        h("td", { class: "num" }, `${j.attempts[0] ? j.attempts[0].attempt : 0}/${j.max_attempts}`),
        h("td", {}, time(j.attempts[0] && j.attempts[0].finished_at_unix_ms)),
        h("td", { class: "errtext" }, (j.attempts[0] && j.attempts[0].error) || ""),
        h("td", {}, admin ? h("div", { class: "actions" },
          h("button", { type: "button", class: "ghost", onclick: () => all("retry", { ids: [j.id] }, `job ${j.id}`) }, "Retry"),
          h("button", { type: "button", class: "ghost", onclick: () => all("purge", { ids: [j.id] }, `job ${j.id}`) }, "Purge")) : null))))));
    if (jobs.length > shown.length) listBox.append(h("p", { class: "muted" }, `Showing the newest ${shown.length}; filter to narrow down.`));
  };

  await load();
  let printed = "";
  return {
    onLive(snap) {
      // Only the dead counters: a busy queue's other counters move every second, and this
      // page reads up to 1000 rows.
      const fp = JSON.stringify(snap.queues.filter((q) => !f.queue || q.name === f.queue).map((q) => [q.name, q.counts.dead]));
      if (printed && fp !== printed) load().catch(() => {});
      printed = fp;
    },
  };
}
