// The tenant's API keys (create with scopes, revoke) and its audit log (admin only; the
// server refuses these calls for other keys too).

import { h, clear, time, toast, field } from "../dom.js";
import { get, post, qs, session, ApiError } from "../api.js";

const SCOPES = ["read", "produce", "consume", "admin"];

export async function render(root) {
  const keysBox = h("div", { class: "scroll" });
  const created = h("div", { role: "status" });
  const auditBox = h("div", { class: "scroll" });
  const more = h("div", { class: "actions" });
  const boxes = Object.fromEntries(SCOPES.map((s) => [s, h("input", { type: "checkbox", checked: s === "read" })]));
  const label = h("input", { type: "text", maxlength: 200, size: 24 });
  const err = h("p", { class: "error", role: "alert" });
  const form = h("form", { novalidate: true, "aria-label": "Create an API key" },
    h("h2", {}, "New key"),
    h("fieldset", { class: "filters" }, h("legend", {}, "Scopes"),
      ...SCOPES.map((s) => h("div", {}, h("label", { for: `scope-${s}` }, s), Object.assign(boxes[s], { id: `scope-${s}` })))),
    field("key-label", "Label (optional)", label),
    err, h("button", { type: "submit", id: "create-key" }, "Create key"), created);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = ""; clear(created);
    const scopes = SCOPES.filter((s) => boxes[s].checked);
    if (!scopes.length) { err.textContent = "scopes: choose at least one"; boxes.read.focus(); return; }
    try {
      const r = await post("keys", { scopes, label: label.value.trim() || null });
      created.append(h("p", {}, "Copy this key now; it is not shown again:"), h("p", { class: "newkey mono", id: "new-key" }, r.key));
      await loadKeys();
      await loadAudit(true);
    } catch (e) { err.textContent = e instanceof ApiError ? e.describe() : String(e); }
  });
  root.append(h("h1", {}, `Keys & audit · ${session.identity.tenant}`),
    h("div", { class: "grid2" }, h("section", { class: "card" }, h("h2", {}, "Keys"), keysBox), h("section", { class: "card" }, form)),
    h("section", { class: "card" }, h("h2", {}, "Audit log"), auditBox, more));

  const loadKeys = async () => {
    const r = await get("keys");
    clear(keysBox).append(h("table", { id: "keys-table" },
      h("thead", {}, h("tr", {}, ...["Prefix", "Scopes", "Label", "State", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...r.keys.map((k) => h("tr", { "data-prefix": k.prefix },
        h("td", { class: "mono" }, k.prefix), h("td", {}, k.scopes.join(", ")), h("td", {}, k.label || ""),
        h("td", {}, k.revoked ? "revoked" : k.prefix === session.identity.key_prefix ? "active (this session)" : "active"),
        h("td", {}, k.revoked ? null : h("button", { type: "button", class: "ghost", "data-action": "revoke", onclick: async () => {
          try { await post(`keys/${encodeURIComponent(k.prefix)}/revoke`); toast(`Key ${k.prefix} revoked`); await loadKeys(); await loadAudit(true); } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
        } }, "Revoke")))))));
  };
  let before = null;
  const loadAudit = async (reset) => {
    if (reset) { before = null; clear(auditBox); }
    const r = await get(`audit${qs({ before, limit: 50 })}`);
    let table = auditBox.querySelector("tbody");
    if (!table) {
      table = h("tbody");
      auditBox.append(h("table", { id: "audit-table" }, h("thead", {}, h("tr", {}, ...["When", "Actor", "Key", "Action", "Target", "Detail"].map((t) => h("th", { scope: "col" }, t)))), table));
    }
    for (const e of r.entries) {
      table.append(h("tr", {}, h("td", {}, time(e.at_unix_ms)), h("td", {}, e.actor), h("td", {}, e.key_id ?? "—"), h("td", {}, e.action), h("td", { class: "mono" }, e.target || ""), h("td", { class: "mono" }, e.detail ? JSON.stringify(e.detail) : "")));
    }
    before = r.next_before;
    clear(more);
    if (before) more.append(h("button", { type: "button", class: "ghost", onclick: () => loadAudit(false) }, "Older entries"));
  };
  await loadKeys();
  await loadAudit(true);
  return null;
}
