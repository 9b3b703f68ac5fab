// One workflow instance: status, keys, input/state/result, its step history drawn as a
// timeline, its children (and parent) as a graph; send a signal (JSON payload checked in
// the page, then by the API), cancel (cascades to descendants), retry from the failed step.
// Re-read every live tick while open, so a signal's effect shows without a reload.

import { h, clear, time, toast, pretty, stateBadge, field } from "../dom.js";
import { get, post, qs, can, ApiError } from "../api.js";
import { timeline } from "../timeline.js";

const ENDED = ["done", "failed", "cancelled"];

export async function render(root, { arg }) {
  const id = arg;
  const body = h("div");
  root.append(h("p", {}, h("a", { href: "#/workflows" }, "← Workflows")), body);
  let wf = null, kids = { children: [], has_more: false };
  let shown = "";
  // The signal form lives outside the redrawn part: typing survives live updates.
  const sig = {
    name: h("input", { type: "text", required: true, size: 16 }),
    payload: h("textarea", { spellcheck: "false" }),
  };
  sig.payload.value = "{}";
  const sigErr = h("p", { class: "error", role: "alert", id: "signal-error" });
  const sigForm = h("form", { class: "card", id: "signal-form", novalidate: true, "aria-label": "Send a signal" },
    h("h2", {}, "Send a signal"),
    field("sig-name", "Signal name", sig.name),
    field("sig-payload", "Payload (JSON)", sig.payload),
    sigErr, h("button", { type: "submit" }, "Send signal"));
  sigForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sigErr.textContent = "";
    const name = sig.name.value.trim();
    if (!name) { sigErr.textContent = "name: required"; sig.name.focus(); return; }
    let payload;
    try { payload = JSON.parse(sig.payload.value || "null"); } catch (e) {
      sigErr.textContent = `payload: not valid JSON (${e.message})`; sig.payload.focus(); return;
    }
    try {
      const r = await post(`v1/workflows/${encodeURIComponent(id)}/signal`, { name, payload });
      toast(`Signal ${name} ${r.delivered ? "delivered" : "stored in the inbox"}`);
      sig.name.value = "";
      await load();
    } catch (e) { sigErr.textContent = e instanceof ApiError ? e.describe() : String(e); }
  });

  const load = async () => {
    const [i, c] = await Promise.all([
      get(`v1/workflows/${encodeURIComponent(id)}`),
      get(`workflows/${encodeURIComponent(id)}/children${qs({ limit: 200 })}`),
    ]);
    wf = i; kids = c;
    const fp = JSON.stringify([wf, kids]);
    if (fp !== shown) { shown = fp; draw(); }
  };
  let armed = false;
  const act = async (what) => {
    try {
      if (what === "cancel") {
        await post(`v1/workflows/${wf.id}/cancel${qs({ reason: "cancelled from the dashboard" })}`);
        toast(`Workflow ${wf.id}: cancelled`);
      } else {
        const r = await post(`v1/workflows/${wf.id}/retry`);
        toast(`Workflow ${wf.id}: runs again from ${r.step}`);
      }
      await load();
    } catch (e) { toast(e instanceof ApiError ? e.describe() : String(e), true); }
  };
  const draw = () => {
    const i = wf;
    const actions = h("div", { class: "actions" });
    if (can("produce")) {
      if (!ENDED.includes(i.status)) {
        actions.append(h("button", { type: "button", id: "wf-cancel", class: "danger", onclick: () => {
          if (!armed) { armed = true; draw(); return; }
          armed = false; act("cancel");
        } }, armed ? "Confirm: cancel with descendants" : "Cancel"));
      }
      if (i.status === "failed") actions.append(h("button", { type: "button", id: "wf-retry", onclick: () => act("retry") }, `Retry from ${i.step}`));
    }
    sigForm.hidden = !can("produce") || ENDED.includes(i.status);
    const canvas = h("canvas", { id: "wf-timeline", role: "img", class: "timeline" });
    clear(body).append(
      h("h1", {}, `Workflow ${i.id} `, h("span", { id: "wf-status" }, stateBadge(i.status))),
      actions,
      h("div", { class: "grid2" },
        h("section", { class: "card" }, h("dl", { class: "kv", id: "wf-facts" },
          h("dt", {}, "Kind"), h("dd", {}, i.kind),
          h("dt", {}, "Queue"), h("dd", {}, h("a", { href: `#/workflows${qs({ queue: i.queue })}` }, i.queue)),
          h("dt", {}, "Step"), h("dd", { id: "wf-step" }, i.step),
          h("dt", {}, "Attempt"), h("dd", {}, `${i.attempt} of at most ${i.max_attempts}`),
          h("dt", {}, "Awaits"), h("dd", {}, i.awaits && i.awaits.length ? `${i.awaits.join(", ")} until ${time(i.await_deadline_unix_ms)}` : "—"),
          h("dt", {}, "Signals in inbox"), h("dd", {}, String(i.inbox_pending)),
          h("dt", {}, "Correlation key"), h("dd", {}, i.correlation_key || "—"),
          h("dt", {}, "Concurrency key"), h("dd", {}, i.concurrency_key || "—"),
          h("dt", {}, "Worker"), h("dd", {}, i.worker || "—"),
          h("dt", {}, "Created"), h("dd", {}, time(i.created_at_unix_ms)),
          h("dt", {}, "Updated"), h("dd", {}, time(i.updated_at_unix_ms)),
          h("dt", {}, "Finished"), h("dd", {}, time(i.finished_at_unix_ms)),
          h("dt", {}, "Error"), h("dd", { class: "errtext" }, i.error || "—"))),
        h("section", { class: "card" }, h("h2", {}, "Input"), pretty(i.input), h("h2", {}, "State"), pretty(i.state),
          h("h2", {}, "Result"), pretty(i.result))),
      h("section", { class: "card" }, h("h2", {}, "Step history"),
        h("div", { class: "legend" }, h("span", { class: "l1" }, "step ran (claimed → outcome)"), h("span", { class: "l3" }, "failed / retried")),
        canvas,
        historyTable(i.history)),
      graph(i, kids),
    );
    timeline(canvas, i.history);
  };
  body.after(sigForm);
  await load();
  const onResize = () => { if (wf) timeline(body.querySelector("#wf-timeline"), wf.history); };
  window.addEventListener("resize", onResize);
  return {
    onLive() { load().catch(() => {}); },
    dispose() { window.removeEventListener("resize", onResize); },
  };
}

