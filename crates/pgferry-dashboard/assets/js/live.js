// The live stream (/ui/api/events): queue snapshots every second. Keeps a short history
// for rates and charts, and tells the current page when something changed.

const MAX = 300;
export const history = []; // [{at, queues: [...]}]
const listeners = new Set();
let source = null;

export function start(onSignedOut) {
  stop();
  source = new EventSource("/ui/api/events");
  const status = document.getElementById("live");
  status.hidden = false;
  source.addEventListener("open", () => { status.textContent = "live"; status.className = "live on"; });
  source.addEventListener("error", () => { status.textContent = "reconnecting"; status.className = "live off"; });
  source.addEventListener("problem", (e) => { status.textContent = JSON.parse(e.data).message; status.className = "live off"; });
  source.addEventListener("signed-out", () => { stop(); onSignedOut(); });
  source.addEventListener("queues", (e) => {
    status.textContent = "live"; status.className = "live on";
    const d = JSON.parse(e.data);
    const snap = { at: d.at_unix_ms, queues: d.queues || [] };
    history.push(snap);
    if (history.length > MAX) history.shift();
    for (const f of listeners) {
      try { f(snap); } catch (err) { console.error(err); }
    }
  });
}

export function stop() {
  if (source) source.close();
  source = null;
  history.length = 0;
}

export function subscribe(f) {
  listeners.add(f);
  return () => listeners.delete(f);
}

export function latest() {
  return history.length ? history[history.length - 1] : null;
}

// Per-second rate of counter `name` (summed over queues, or one queue) between the last
// two snapshots at least `span` ms apart.
export function rateOf(name, queue, span = 1000) {
  if (history.length < 2) return null;
  const b = history[history.length - 1];
  let a = null;
  for (let i = history.length - 2; i >= 0; i--) {
    if (b.at - history[i].at >= span) { a = history[i]; break; }
  }
  if (!a) a = history[0];
  const dt = (b.at - a.at) / 1000;
  if (dt <= 0) return null;
  return Math.max(0, (total(b, name, queue) - total(a, name, queue)) / dt);
}

export function total(snap, name, queue) {
  let s = 0;
  for (const q of snap.queues) if (!queue || q.name === queue) s += Number(q.counts[name] || 0);
  return s;
}

// A fingerprint of one queue's counts (or all): pages re-read when it changes.
export function fingerprint(snap, queue) {
  return JSON.stringify(snap.queues.filter((q) => !queue || q.name === queue).map((q) => [q.name, q.paused, q.counts]));
}
