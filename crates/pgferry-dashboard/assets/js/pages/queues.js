// Queues: depth by state, rates, settings; pause/resume and settings (admin).

import { h, clear, num, rate, time, toast, field, select, stateBadge } from "../dom.js";
import { get, post, patch, can, ApiError } from "../api.js";
import * as live from "../live.js";

const SETTINGS = [
  // name, label, min, max (the API validates again and names the field on refusal)
  ["concurrency", "Concurrency (0 = unlimited)", 0, 1000000],
  ["max_attempts", "Max attempts", 1, 1000],
  ["lease_ms", "Lease (ms)", 1000, 86400000],
  ["backoff_base_ms", "Retry backoff base (ms)", 0, 86400000],
  ["backoff_cap_ms", "Retry backoff cap (ms)", 0, 604800000],
  ["retention_ms", "Retention (ms)", 60000, 31622400000],
];

export async function render(root) {
  const body = h("div", { class: "scroll" });
  const editor = h("div");
  const activity = h("div", { class: "scroll", id: "queue-activity" });
  root.append(h("h1", {}, "Queues"), h("section", { class: "card" }, body), editor,
    h("section", { class: "card", "aria-labelledby": "activity-h" }, h("h2", { id: "activity-h" }, "Latency and workers"),
      h("p", { class: "muted" }, "Oldest waiting: how long the next job to be claimed has waited. Start wait: median time from enqueue to claim over the latest claims (up to 500). Workers: names that claimed from the queue recently (receipts not yet behind the rescuer's mark), with the jobs they were handed and their latest lease end."),
      activity));
  let queues = [];
  let printed = "";
  let drawn = "";
  const draw = () => {
    const admin = can("admin");
    // Skip identical redraws; keep keyboard focus on the same button across a redraw.
    const key = JSON.stringify([queues, ...queues.map((q) => [rate(live.rateOf("enqueued", q.name)), rate(live.rateOf("completed", q.name))])]);
    if (key === drawn) return;
    drawn = key;
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("tr[data-queue]")
      ? [document.activeElement.closest("tr[data-queue]").dataset.queue, document.activeElement.dataset.action] : null;
    clear(body).append(h("table", { id: "queues-table" },
      h("thead", {}, h("tr", {}, ...["Queue", "State", "Pending", "Scheduled", "Running", "Dead", "Completed", "Failed", "Enqueued/s", "Completed/s", "Concurrency", "Durability", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...queues.map((q) => h("tr", { "data-queue": q.name },
        h("td", {}, h("a", { href: `#/jobs?queue=${encodeURIComponent(q.name)}` }, q.name)),
        h("td", {}, stateBadge(q.paused ? "paused" : "active")),
        ...["pending", "scheduled", "running", "dead", "completed", "failed"].map((c) => h("td", { class: "num" }, num(q.counts[c]))),
        h("td", { class: "num" }, rate(live.rateOf("enqueued", q.name))),
        h("td", { class: "num" }, rate(live.rateOf("completed", q.name))),
        h("td", { class: "num" }, q.settings.concurrency ?? "∞"),
        h("td", {}, q.settings.durability),
        h("td", {}, admin ? h("div", { class: "actions" },
          h("button", { type: "button", class: "ghost", "data-action": q.paused ? "resume" : "pause", onclick: () => toggle(q) }, q.paused ? "Resume" : "Pause"),
          h("button", { type: "button", class: "ghost", "data-action": "settings", onclick: () => edit(q) }, "Settings")) : null),
      )))));
    if (focused) {
      const again = body.querySelector(`tr[data-queue="${CSS.escape(focused[0])}"] button[data-action="${focused[1] === "pause" || focused[1] === "resume" ? (queues.find((q) => q.name === focused[0]) || {}).paused ? "resume" : "pause" : focused[1]}"]`);
      if (again) again.focus();
    }
  };
  // Latency and workers per queue: one request each (at most the first 20 queues), at most
  // every 5 s while the page is open.
  let activityAt = 0;
  const loadActivity = async () => {
    if (Date.now() - activityAt < 5000) return;
    activityAt = Date.now();
    const rows = await Promise.all(queues.slice(0, 20).map((q) =>
      get(`queues/${encodeURIComponent(q.name)}/activity`).catch(() => null)));
    const ms = (v) => (v === null || v === undefined ? "—" : v < 1000 ? `${v} ms` : `${(v / 1000).toFixed(1)} s`);
    clear(activity).append(h("table", { id: "activity-table" },
      h("thead", {}, h("tr", {}, ...["Queue", "Oldest waiting", "Start wait p50", "Workers"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...rows.filter(Boolean).map((a) => h("tr", { "data-queue": a.queue },
        h("td", {}, a.queue),
        h("td", { class: "num", "data-col": "oldest" }, ms(a.oldest_pending_ms)),
        h("td", { class: "num", "data-col": "wait" }, `${ms(a.start_wait_p50_ms)}${a.start_wait_sample ? ` (${a.start_wait_sample})` : ""}`),
        h("td", { "data-col": "workers" }, a.workers.length
          ? h("ul", { class: "plain" }, ...a.workers.map((w) => h("li", { "data-worker": w.worker || "" },
            `${w.worker || "(unnamed)"}: ${num(w.jobs)} jobs, last claim ${time(w.last_claim_unix_ms)}, lease until ${time(w.lease_until_unix_ms)}`)))
          : "none recently"))))));
  };
  const load = async () => {
    queues = (await get("v1/queues")).queues;
    draw();
    loadActivity().catch(() => {});
  };
  const toggle = async (q) => {
    try {
      await post(`v1/queues/${encodeURIComponent(q.name)}/${q.paused ? "resume" : "pause"}`);
      toast(`${q.name} ${q.paused ? "resumed" : "paused"}`);
      await load();
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
  };
  const edit = (q) => {
    const err = h("p", { class: "error", role: "alert" });
    const inputs = {};
    const form = h("form", { novalidate: true },
      h("h2", {}, `Settings of ${q.name}`),
      h("div", { class: "filters" },
        ...SETTINGS.map(([name, label, min, max]) => {
          inputs[name] = h("input", { type: "number", min, max, step: 1, value: q.settings[name] ?? "" });
          return field(`set-${name}`, label, inputs[name]);
        }),
        field("set-durability", "Durability", (inputs.durability = select(["sync", "async"], q.settings.durability)))),
      err,
      h("div", { class: "actions" }, h("button", { type: "submit" }, "Save"), h("button", { type: "button", class: "ghost", onclick: () => clear(editor) }, "Close")));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      err.textContent = "";
      const body = {};
      for (const [name, label, min, max] of SETTINGS) {
        const raw = inputs[name].value.trim();
        if (raw === "") continue;
        const v = Number(raw);
        if (!Number.isInteger(v) || v < min || v > max) {
          err.textContent = `${label}: a whole number from ${min} to ${max}`;
          inputs[name].setAttribute("aria-invalid", "true");
          inputs[name].focus();
          return;
        }
        inputs[name].removeAttribute("aria-invalid");
        if (v !== q.settings[name]) body[name] = v;
      }
      if (inputs.durability.value !== q.settings.durability) body.durability = inputs.durability.value;
      try {
        await patch(`v1/queues/${encodeURIComponent(q.name)}`, body);
        toast(`Settings of ${q.name} saved`);
        clear(editor);
        await load();
      } catch (e) { err.textContent = e instanceof ApiError ? e.describe() : String(e); }
    });
    clear(editor).append(h("section", { class: "card" }, form));
    inputs[SETTINGS[0][0]].focus();
  };
  await load();
  return {
    onLive(snap) {
      const fp = live.fingerprint(snap);
      if (fp !== printed) { printed = fp; load().catch(() => {}); } else { draw(); loadActivity().catch(() => {}); }
    },
  };
}
