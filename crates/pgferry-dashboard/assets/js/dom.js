// Small DOM helpers. Text is always set with textContent (never innerHTML): job args,
// errors and names are user data.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function time(ms) {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function num(n) {
  return n === undefined || n === null ? "—" : Number(n).toLocaleString("en-US");
}

export function rate(n) {
  if (n === undefined || n === null || !isFinite(n)) return "—";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1);
}

export function stateBadge(state) {
  return h("span", { class: `state state-${state}` }, state);
}

export function toast(message, bad = false) {
  const box = document.getElementById("toasts");
  const t = h("div", { class: bad ? "toast bad" : "toast" }, message);
  box.append(t);
  setTimeout(() => t.remove(), bad ? 8000 : 4000);
}

// A labelled field in a filter bar or form.
export function field(id, label, input) {
  input.id = id;
  return h("div", {}, h("label", { for: id }, label), input);
}

export function select(options, value) {
  const s = h("select");
  for (const o of options) {
    const [v, text] = Array.isArray(o) ? o : [o, o];
    s.append(h("option", { value: v, selected: v === value }, text));
  }
  return s;
}

export function pretty(v) {
  return h("pre", {}, JSON.stringify(v, null, 2));
}