function historyTable(history) {
  if (!history.length) return h("p", { class: "muted" }, "No step has ended yet.");
  return h("div", { class: "scroll" }, h("table", { id: "wf-history" },
    h("thead", {}, h("tr", {}, ...["#", "Step", "Attempt", "Outcome", "Worker", "Started", "Ended", "Error"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, ...history.map((s) => h("tr", {},
      h("td", {}, String(s.step_seq)),
      h("td", {}, s.step),
      h("td", { class: "num" }, String(s.attempt)),
      h("td", {}, stateBadge(s.outcome)),
      h("td", {}, s.worker || "—"),
      h("td", {}, s.started_at ? time(Date.parse(s.started_at)) : "—"),
      h("td", {}, time(Date.parse(s.finished_at))),
      h("td", { class: "errtext" }, s.error || ""))))));
}

// The instance with its parent above and its children below, each a link.
function graph(i, kids) {
  const node = (x, cls) => h("li", { class: `node ${cls}`, "data-instance": x.id },
    h("a", { href: `#/workflow/${x.id}` }, `#${x.id}`), " ", x.kind ? `${x.kind} ` : "", x.status ? stateBadge(x.status) : "");
  const children = kids.children.map((c) => node(c, "child"));
  const self = h("li", { class: "node self" }, h("b", {}, `#${i.id} ${i.kind} `), stateBadge(i.status),
    children.length ? h("ul", { class: "tree", id: "wf-children" }, ...children) : h("p", { class: "muted" }, "No children."));
  const tree = i.parent_id
    ? h("ul", { class: "tree" }, h("li", { class: "node parent" }, h("a", { href: `#/workflow/${i.parent_id}`, id: "wf-parent" }, `parent #${i.parent_id}`), h("ul", { class: "tree" }, self)))
    : h("ul", { class: "tree" }, self);
  return h("section", { class: "card" }, h("h2", {}, "Parent and children"),
    i.children_pending ? h("p", { class: "muted" }, `${i.children_pending} children still running.`) : null,
    tree, kids.has_more ? h("p", { class: "muted" }, "Showing the first 200 children.") : null);
}
