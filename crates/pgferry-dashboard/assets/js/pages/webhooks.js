// Inbound webhooks (docs/monitors.md): the tenant's endpoints; `#/webhooks/SLUG` one
// endpoint's stored events, newest first, with replay of one event or of every event
// since a time (admin); admins create endpoints (slug, signature, dedup header, targets)
// and delete them (two clicks); `#/webhooks/SLUG?event=ID` one event's headers and body and the
// HTTP jobs it was fanned out to (its deliveries: first sending and replays), each with
// every attempt's response status. Listing endpoints and replays are the /v1 API; the
// events newest first and an event's deliveries are the dashboard's own reads.

import { h, clear, time, toast, field, stateBadge } from "../dom.js";
import { get, post, del, qs, can, ApiError } from "../api.js";
import { formErrors, items, deleteButton, group } from "../forms.js";
import { delivery } from "./http.js";

const when = (t) => (t ? t.replace("T", " ").replace(/\.\d+/, "") : "—");
const describe = (e) => (e instanceof ApiError ? e.describe() : String(e));

export async function render(root, { arg, params }) {
  const slug = arg ? decodeURIComponent(arg) : null;
  if (slug && params.event) return renderEvent(root, slug, params.event);
  if (slug) return renderEndpoint(root, slug);
  return renderList(root);
}

// ---- the endpoints ----

async function renderList(root) {
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  root.append(h("h1", {}, "Webhooks"), status, h("section", { class: "card" },
    h("p", { class: "muted" }, "Inbound endpoints: a provider posts to the address, the event is stored and sent on to each target as an HTTP job. Open one for its events and deliveries."),
    table, pager), ...(can("admin") ? [createEndpoint(() => load())] : []));
  const cursors = [""];
  let page = { endpoints: [], next: null }, shown = "";
  const load = async () => {
    try {
      page = await get(`v1/webhook-endpoints${qs({ after: cursors[cursors.length - 1], limit: 100 })}`);
      status.textContent = "";
    } catch (e) { status.textContent = describe(e); return; }
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const remove = async (slug) => {
    try {
      await del(`v1/webhook-endpoints/${encodeURIComponent(slug)}`);
      toast(`Webhook endpoint ${slug} deleted`);
      await load();
    } catch (e) { toast(describe(e), true); }
  };
  const draw = () => {
    const admin = can("admin");
    clear(table).append(h("table", { id: "webhooks-table" },
      h("thead", {}, h("tr", {}, ...["Endpoint", "Address", "Signature", "Dedup header", "Targets", "Created", admin ? "Actions" : null].filter(Boolean).map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...page.endpoints.map((e) => h("tr", { "data-endpoint": e.slug },
        h("td", {}, h("a", { href: `#/webhooks/${encodeURIComponent(e.slug)}` }, e.slug)),
        h("td", { class: "mono" }, `POST ${e.path}`),
        h("td", {}, e.signature ? `${e.signature.scheme} (${e.signature.header})` : "none"),
        h("td", { class: "mono" }, e.event_id_header || "—"),
        h("td", { class: "mono" }, e.targets.join("\n")),
        h("td", {}, when(e.created_at)),
        admin ? h("td", {}, deleteButton(e.slug, () => remove(e.slug))) : null)))));
    if (!page.endpoints.length) table.append(h("p", { class: "muted" }, can("admin") ? "No webhook endpoints yet: create one below." : "No webhook endpoints yet."));
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Previous"),
      h("button", { type: "button", class: "ghost", disabled: !page.next, onclick: () => { cursors.push(page.next); load(); } }, "Next"));
  };
  await load();
  let tick = 0;
  return { onLive() { if (++tick % 5 === 0) load().catch(() => {}); } };
}

// "New endpoint" (admin): POST /v1/webhook-endpoints as typed; the API checks the slug,
// the scheme, the headers and each target URL (its SSRF guard) and names the field.
function createEndpoint(reload) {
  const i = {
    slug: h("input", { type: "text", required: true, autocomplete: "off", placeholder: "acme-github" }),
    "signature.scheme": h("select", {}, h("option", { value: "" }, "none"), h("option", { value: "hmac_sha256" }, "hmac_sha256"), h("option", { value: "stripe" }, "stripe")),
    "signature.header": h("input", { type: "text", autocomplete: "off", placeholder: "X-Hub-Signature-256" }),
    "signature.secret": h("input", { type: "password", autocomplete: "new-password" }),
    event_id_header: h("input", { type: "text", autocomplete: "off", placeholder: "X-GitHub-Delivery" }),
    targets: h("textarea", { spellcheck: "false", placeholder: "https://app.example.com/hooks/github" }),
  };
  const { err, reset, bad, fail } = formErrors(i, "endpoint-error", "slug");
  const out = h("p", { role: "status", id: "endpoint-created", class: "created" });
  const form = h("form", { class: "card create", id: "endpoint-form", novalidate: true, "aria-label": "Create a webhook endpoint" },
    h("h2", {}, "New endpoint"),
    h("div", { class: "filters" }, field("ep-slug", "Slug (a-z 0-9 _ . -)", i.slug),
      field("ep-dedup", "Dedup header (provider's event id; optional)", i.event_id_header)),
    group("Signature",
      field("ep-scheme", "Scheme", i["signature.scheme"]),
      field("ep-sig-header", "Header", i["signature.header"]),
      field("ep-secret", "Secret (never shown again)", i["signature.secret"])),
    field("ep-targets", "Targets (one URL per line; each event is POSTed to each)", i.targets),
    err, h("button", { type: "submit" }, "Create endpoint"), out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    reset(); out.textContent = "";
    const body = { slug: i.slug.value.trim(), targets: items(i.targets) };
    if (!body.slug) return bad(i.slug, "slug: required");
    const scheme = i["signature.scheme"].value;
    if (scheme) {
      body.signature = { scheme, header: i["signature.header"].value.trim(), secret: i["signature.secret"].value };
    } else if (i["signature.header"].value.trim() || i["signature.secret"].value) {
      return bad(i["signature.scheme"], "signature.scheme: choose one to use a header and secret");
    }
    const dedup = i.event_id_header.value.trim();
    if (dedup) body.event_id_header = dedup;
    try {
      const r = await post("v1/webhook-endpoints", body);
      form.reset();
      out.textContent = `Created ${r.slug}: providers POST to ${location.origin}${r.path}`;
      toast(`Webhook endpoint ${r.slug} created`);
      await reload();
    } catch (e) { fail(e); }
  });
  return form;
}

