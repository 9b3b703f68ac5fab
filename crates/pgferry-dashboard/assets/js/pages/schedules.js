// Schedules of the tenant: cron or interval, time zone, target, next and last fire,
// paused; pause / resume (admin). `#/schedules/NAME` adds one schedule's next fires
// (computed by the server from its spec) and its recorded fires, newest first, with their
// outcome (fired, backfilled, missed, skipped, buffered), reason and job.

import { h, clear, toast, stateBadge } from "../dom.js";
import { get, post, qs, can, ApiError } from "../api.js";

const when = (t) => (t ? t.replace("T", " ").replace(/\.\d+/, "") : "—");

export async function render(root, { arg }) {
  const name = arg ? decodeURIComponent(arg) : null;
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  const detail = h("div", { id: "schedule-detail" });
  root.append(h("h1", {}, "Schedules"), status, h("section", { class: "card" }, table, pager), detail);
  const cursors = [""];
  let page = { schedules: [], next: null }, shown = "";

  const load = async () => {
    try {
      page = await get(`v1/schedules${qs({ after: cursors[cursors.length - 1], limit: 100 })}`);
      status.textContent = "";
    } catch (e) { status.textContent = e instanceof ApiError ? e.describe() : String(e); return; }
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const setPaused = async (s, pause) => {
    try {
      await post(`v1/schedules/${encodeURIComponent(s.name)}/${pause ? "pause" : "resume"}`);
      toast(`Schedule ${s.name} ${pause ? "paused" : "resumed"}`);
      await load();
      if (name === s.name) await loadDetail();
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
  };
  const draw = () => {
    const admin = can("admin");
    clear(table).append(h("table", { id: "schedules-table" },
      h("thead", {}, h("tr", {}, ...["Name", "When", "Zone", "Target", "Status", "Next fire", "Last fire", "Missed / overlap", admin ? "Actions" : null].filter(Boolean).map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...page.schedules.map((s) => h("tr", { "data-schedule": s.name },
        h("td", {}, h("a", { href: `#/schedules/${encodeURIComponent(s.name)}` }, s.name)),
        h("td", { class: "mono" }, s.cron || `every ${s.interval_ms} ms`),
        h("td", {}, s.timezone),
        h("td", {}, `${s.target.type} ${s.target.kind} → ${s.target.queue}`),
        h("td", {}, stateBadge(s.paused ? "paused" : "active")),
        h("td", {}, s.paused ? "—" : when(s.next_fire_at)),
        h("td", {}, s.last_job_id ? h("a", { href: `#/job/${s.last_job_id}` }, when(s.last_fire_at)) : when(s.last_fire_at)),
        h("td", {}, `${s.missed} / ${s.overlap}`),
        admin ? h("td", {}, h("button", { type: "button", class: "ghost", "data-action": s.paused ? "resume" : "pause", onclick: () => setPaused(s, !s.paused) }, s.paused ? "Resume" : "Pause")) : null)))));
    if (!page.schedules.length) table.append(h("p", { class: "muted" }, "No schedules yet (see docs/schedules.md to create one)."));
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Previous"),
      h("button", { type: "button", class: "ghost", disabled: !page.next, onclick: () => { cursors.push(page.next); load(); } }, "Next"));
  };

  let detailShown = "";
  const loadDetail = async () => {
    if (!name) return;
    const enc = encodeURIComponent(name);
    const [s, preview, fires] = await Promise.all([
      get(`v1/schedules/${enc}`),
      get(`v1/schedules/${enc}/preview${qs({ n: 5 })}`),
      get(`v1/schedules/${enc}/fires${qs({ limit: 50 })}`),
    ]);
    const fp = JSON.stringify([s, preview, fires]);
    if (fp === detailShown) return;
    detailShown = fp;
    const missed = fires.fires.filter((f) => f.outcome === "missed" || f.outcome === "skipped").length;
    clear(detail).append(h("section", { class: "card" },
      h("h2", {}, `Schedule ${s.name} `, stateBadge(s.paused ? "paused" : "active")),
      h("div", { class: "grid2" },
        h("div", {}, h("h2", {}, "Next fires"), s.paused ? h("p", { class: "muted" }, "Paused: a resumed schedule fires from the next time after now.") : null,
          h("ol", { id: "schedule-preview" }, ...preview.fires.map((f) => h("li", {}, when(f))))),
        h("div", {}, h("h2", {}, "Target"), h("pre", {}, JSON.stringify(s.target, null, 2)))),
      h("h2", {}, `Recorded fires (newest 50; ${missed} missed or skipped)`),
      fires.fires.length ? h("div", { class: "scroll" }, h("table", { id: "schedule-fires" },
        h("thead", {}, h("tr", {}, ...["Fire time", "Recorded", "Outcome", "Job", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, ...fires.fires.map((f) => h("tr", { "data-outcome": f.outcome },
          h("td", {}, when(f.fire_at)), h("td", {}, when(f.recorded_at)), h("td", {}, stateBadge(f.outcome)),
          h("td", {}, f.job_id ? h("a", { href: `#/job/${f.job_id}` }, String(f.job_id)) : "—"),
          h("td", {}, f.reason || "")))))) : h("p", { class: "muted" }, "No fires recorded yet.")));
  };

  await load();
  if (name) {
    try { await loadDetail(); } catch (e) { status.textContent = e instanceof ApiError ? e.describe() : String(e); }
  }
  let tick = 0;
  return {
    onLive() {
      if (++tick % 2) return;
      load().catch(() => {});
      loadDetail().catch(() => {});
    },
  };
}
