// Heartbeat monitors (docs/monitors.md): every monitor of the tenant with its state (new,
// up, late, down, paused), expected period or cron, grace, last ping and deadline; pause
// and resume (admin); the tenant's notification targets. Admins create and delete monitors
// and create, change and delete notification targets. `#/monitors/NAME` adds the
// monitor's latest pings and its alert history (late, failed, recovered, with the reason),
// newest first. Everything is the /v1 API.

import { h, clear, toast, stateBadge, field, select } from "../dom.js";
import { get, post, patch, del, qs, can, ApiError } from "../api.js";
import { formErrors, whole, items, deleteButton, group } from "../forms.js";

const when = (t) => (t ? t.replace("T", " ").replace(/\.\d+/, "") : "—");
const describe = (e) => (e instanceof ApiError ? e.describe() : String(e));

export function ms(n) {
  if (n === null || n === undefined) return "—";
  const units = [[86_400_000, "d"], [3_600_000, "h"], [60_000, "min"], [1000, "s"]];
  for (const [u, name] of units) if (n >= u && n % u === 0) return `${n / u} ${name}`;
  return `${n} ms`;
}

const expects = (m) => (m.cron ? `cron ${m.cron} (${m.timezone})` : `every ${ms(m.period_ms)}`);

export async function render(root, { arg }) {
  const name = arg ? decodeURIComponent(arg) : null;
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  const detail = h("div", { id: "monitor-detail" });
  const targets = h("div", { class: "scroll" });
  const list = h("section", { class: "card" },
    h("p", { class: "muted" }, "Heartbeat monitors: your job pings its URL when it ran; a monitor turns late when a run does not come within its grace, down after its failure threshold of failed runs, and up again with the next good ping."),
    table, pager);
  // An open monitor comes first; the list stays below it.
  const admin0 = can("admin");
  const targetForm = admin0 ? editTarget(() => loadTargets(true)) : null;
  const monitorForm = admin0 ? createMonitor(() => load()) : null;
  root.append(h("h1", {}, "Monitors"), status, ...(name ? [detail, list] : [list]), ...(monitorForm ? [monitorForm.form] : []),
    h("section", { class: "card" }, h("h2", {}, "Notification targets"), targets), ...(targetForm ? [targetForm.form] : []));
  const cursors = [""];
  let page = { monitors: [], next: null }, shown = "";

  const load = async () => {
    try {
      page = await get(`v1/monitors${qs({ after: cursors[cursors.length - 1], limit: 100 })}`);
      status.textContent = "";
    } catch (e) { status.textContent = describe(e); return; }
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const setPaused = async (m, pause) => {
    try {
      await post(`v1/monitors/${encodeURIComponent(m.name)}/${pause ? "pause" : "resume"}`);
      toast(`Monitor ${m.name} ${pause ? "paused" : "resumed"}`);
      await load();
      if (name === m.name) await loadDetail();
    } catch (e) { toast(describe(e), true); }
  };
  const remove = async (m) => {
    try {
      await del(`v1/monitors/${encodeURIComponent(m)}`);
      toast(`Monitor ${m} deleted`);
      if (name === m) { location.hash = "#/monitors"; return; }
      await load();
    } catch (e) { toast(describe(e), true); }
  };
  const draw = () => {
    const admin = can("admin");
    clear(table).append(h("table", { id: "monitors-table" },
      h("thead", {}, h("tr", {}, ...["Name", "State", "Expects", "Grace", "Last ping", "Deadline", "Failures", "Alerts go to", admin ? "Actions" : null].filter(Boolean).map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...page.monitors.map((m) => h("tr", { "data-monitor": m.name, "data-state": m.state },
        h("td", {}, h("a", { href: `#/monitors/${encodeURIComponent(m.name)}` }, m.name)),
        h("td", {}, stateBadge(m.state)),
        h("td", { class: "mono" }, expects(m)),
        h("td", {}, ms(m.grace_ms)),
        h("td", {}, when(m.last_ping_at)),
        h("td", {}, m.state === "paused" ? "—" : when(m.due_at)),
        h("td", { class: "num" }, `${m.consecutive_failures} / ${m.failure_threshold}`),
        h("td", {}, m.targets ? m.targets.join(", ") : "every matching target"),
        admin ? h("td", {}, h("div", { class: "actions" }, h("button", { type: "button", class: "ghost", "data-action": m.state === "paused" ? "resume" : "pause", onclick: () => setPaused(m, m.state !== "paused") }, m.state === "paused" ? "Resume" : "Pause"),
          deleteButton(m.name, () => remove(m.name)))) : null)))));
    if (!page.monitors.length) table.append(h("p", { class: "muted" }, admin ? "No monitors yet: create one below." : "No monitors yet."));
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Previous"),
      h("button", { type: "button", class: "ghost", disabled: !page.next, onclick: () => { cursors.push(page.next); load(); } }, "Next"));
  };

  let targetsShown = "";
  const removeTarget = async (t) => {
    try {
      await del(`v1/notification-targets/${encodeURIComponent(t)}`);
      toast(`Notification target ${t} deleted`);
      await loadTargets(true);
    } catch (e) { toast(describe(e), true); }
  };
  const loadTargets = async (force) => {
    const t = await get(`v1/notification-targets${qs({ limit: 100 })}`);
    if (monitorForm) monitorForm.targets(t.targets.map((x) => x.name));
    const fp = JSON.stringify(t);
    if (fp === targetsShown && !force) return;
    targetsShown = fp;
    const admin = can("admin");
    clear(targets).append(t.targets.length ? h("table", { id: "targets-table" },
      h("thead", {}, h("tr", {}, ...["Name", "URL", "Events", "Enabled", admin ? "Actions" : null].filter(Boolean).map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...t.targets.map((x) => h("tr", { "data-target": x.name },
        h("td", {}, x.name), h("td", { class: "mono" }, x.url),
        h("td", { class: "mono" }, x.events.length ? x.events.join(", ") : "all"),
        h("td", {}, x.enabled ? "yes" : "no"),
        admin ? h("td", {}, h("div", { class: "actions" },
          h("button", { type: "button", class: "ghost", "data-action": "edit", "aria-label": `Edit ${x.name}`, onclick: () => targetForm.edit(x) }, "Edit"),
          deleteButton(x.name, () => removeTarget(x.name)))) : null)))) : h("p", { class: "muted" }, "No notification targets: alerts are recorded here but sent nowhere."));
  };

  // One monitor: its pings and alerts (alerts keyset-paged by id, newest first).
  const alertBefore = [null];
  let detailShown = "";
  const loadDetail = async () => {
    if (!name) return;
    const enc = encodeURIComponent(name);
    const [m, pings, alerts] = await Promise.all([
      get(`v1/monitors/${enc}`),
      get(`v1/monitors/${enc}/pings${qs({ limit: 20 })}`),
      get(`v1/alerts${qs({ type: "monitor", subject: name, before: alertBefore[alertBefore.length - 1], limit: 20 })}`),
    ]);
    const fp = JSON.stringify([m, pings, alerts]);
    if (fp === detailShown) return;
    detailShown = fp;
    const older = alerts.alerts.length === 20 ? alerts.alerts[alerts.alerts.length - 1].id : null;
    clear(detail).append(h("section", { class: "card" },
      h("h2", {}, `Monitor ${m.name} `, h("span", { id: "monitor-state" }, stateBadge(m.state))),
      h("dl", { class: "kv" },
        h("dt", {}, "Expects"), h("dd", { class: "mono" }, expects(m)),
        h("dt", {}, "Grace"), h("dd", {}, ms(m.grace_ms)),
        h("dt", {}, "Failure threshold"), h("dd", {}, String(m.failure_threshold)),
        h("dt", {}, "Repeats alerts"), h("dd", {}, m.realert_ms ? `every ${ms(m.realert_ms)}` : "no (one alert per outage)"),
        h("dt", {}, "Run started"), h("dd", {}, when(m.started_at)),
        h("dt", {}, "Deadline"), h("dd", {}, m.state === "paused" ? "— (paused)" : when(m.due_at)),
        h("dt", {}, "Ping URL"), h("dd", { class: "mono" }, can("admin") ? `${m.ping_path}  (/start, /fail)` : "shown to admin keys")),
      h("div", { class: "grid2" },
        h("div", {}, h("h2", {}, "Latest pings"),
          pings.pings.length ? h("table", { id: "monitor-pings" },
            h("thead", {}, h("tr", {}, ...["At", "Kind", "Body"].map((c) => h("th", { scope: "col" }, c)))),
            h("tbody", {}, ...pings.pings.map((p) => h("tr", { "data-kind": p.kind },
              h("td", {}, when(p.at)), h("td", {}, stateBadge(p.kind)), h("td", { class: "mono" }, p.body || "")))))
            : h("p", { class: "muted" }, "Never pinged.")),
        h("div", {}, h("h2", {}, "Alerts"),
          alerts.alerts.length ? h("table", { id: "monitor-alerts" },
            h("thead", {}, h("tr", {}, ...["At", "Alert", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
            h("tbody", {}, ...alerts.alerts.map((a) => h("tr", { "data-kind": a.kind },
              h("td", {}, when(a.at)), h("td", {}, stateBadge(a.kind)), h("td", {}, a.reason)))))
            : h("p", { class: "muted" }, alertBefore.length > 1 ? "No older alerts." : "No alerts raised."),
          h("div", { class: "actions" },
            h("button", { type: "button", class: "ghost", disabled: alertBefore.length === 1, onclick: () => { alertBefore.pop(); loadDetail(); } }, "Newer"),
            h("button", { type: "button", class: "ghost", disabled: !older, onclick: () => { alertBefore.push(older); loadDetail(); } }, "Older"))))));
  };

  await load();
  try { await loadTargets(); } catch (e) { clear(targets).append(h("p", { class: "error" }, describe(e))); }
  if (name) {
    try { await loadDetail(); } catch (e) { status.textContent = describe(e); }
  }
  let tick = 0;
  return {
    onLive() {
      if (++tick % 2) return;
      load().catch(() => {});
      loadDetail().catch(() => {});
      loadTargets().catch(() => {});
    },
  };
}

// "New monitor" (admin): POST /v1/monitors as typed; the API checks name, period or cron
// and zone, grace, threshold, repeat and that each named target exists, naming the field.
// `targets(names)` refreshes the checkboxes of the tenant's targets, keeping what is ticked.
function createMonitor(reload) {
  const i = {
    name: h("input", { type: "text", required: true, autocomplete: "off", placeholder: "nightly-backup" }),
    expects: select([["period", "every period"], ["cron", "cron times"]], "period"),
    period_ms: h("input", { type: "text", inputmode: "numeric", placeholder: "86400000" }),
    cron: h("input", { type: "text", autocomplete: "off", placeholder: "0 3 * * *" }),
    timezone: h("input", { type: "text", autocomplete: "off", value: "UTC" }),
    grace_ms: h("input", { type: "text", inputmode: "numeric", value: "60000" }),
    failure_threshold: h("input", { type: "text", inputmode: "numeric", value: "1" }),
    realert_ms: h("input", { type: "text", inputmode: "numeric", placeholder: "none" }),
  };
  const boxes = h("div", { class: "checks", id: "monitor-targets" });
  const { err, reset, bad, fail } = formErrors({ ...i, targets: boxes }, "monitor-error", "name");
  const out = h("p", { role: "status", id: "monitor-created", class: "created" });
  const periodField = field("mon-period", "Period (ms; 1000 to 366 days)", i.period_ms);
  const cronField = field("mon-cron", "Cron", i.cron);
  const show = () => {
    const cron = i.expects.value === "cron";
    periodField.hidden = cron;
    cronField.hidden = !cron;
  };
  i.expects.addEventListener("change", show);
  show();
  const form = h("form", { class: "card create", id: "monitor-form", novalidate: true, "aria-label": "Create a monitor" },
    h("h2", {}, "New monitor"),
    h("div", { class: "filters" }, field("mon-name", "Name (a-z 0-9 _ . -)", i.name),
      field("mon-expects", "Runs expected", i.expects), periodField, cronField,
      field("mon-zone", "Time zone", i.timezone)),
    h("div", { class: "filters" }, field("mon-grace", "Grace (ms)", i.grace_ms),
      field("mon-threshold", "Failures before down", i.failure_threshold),
      field("mon-realert", "Repeat alerts every (ms; optional)", i.realert_ms)),
    group("Alerts go to (none ticked: every matching target)", boxes),
    err, h("button", { type: "submit" }, "Create monitor"), out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    reset(); out.textContent = "";
    const body = { name: i.name.value.trim() };
    if (!body.name) return bad(i.name, "name: required");
    if (i.expects.value === "cron") body.cron = i.cron.value.trim();
    const numbers = i.expects.value === "cron" ? [] : ["period_ms"];
    for (const k of [...numbers, "grace_ms", "failure_threshold", "realert_ms"]) {
      const v = whole(i[k]);
      if (Number.isNaN(v)) return bad(i[k], `${k}: a whole number`);
      if (v !== undefined) body[k] = v;
    }
    const zone = i.timezone.value.trim();
    if (zone) body.timezone = zone;
    const ticked = [...boxes.querySelectorAll("input:checked")].map((b) => b.value);
    if (ticked.length) body.targets = ticked;
    try {
      const m = await post("v1/monitors", body);
      form.reset();
      show();
      out.textContent = `Created ${m.name}: ping ${location.origin}${m.ping_path} (/start, /fail)`;
      toast(`Monitor ${m.name} created`);
      await reload();
    } catch (e) { fail(e); }
  });
  let names = [];
  const targets = (list) => {
    if (JSON.stringify(list) === JSON.stringify(names)) return;
    const ticked = new Set([...boxes.querySelectorAll("input:checked")].map((b) => b.value));
    names = list;
    clear(boxes).append(...(list.length ? list.map((n, k) => h("div", { class: "check" },
      h("input", { type: "checkbox", id: `mon-target-${k}`, value: n, checked: ticked.has(n) }),
      h("label", { for: `mon-target-${k}` }, n))) : [h("p", { class: "muted" }, "No notification targets yet.")]));
  };
  return { form, targets };
}

// The notification target form (admin): new (POST) or, after "Edit" on a row, that target
// changed (PATCH url, events, enabled; the name stays). The API checks the URL with the
// HTTP jobs' SSRF guard and the event filters, naming the field.
function editTarget(reload) {
  const i = {
    name: h("input", { type: "text", required: true, autocomplete: "off", placeholder: "ops" }),
    url: h("input", { type: "url", required: true, size: 40, autocomplete: "off", placeholder: "https://hooks.example.com/pgferry" }),
    events: h("input", { type: "text", autocomplete: "off", size: 30, placeholder: "monitor.*, schedule.failed" }),
    enabled: h("input", { type: "checkbox", checked: true }),
  };
  const { err, reset, bad, fail } = formErrors(i, "target-error", "name");
  const out = h("p", { role: "status", id: "target-saved" });
  const title = h("h2", {}, "New notification target");
  const submit = h("button", { type: "submit" }, "Create target");
  let editing = null;
  const cancel = h("button", { type: "button", class: "ghost", hidden: true, onclick: () => mode(null) }, "Cancel edit");
  const mode = (t) => {
    editing = t ? t.name : null;
    reset();
    title.textContent = t ? `Edit notification target ${t.name}` : "New notification target";
    submit.textContent = t ? "Save target" : "Create target";
    cancel.hidden = !t;
    i.name.readOnly = !!t;
    i.name.value = t ? t.name : "";
    i.url.value = t ? t.url : "";
    i.events.value = t ? t.events.join(", ") : "";
    i.enabled.checked = t ? t.enabled : true;
    if (t) i.url.focus();
  };
  const form = h("form", { class: "card create", id: "target-form", novalidate: true, "aria-label": "Notification target" },
    title,
    h("div", { class: "filters" }, field("tg-name", "Name (a-z 0-9 _ . -)", i.name), field("tg-url", "URL (http or https; alerts are POSTed as JSON)", i.url),
      field("tg-events", "Events (kinds or families, comma-separated; empty: all)", i.events),
      h("div", { class: "check" }, i.enabled, h("label", { for: "tg-enabled" }, "Enabled"))),
    err, h("div", { class: "actions" }, submit, cancel), out);
  i.enabled.id = "tg-enabled";
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    reset(); out.textContent = "";
    const body = { url: i.url.value.trim(), events: items(i.events), enabled: i.enabled.checked };
    try {
      if (editing) {
        const t = await patch(`v1/notification-targets/${encodeURIComponent(editing)}`, body);
        out.textContent = `Saved ${t.name}.`;
        toast(`Notification target ${t.name} saved`);
      } else {
        body.name = i.name.value.trim();
        if (!body.name) return bad(i.name, "name: required");
        const t = await post("v1/notification-targets", body);
        out.textContent = `Created ${t.name}.`;
        toast(`Notification target ${t.name} created`);
      }
      mode(null);
      await reload();
    } catch (e) { fail(e); }
  });
  return { form, edit: mode };
}