// ---- one endpoint: its events ----

async function renderEndpoint(root, slug) {
  const enc = encodeURIComponent(slug);
  const ep = await get(`v1/webhook-endpoints/${enc}`);
  const status = h("p", { class: "error", role: "alert" });
  const table = h("div", { class: "scroll" });
  const pager = h("div", { class: "actions" });
  root.append(
    h("p", {}, h("a", { href: "#/webhooks" }, "← Webhooks")),
    h("h1", {}, `Webhook ${ep.slug}`),
    h("section", { class: "card" }, h("dl", { class: "kv", id: "endpoint-facts" },
      h("dt", {}, "Address"), h("dd", { class: "mono" }, `POST ${ep.path}`),
      // A rotated-away address still in its grace still takes events: show it until then.
      ...(ep.previous_paths || []).flatMap((o) => [
        h("dt", {}, "Previous address"),
        h("dd", { class: "mono" }, `POST ${o.path} — accepted until ${time(o.accepted_until_ms)}`)]),
      h("dt", {}, "Signature"), h("dd", {}, ep.signature ? `${ep.signature.scheme}, header ${ep.signature.header}` : "none (any caller who knows the address)"),
      h("dt", {}, "Dedup header"), h("dd", { class: "mono" }, ep.event_id_header || "— (no deduplication)"),
      h("dt", {}, "Targets"), h("dd", { class: "mono" }, ep.targets.join("\n")),
      h("dt", {}, "Created"), h("dd", {}, when(ep.created_at)))),
    ...(can("admin") ? [replaySince(slug)] : []),
    h("section", { class: "card" }, h("h2", {}, "Events (newest first)"), status, table, pager));
  const befores = [null];
  let page = { events: [] }, shown = "";
  const load = async () => {
    try {
      page = await get(`webhooks/${enc}/events${qs({ before: befores[befores.length - 1], limit: 50 })}`);
      status.textContent = "";
    } catch (e) { status.textContent = describe(e); return; }
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const replay = async (id) => {
    try {
      const r = await post(`v1/webhook-endpoints/${enc}/events/${id}/replay`);
      toast(`Event ${id} replayed: ${r.deliveries} deliver${r.deliveries === 1 ? "y" : "ies"}`);
    } catch (e) { toast(describe(e), true); }
  };
  const draw = () => {
    const admin = can("admin");
    clear(table).append(h("table", { id: "events-table" },
      h("thead", {}, h("tr", {}, ...["Event", "Received", "Provider id", "Content type", "Body", admin ? "Actions" : null].filter(Boolean).map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...page.events.map((e) => h("tr", { "data-event": e.id },
        h("td", {}, h("a", { href: `#/webhooks/${enc}?event=${e.id}` }, String(e.id))),
        h("td", {}, time(e.received_at_unix_ms)),
        h("td", { class: "mono" }, e.provider_event_id || "—"),
        h("td", { class: "mono" }, (e.headers && e.headers["content-type"]) || "—"),
        h("td", { class: "mono" }, e.body_preview + (e.body_chars > e.body_preview.length ? " …" : "")),
        admin ? h("td", {}, h("button", { type: "button", class: "ghost", "data-action": "replay", onclick: () => replay(e.id) }, "Replay")) : null)))));
    if (!page.events.length) table.append(h("p", { class: "muted" }, befores.length > 1 ? "No older events." : "No events received yet."));
    clear(pager).append(
      h("button", { type: "button", class: "ghost", disabled: befores.length === 1, onclick: () => { befores.pop(); load(); } }, "Newer"),
      h("button", { type: "button", class: "ghost", disabled: !page.next_before, onclick: () => { befores.push(page.next_before); load(); } }, "Older"));
  };
  await load();
  let tick = 0;
  return { onLive() { if (++tick % 2 === 0) load().catch(() => {}); } };
}

// "Replay every event since": an RFC 3339 time, checked in the page, then by the API (at
// most 1000 events at once).
function replaySince(slug) {
  const input = h("input", { type: "text", size: 26, placeholder: "2026-11-24T09:00:00Z", value: new Date(Date.now() - 3600_000).toISOString().replace(/\.\d+Z$/, "Z") });
  const out = h("p", { role: "status", id: "replay-since-result" });
  const form = h("form", { class: "filters card", id: "replay-since", "aria-label": "Replay events since a time" },
    field("replay-since-at", "Replay every event received since (RFC 3339)", input),
    h("div", {}, h("button", { type: "submit" }, "Replay since")), out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const since = input.value.trim();
    if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/.test(since) || Number.isNaN(Date.parse(since))) {
      out.textContent = "since: an RFC 3339 time such as 2026-11-24T09:00:00Z";
      return;
    }
    try {
      const r = await post(`v1/webhook-endpoints/${encodeURIComponent(slug)}/replay`, { since });
      out.textContent = `Replayed ${r.events} event${r.events === 1 ? "" : "s"}: ${r.deliveries} deliver${r.deliveries === 1 ? "y" : "ies"}.`;
    } catch (e) { out.textContent = describe(e); }
  });
  return form;
}

