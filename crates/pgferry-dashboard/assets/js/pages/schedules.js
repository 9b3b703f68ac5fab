// Schedules of the tenant: cron or interval, time zone, target, next and last fire,
// paused; pause / resume, create and delete (admin). `#/schedules/NAME` adds one schedule's next fires
// (computed by the server from its spec) and its recorded fires, newest first, with their
// outcome (fired, backfilled, missed, skipped, buffered), reason and job.

import { h, clear, toast, stateBadge, field, select } from "../dom.js";
import { get, post, del, qs, can, ApiError } from "../api.js";
import { formErrors, whole, deleteButton, group } from "../forms.js";

const when = (t) => (t ? t.replace("T", " ").replace(/\.\d+/, "") : "—");

export async function render(root, { arg }) {
  const name = arg ? decodeURIComponent(arg) : null;
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  const detail = h("div", { id: "schedule-detail" });
  root.append(h("h1", {}, "Schedules"), status, h("section", { class: "card" }, table, pager), detail,
    ...(can("admin") ? [createSchedule(() => load())] : []));
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
  const remove = async (n) => {
    try {
      await del(`v1/schedules/${encodeURIComponent(n)}`);
      toast(`Schedule ${n} deleted`);
      if (name === n) { location.hash = "#/schedules"; return; }
      await load();
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
        admin ? h("td", {}, h("div", { class: "actions" }, h("button", { type: "button", class: "ghost", "data-action": s.paused ? "resume" : "pause", onclick: () => setPaused(s, !s.paused) }, s.paused ? "Resume" : "Pause"),
          deleteButton(s.name, () => remove(s.name)))) : null)))));
    if (!page.schedules.length) table.append(h("p", { class: "muted" }, admin ? "No schedules yet: create one below." : "No schedules yet."));
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

// "New schedule" (admin): POST /v1/schedules. JSON args / input are checked in the page;
// everything else (name, cron or interval, zone, queue, kind, policies) by the API, which
// names the field ("target.queue" marks the queue input).
function createSchedule(reload) {
  const i = {
    name: h("input", { type: "text", required: true, autocomplete: "off", placeholder: "nightly-report" }),
    expects: select([["cron", "cron times"], ["interval", "every interval"]], "cron"),
    cron: h("input", { type: "text", autocomplete: "off", placeholder: "0 3 * * *" }),
    interval_ms: h("input", { type: "text", inputmode: "numeric", placeholder: "60000" }),
    timezone: h("input", { type: "text", autocomplete: "off", value: "UTC" }),
    "target.type": select([["job", "job"], ["workflow", "workflow"]], "job"),
    "target.queue": h("input", { type: "text", autocomplete: "off", required: true }),
    "target.kind": h("input", { type: "text", autocomplete: "off", required: true }),
    "target.args": h("textarea", { spellcheck: "false" }),
    missed: select(["run_once", "skip", "run_all"], "run_once"),
    overlap: select(["allow", "skip", "buffer_one", "cancel_previous"], "allow"),
    paused: h("input", { type: "checkbox" }),
  };
  i["target.args"].value = "{}";
  i["target.input"] = i["target.args"];
  const { err, reset, bad, fail } = formErrors(i, "schedule-error", "name");
  const out = h("p", { role: "status", id: "schedule-created" });
  const cronField = field("sc-cron", "Cron", i.cron);
  const intervalField = field("sc-interval", "Interval (ms)", i.interval_ms);
  const argsLabel = h("label", { for: "sc-args" }, "Job args (JSON)");
  const show = () => {
    const interval = i.expects.value === "interval";
    cronField.hidden = interval;
    intervalField.hidden = !interval;
    argsLabel.textContent = i["target.type"].value === "workflow" ? "Workflow input (JSON)" : "Job args (JSON)";
  };
  i.expects.addEventListener("change", show);
  i["target.type"].addEventListener("change", show);
  show();
  i["target.args"].id = "sc-args";
  i.paused.id = "sc-paused";
  const form = h("form", { class: "card create", id: "schedule-form", novalidate: true, "aria-label": "Create a schedule" },
    h("h2", {}, "New schedule"),
    h("div", { class: "filters" }, field("sc-name", "Name", i.name), field("sc-expects", "Fires at", i.expects),
      cronField, intervalField, field("sc-zone", "Time zone", i.timezone)),
    group("Target", field("sc-type", "Type", i["target.type"]), field("sc-queue", "Queue", i["target.queue"]),
      field("sc-kind", "Kind", i["target.kind"])),
    h("div", {}, argsLabel, i["target.args"]),
    h("div", { class: "filters" }, field("sc-missed", "Missed fires", i.missed), field("sc-overlap", "Overlap", i.overlap),
      h("div", { class: "check" }, i.paused, h("label", { for: "sc-paused" }, "Start paused"))),
    err, h("button", { type: "submit" }, "Create schedule"), out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    reset(); out.textContent = "";
    const workflow = i["target.type"].value === "workflow";
    const body = {
      name: i.name.value.trim(),
      timezone: i.timezone.value.trim() || undefined,
      missed: i.missed.value,
      overlap: i.overlap.value,
      paused: i.paused.checked,
      target: { type: i["target.type"].value, queue: i["target.queue"].value.trim(), kind: i["target.kind"].value.trim() },
    };
    if (!body.name) return bad(i.name, "name: required");
    if (i.expects.value === "cron") body.cron = i.cron.value.trim();
    else {
      const v = whole(i.interval_ms);
      if (v === undefined || Number.isNaN(v)) return bad(i.interval_ms, "interval_ms: a whole number of milliseconds");
      body.interval_ms = v;
    }
    let data;
    try { data = JSON.parse(i["target.args"].value || "{}"); } catch (e) {
      return bad(i["target.args"], `target.${workflow ? "input" : "args"}: not valid JSON (${e.message})`);
    }
    body.target[workflow ? "input" : "args"] = data;
    try {
      const r = await post("v1/schedules", body);
      form.reset();
      i["target.args"].value = "{}";
      show();
      out.append(`Created ${r.name}; first fire ${r.next_fire_at || "—"}. `, h("a", { href: `#/schedules/${encodeURIComponent(r.name)}` }, "Open it"));
      toast(`Schedule ${r.name} created`);
      await reload();
    } catch (e) { fail(e); }
  });
  return form;
}
