// The database-load panel of the overview (admin: ASH data is database-wide): average
// active sessions per bucket stacked by wait type with the vCPU line, over the last 15
// minutes, and the queues, pgferry roles and applications that carried the load (the
// tenant's own queues by name; other tenants' load is one "(other tenants)" row). Read from
// `/v1/ash/*` (docs/ash.md) every 10 s.

import { h, clear, toast } from "../dom.js";
import { get, qs, can, ApiError } from "../api.js";
import { stackedBars, WAIT_COLOURS } from "../chart.js";

const WINDOW_MS = 15 * 60 * 1000;

export function ashPanel() {
  if (!can("admin")) return null;
  const canvas = h("canvas", { id: "chart-ash", role: "img" });
  const legend = h("div", { class: "legend", id: "ash-legend" });
  const who = h("div", { class: "scroll", id: "ash-who" });
  const note = h("p", { class: "muted", id: "ash-note" });
  const section = h("section", { class: "card", "aria-labelledby": "ash-h", id: "ash" },
    h("h2", { id: "ash-h" }, "Database load (average active sessions, last 15 min)"),
    legend, canvas, note, who);
  let last = null;
  const draw = () => {
    if (!last) return;
    const { t, queues, roles, apps } = last;
    const types = [...new Set(t.points.filter((p) => p.wait_type).map((p) => p.wait_type))].sort((a, b) => (a === "CPU" ? -1 : b === "CPU" ? 1 : a.localeCompare(b)));
    const byBucket = new Map();
    for (const p of t.points) {
      if (!byBucket.has(p.bucket_start_ms)) byBucket.set(p.bucket_start_ms, { at: p.bucket_start_ms, parts: {} });
      if (p.wait_type) byBucket.get(p.bucket_start_ms).parts[p.wait_type] = p.aas;
    }
    const buckets = [...byBucket.values()].sort((a, b) => a.at - b.at);
    clear(legend).append(...types.map((ty, n) => h("span", { class: `w${n % WAIT_COLOURS.length}` }, ty)), h("span", { class: "vcpu" }, `${t.vcpus} vCPU`));
    const peak = Math.max(0, ...buckets.map((b) => Object.values(b.parts).reduce((a, v) => a + v, 0)));
    note.textContent = buckets.length ? `Peak ${peak.toFixed(2)} AAS in a ${t.bucket_s} s bucket.` : "No samples in this window (is the ASH sampler on? see docs/ash.md).";
    stackedBars(canvas, buckets, types, {
      line: t.vcpus,
      label: `Database load by wait type: ${types.join(", ") || "none"}; ${t.vcpus} vCPU line; peak ${peak.toFixed(2)} average active sessions`,
    });
    // '' is load no queue, role or application is named for (not pgferry's, or not one queue).
    const rows = [...queues.slices.map((s) => ["queue", s]), ...roles.slices.map((s) => ["pgferry role", s]), ...apps.slices.map((s) => ["application", s])].filter(([, s]) => s.aas > 0 && s.key !== "");
    clear(who).append(rows.length ? h("table", { id: "ash-carriers" },
      h("thead", {}, h("tr", {}, ...["By", "Who", "AAS", "DB time %"].map((x, i) => h("th", { scope: "col", class: i > 1 ? "num" : null }, x)))),
      h("tbody", {}, ...rows.map(([by, s]) => h("tr", {}, h("td", {}, by), h("td", {}, s.key || "(none)"),
        h("td", { class: "num" }, s.aas.toFixed(2)), h("td", { class: "num" }, `${Number(s.db_time_pct).toFixed(0)}%`))))) : "");
  };
  let busy = false, failed = false;
  const load = async () => {
    if (busy) return;
    busy = true;
    const now = Date.now();
    const w = { since_ms: now - WINDOW_MS, until_ms: now };
    try {
      const [t, queues, roles, apps] = await Promise.all([
        get(`v1/ash/timeline${qs({ ...w, bucket_s: 10 })}`),
        get(`v1/ash/aas${qs({ ...w, by: "queue" })}`),
        get(`v1/ash/aas${qs({ ...w, by: "pgferry_role" })}`),
        get(`v1/ash/aas${qs({ ...w, by: "application" })}`),
      ]);
      last = { t, queues, roles, apps };
      failed = false;
      draw();
    } catch (e) {
      if (!failed) toast(`Database load: ${e instanceof ApiError ? e.describe() : e}`, true);
      failed = true;
    } finally { busy = false; }
  };
  load();
  const timer = setInterval(load, 10000);
  return { section, redraw: draw, dispose() { clearInterval(timer); } };
}
