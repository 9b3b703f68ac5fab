// Create / edit forms for the /v1 API's objects (webhook endpoints, monitors, notification
// targets, schedules) and the two-click delete. The API validates: its error, which names
// the field, is shown next to the form and on that input (aria-invalid, focused). A form is
// never redrawn on an error, so nothing the operator typed is lost.

import { h } from "./dom.js";
import { ApiError } from "./api.js";

// `inputs`: { apiFieldName: element }; `named`: the input a 409 (the name is taken) is
// about, since the API's conflict names no field. Returns { err, reset, bad, fail }.
export function formErrors(inputs, id, named) {
  const err = h("p", { class: "error", role: "alert", id });
  const reset = () => {
    err.textContent = "";
    for (const x of Object.values(inputs)) x.removeAttribute("aria-invalid");
  };
  const bad = (input, message) => {
    err.textContent = message;
    if (input) {
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  };
  // An API error: the input it names ("targets[1]" → targets, "signature.header" as is,
  // else its first part), or none.
  const fail = (e) => {
    if (!(e instanceof ApiError)) return bad(null, String(e));
    const f = (e.field || (e.status === 409 ? named : "") || "").replace(/\[\d+\]/g, "");
    bad(inputs[f] || inputs[f.split(".")[0]] || null, e.describe());
  };
  return { err, reset, bad, fail };
}

// A whole number typed in a text field ("" → undefined, the API's default); NaN when it
// is not one, for the page to refuse naming the field.
export function whole(input) {
  const t = input.value.trim().replace(/[_ ]/g, "");
  if (t === "") return undefined;
  return /^-?\d+$/.test(t) ? Number(t) : NaN;
}

// Lines or commas of a text field, trimmed, empties dropped.
export function items(input) {
  return input.value.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
}

// A Delete button that asks first: the first click (or Enter / Space) arms it ("Confirm
// delete NAME"), the second deletes; Escape or 6 s disarm it.
export function deleteButton(name, onDelete, attrs = {}) {
  let armed = false, timer = null;
  const b = h("button", { type: "button", class: "ghost", "data-action": "delete", "aria-label": `Delete ${name}`, ...attrs }, "Delete");
  const disarm = () => {
    armed = false;
    clearTimeout(timer);
    b.className = "ghost";
    b.textContent = "Delete";
    b.setAttribute("aria-label", `Delete ${name}`);
  };
  b.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      b.className = "danger";
      b.textContent = `Confirm delete ${name}`;
      b.setAttribute("aria-label", `Confirm: delete ${name}`);
      timer = setTimeout(disarm, 6000);
      return;
    }
    disarm();
    b.disabled = true;
    try { await onDelete(); } finally { b.disabled = false; }
  });
  b.addEventListener("keydown", (ev) => { if (ev.key === "Escape") disarm(); });
  return b;
}

// A fieldset of labelled inputs laid out like the filter bars.
export function group(legend, ...children) {
  return h("fieldset", { class: "filters form-group" }, h("legend", {}, legend), ...children);
}
