// Heartbeat monitors (docs/monitors.md): every monitor of the tenant with its state (new,
// up, late, down, paused), expected period or cron, grace, last ping and deadline; pause
// and resume (admin); the tenant's notification targets. `#/monitors/NAME` adds the
// monitor's latest pings and its alert history (late, failed, recovered, with the reason),
// newest first. Everything is the /v1 API.

import { h, clear, toast, stateBadge } from "../dom.js";
import { get, post, qs, can, ApiError } from "../api.js";

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
  root.append(h("h1", {}, "Monitors"), status, ...(name ? [detail, list] : [list]),
    h("section", { class: "card" }, h("h2", {}, "Notification targets"), targets));
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
        admin ? h("td", {}, h("button", { type: "button", class: "ghost", "data-action": m.state === "paused" ? "resume" : "pause", onclick: () => setPaused(m, m.state !== "paused") }, m.state === "paused" ? "Resume" : "Pause")) : null)))));
    if (!page.monitors.length) table.append(h("p", { class: "muted" }, "No monitors yet (pgferry monitor create, or POST /v1/monitors)."));
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Previous"),
      h("button", { type: "button", class: "ghost", disabled: !page.next, onclick: () => { cursors.push(page.next); load(); } }, "Next"));
  };

  let targetsShown = "";
  const loadTargets = async () => {
    const t = await get(`v1/notification-targets${qs({ limit: 100 })}`);
    const fp = JSON.stringify(t);
    if (fp === targetsShown) return;
    targetsShown = fp;
    clear(targets).append(t.targets.length ? h("table", { id: "targets-table" },
      h("thead", {}, h("tr", {}, ...["Name", "URL", "Events", "Enabled"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...t.targets.map((x) => h("tr", {},
        h("td", {}, x.name), h("td", { class: "mono" }, x.url),
        h("td", { class: "mono" }, x.events.length ? x.events.join(", ") : "all"),
        h("td", {}, x.enabled ? "yes" : "no"))))) : h("p", { class: "muted" }, "No notification targets: alerts are recorded here but sent nowhere."));
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
    },
  };
}