// ---- one event: payload and deliveries ----

// What each attempt of a delivery got back: "#1 503", "#2 200"; a completed job's final
// response is its result.
function attempts(j) {
  return j.attempts.map((a, i) => {
    const d = delivery(a.error);
    const last = i === j.attempts.length - 1;
    const response = d.response || (last && a.outcome === "completed" ? j.result : null);
    const code = response && response.status !== undefined ? String(response.status) : (d.error ? "error" : "—");
    return h("li", { "data-outcome": a.outcome || "running", title: d.error || "" }, `#${a.attempt} ${a.outcome || "running"} ${code}`);
  });
}

async function renderEvent(root, slug, idText) {
  const enc = encodeURIComponent(slug);
  const id = Number(idText);
  const body = h("div");
  root.append(h("p", {}, h("a", { href: `#/webhooks/${enc}` }, `← Webhook ${slug}`)), body);
  const cursors = [null];
  let page = null, shown = "";
  const load = async () => {
    page = await get(`webhooks/${enc}/events/${encodeURIComponent(idText)}${qs({ cursor: cursors[cursors.length - 1] })}`);
    const fp = JSON.stringify(page);
    if (fp !== shown) { shown = fp; draw(); }
  };
  const replay = async () => {
    try {
      const r = await post(`v1/webhook-endpoints/${enc}/events/${id}/replay`);
      toast(`Event ${id} replayed: ${r.deliveries} deliver${r.deliveries === 1 ? "y" : "ies"}`);
      cursors.length = 1;
      await load();
    } catch (e) { toast(describe(e), true); }
  };
  const draw = () => {
    const e = page.event;
    const received = e.received_at_unix_ms;
    clear(body).append(
      h("h1", {}, `Event ${e.id} of ${slug}`),
      // (Node.append writes a null as the text "null": spread instead.)
      ...(can("admin") ? [h("div", { class: "actions" }, h("button", { type: "button", id: "event-replay", onclick: replay }, "Replay this event"))] : []),
      h("section", { class: "card" }, h("h2", {}, "Deliveries"),
        h("p", { class: "muted" }, "The HTTP jobs this event was sent on as (one per target, again on every replay), newest first. Open one for every response body."),
        page.deliveries.length ? h("div", { class: "scroll" }, h("table", { id: "deliveries-table" },
          h("thead", {}, h("tr", {}, ...["Job", "Target", "Sent", "State", "Attempts (outcome, response status)", "Last error"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, ...page.deliveries.map((j) => {
            const last = j.attempts.length ? delivery(j.attempts[j.attempts.length - 1].error).error : "";
            const replayed = j.enqueued_at_unix_ms !== null && j.enqueued_at_unix_ms > received;
            return h("tr", { "data-job": j.id, "data-state": j.state },
              h("td", {}, h("a", { href: `#/job/${j.id}` }, String(j.id))),
              h("td", { class: "mono" }, (j.args && j.args.url) || ""),
              h("td", {}, `${time(j.enqueued_at_unix_ms)}${replayed ? " (replay)" : ""}`),
              h("td", {}, stateBadge(j.state)),
              h("td", {}, j.attempts.length ? h("ul", { class: "attempts" }, ...attempts(j)) : "not sent yet"),
              h("td", { class: "errtext" }, last));
          })))) : h("p", { class: "muted", id: "no-deliveries" }, page.has_more
          ? "None among the jobs examined so far: the HTTP queue is busy; look further back."
          : "No deliveries found."),
        h("div", { class: "actions" },
          h("button", { type: "button", class: "ghost", disabled: cursors.length === 1, onclick: () => { cursors.pop(); load(); } }, "Newer"),
          h("button", { type: "button", class: "ghost", id: "deliveries-older", disabled: !page.has_more, onclick: () => { cursors.push(page.next_cursor); load(); } }, "Look further back"))),
      h("div", { class: "grid2" },
        h("section", { class: "card" }, h("dl", { class: "kv" },
          h("dt", {}, "Received"), h("dd", {}, time(received)),
          h("dt", {}, "Provider id"), h("dd", { class: "mono" }, e.provider_event_id || "—")),
          h("h2", {}, "Headers"), h("pre", { id: "event-headers" }, JSON.stringify(e.headers, null, 2))),
        h("section", { class: "card" }, h("h2", {}, "Body"), h("pre", { id: "event-body" }, prettyBody(e.body)))));
  };
  await load();
  return { onLive() { load().catch(() => {}); } };
}

// A JSON body indented; anything else as received.
function prettyBody(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}
